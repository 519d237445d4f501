//! What the eviction webhook adds to an eviction, measured, not asserted: 200 evictions that
//! are let through, answered by the API server without the webhook and then with it, in the
//! same run on the same pod (dry runs: the API server sends them to the webhook too, as it
//! does every eviction, and they leave the pod in place). Prints p50/p99 of both.
//!
//! `cargo test --test intercept_bench -- --nocapture`

mod support;

use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use support::drain::lone;
use support::fixtures::DeploymentBuilder;
use support::intercept::{DRY_RUN, reviews, until_in_effect};
use support::operator::Operator;
use support::pods::ready_pod;
use support::stats::percentile;
use support::{create_ready_node, with_namespace};

const EVICTIONS: usize = 200;

/// Times `EVICTIONS` dry-run evictions of `pod` (ms, sorted); every one must be allowed.
async fn time_evictions(pods: &Api<Pod>, pod: &str) -> Vec<f64> {
    let mut ms = Vec::with_capacity(EVICTIONS);
    for _ in 0..EVICTIONS {
        let started = Instant::now();
        pods.evict(pod, &DRY_RUN)
            .await
            .expect("an allowed eviction");
        ms.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    ms.sort_by(f64::total_cmp);
    ms
}

#[tokio::test]
async fn the_latency_the_webhook_adds_to_an_allowed_eviction() {
    with_namespace(|client, ns| async move {
        let node = format!("{ns}-a");
        create_ready_node(&client, &ns, &node).await;
        let app: DeploymentBuilder = lone(&ns, "web");
        let d = app.build();
        Api::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &d)
            .await
            .unwrap();
        let pod = ready_pod(&client, &ns, "web").await;
        let name = pod.metadata.name.clone().unwrap();
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);

        let without = time_evictions(&pods, &name).await;
        let op = Operator::intercepting(&ns, &[]).await;
        until_in_effect(&client, &op, &ns, &name).await;
        let reviews_before = reviews(&op).await;
        let with = time_evictions(&pods, &name).await;
        let reviews = reviews(&op).await - reviews_before;

        println!("{EVICTIONS} allowed evictions (dry run), same pod, same run (ms):");
        println!("                      p50      p99");
        println!(
            "without the webhook   {:<8.2} {:.2}",
            percentile(&without, 50.0),
            percentile(&without, 99.0)
        );
        println!(
            "with the webhook      {:<8.2} {:.2}   ({reviews} reviews answered)",
            percentile(&with, 50.0),
            percentile(&with, 99.0)
        );
        assert_eq!(
            reviews as usize, EVICTIONS,
            "every eviction of the second round went through the webhook"
        );
    })
    .await;
}
