//! `--intercept-namespace-selector` (chart `intercept.namespaceSelector`) against the real API
//! server, in both places it applies:
//!
//! - in the webhook's registration, which the operator builds itself with
//!   `--intercept-create-webhook` (the chart renders the same; `tests/chart.rs` keeps them
//!   equal): the API server never sends the webhook an eviction in a namespace the selector
//!   leaves out (its reviews counter does not move), while it sends one it selects;
//! - in the operator's own decision, for a registration that does not carry it (the harness
//!   registers the webhook without one): the eviction of a lone replica on a cordoned node is
//!   held (429) when the selector selects its namespace, and let through at once, starting
//!   nothing, when it does not.
//!
//! Test namespaces carry the label `disruption-guard.io/test`.

mod support;

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use support::drain::{cordon, deploy_on, lone, metric};
use support::intercept::{evict, reviews, until_in_effect};
use support::operator::Operator;
use support::{create_ready_node, kubectl, with_namespace};

/// A lone replica on a cordoned node of its own, and an operator with `selector`; the code of
/// the pod's eviction, and the operator's metrics before and after it.
async fn evict_with_selector(
    client: kube::Client,
    ns: String,
    selector: &str,
) -> (u16, String, String) {
    let a = format!("{ns}-a");
    create_ready_node(&client, &ns, &a).await;
    let pod = deploy_on(&client, &ns, lone(&ns, "web"), &a).await;
    let name = pod.metadata.name.clone().unwrap();
    // Cordoned before the operator starts, so its caches hold the signal when it is ready.
    cordon(&a);
    let flag = format!("--intercept-namespace-selector={selector}");
    let op = Operator::intercepting(&ns, &[&flag]).await;
    until_in_effect(&client, &op, &ns, &name).await;
    let before = op.metrics().await;
    let (code, message) = evict(&client, &ns, &name, None).await;
    eprintln!("{selector}: {code} {message}");
    (code, before, op.metrics().await)
}

#[tokio::test]
async fn an_eviction_in_a_namespace_the_selector_selects_is_held() {
    with_namespace(|client, ns| async move {
        let (code, _, metrics) = evict_with_selector(client, ns, "disruption-guard.io/test").await;
        assert_eq!(code, 429);
        assert_eq!(
            metric(&metrics, "disruption_guard_intercept_denied_total"),
            1.0
        );
    })
    .await;
}

#[tokio::test]
async fn an_eviction_in_a_namespace_the_selector_leaves_out_is_let_through_at_once() {
    with_namespace(|client, ns| async move {
        let (code, before, metrics) =
            evict_with_selector(client, ns, "disruption-guard.io/trial=true").await;
        assert!(code < 300, "{code}");
        assert_eq!(
            metric(&metrics, "disruption_guard_intercept_denied_total"),
            0.0
        );
        let out_of_scope = "disruption_guard_intercept_allowed_total{reason=\"out_of_scope\"}";
        assert_eq!(
            metric(&metrics, out_of_scope) - metric(&before, out_of_scope),
            1.0
        );
    })
    .await;
}

/// Deletes a webhook registration when the test ends, passed or failed.
struct Registered(String);

impl Drop for Registered {
    fn drop(&mut self) {
        let _ = kubectl()
            .args(["delete", "validatingwebhookconfiguration", &self.0])
            .arg("--ignore-not-found")
            .output();
    }
}

#[tokio::test]
async fn the_operators_own_registration_never_sends_an_eviction_the_selector_leaves_out() {
    with_namespace(|_, inside| async move {
        with_namespace(|client, outside| async move {
            // A lone replica in each namespace, on one cordoned node.
            let a = format!("{inside}-a");
            create_ready_node(&client, &inside, &a).await;
            let held = deploy_on(&client, &inside, lone(&inside, "web"), &a).await;
            let held = held.metadata.name.unwrap();
            let passed = deploy_on(&client, &outside, lone(&inside, "web"), &a).await;
            let passed = passed.metadata.name.unwrap();
            cordon(&a);
            // The operator registers the webhook itself (an admin kubeconfig, as `make run`),
            // for both namespaces, the selector naming one of them.
            let name = format!("dg-scope-{inside}");
            let _registered = Registered(name.clone());
            let op = Operator::start_with(
                &inside,
                vec![
                    format!("--namespaces={inside},{outside}"),
                    "--insecure-no-auth".into(),
                    "--intercept=true".into(),
                    "--intercept-create-webhook".into(),
                    format!("--intercept-namespace={inside}"),
                    format!("--intercept-webhook={name}"),
                    format!("--intercept-secret={name}-tls"),
                    format!("--intercept-namespace-selector=kubernetes.io/metadata.name={inside}"),
                ],
            )
            .await;
            // The API server holds the selector in the registration.
            let api: kube::Api<ValidatingWebhookConfiguration> = kube::Api::all(client.clone());
            let stored = support::wait::for_some(
                "the operator to create its registration",
                std::time::Duration::from_secs(30),
                || async { api.get_opt(&name).await.ok().flatten() },
            )
            .await;
            let selector = stored.webhooks.unwrap()[0]
                .namespace_selector
                .clone()
                .unwrap();
            assert_eq!(
                selector.match_labels.unwrap()["kubernetes.io/metadata.name"],
                inside
            );
            // Evictions in `inside` reach the webhook (this waits until they do).
            until_in_effect(&client, &op, &inside, &held).await;

            // One in `outside` does not: it is let through by the API server alone.
            let before = reviews(&op).await;
            let (code, message) = evict(&client, &outside, &passed, None).await;
            assert!(code < 300, "{code} {message}");
            assert_eq!(reviews(&op).await, before, "the webhook reviewed it");
            let out_of_scope = "disruption_guard_intercept_allowed_total{reason=\"out_of_scope\"}";
            assert_eq!(metric(&op.metrics().await, out_of_scope), 0.0);

            // One in `inside` still does, and is held.
            let (code, message) = evict(&client, &inside, &held, None).await;
            assert_eq!(code, 429, "{message}");
            assert_eq!(reviews(&op).await, before + 1.0);
        })
        .await
    })
    .await;
}
