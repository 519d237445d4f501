//! `--intercept-namespace-selector` (chart `intercept.namespaceSelector`) against the real API
//! server: the eviction of a lone replica on a cordoned node is held (429) when the selector
//! selects its namespace, and let through at once, starting nothing, when it does not.
//! Test namespaces carry the label `disruption-guard.io/test`.

mod support;

use support::drain::{cordon, deploy_on, lone, metric};
use support::intercept::{evict, until_in_effect};
use support::operator::Operator;
use support::{create_ready_node, with_namespace};

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
