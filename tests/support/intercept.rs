//! Helpers of the eviction webhook's integration tests: evictions as each drainer sends them,
//! and waiting until the API server calls an operator's webhook.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{EvictParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

use super::drain::metric;
use super::operator::Operator;
use super::wait;

const LIMIT: std::time::Duration = std::time::Duration::from_secs(60);

/// An eviction of `pod` through `policy/<version>` (v1beta1 is what Cluster Autoscaler 1.36
/// sends), with its UID as a precondition when given, as Karpenter sends it: the HTTP code and,
/// when refused, the message. (The body is written here: kube's `evict` sends its delete
/// options as `delete_options`, which the API server ignores.)
pub async fn evict_as(
    client: &Client,
    ns: &str,
    pod: &str,
    version: &str,
    uid: Option<&str>,
) -> (u16, String) {
    let mut body = json!({
        "apiVersion": format!("policy/{version}"),
        "kind": "Eviction",
        "metadata": {"name": pod, "namespace": ns}
    });
    if let Some(uid) = uid {
        body["deleteOptions"] = json!({"preconditions": {"uid": uid}});
    }
    let request = http::Request::post(format!("/api/v1/namespaces/{ns}/pods/{pod}/eviction"))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&body).unwrap())
        .unwrap();
    match client.request::<Value>(request).await {
        Ok(_) => (201, String::new()),
        Err(kube::Error::Api(status)) => (status.code, status.message.clone()),
        Err(other) => panic!("evicting {pod} through policy/{version}: {other}"),
    }
}

pub async fn evict(client: &Client, ns: &str, pod: &str, uid: Option<&str>) -> (u16, String) {
    evict_as(client, ns, pod, "v1", uid).await
}

/// A dry-run eviction: the API server sends it to the webhook like any eviction, and it leaves
/// the pod in place.
pub const DRY_RUN: EvictParams = EvictParams {
    delete_options: None,
    post_options: PostParams {
        dry_run: true,
        field_manager: None,
    },
};

/// How many eviction reviews `op`'s webhook has answered.
pub async fn reviews(op: &Operator) -> f64 {
    metric(
        &op.metrics().await,
        "disruption_guard_intercept_reviews_total",
    )
}

/// Waits until the API server sends evictions of `ns` to `op`'s webhook: dry-run evictions of
/// `pod` (allowed, nothing happens) until the operator counts a review.
pub async fn until_in_effect(client: &Client, op: &Operator, ns: &str, pod: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    wait::until("the API server to call the webhook", LIMIT, || async {
        let _ = pods.evict(pod, &DRY_RUN).await;
        reviews(op).await > 0.0
    })
    .await;
}

/// Waits until `op`'s drain watcher has decided about more than `before` pods on cordoned
/// nodes (`disruption_guard_drain_decisions_total{decision="ignore"}`): its node cache, the
/// one the webhook's answers read, has seen the cordon.
pub async fn until_cordon_seen(op: &Operator, before: f64) {
    wait::until("the operator to see the cordon", LIMIT, || async {
        metric(
            &op.metrics().await,
            "disruption_guard_drain_decisions_total{decision=\"ignore\"}",
        ) > before
    })
    .await;
}
