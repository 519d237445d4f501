//! Karpenter removing the node of a lone pod that nothing protects — no PDB, no window: its
//! NodeClaim is deleted, so Karpenter taints the node (`karpenter.sh/disrupted`), evicts the pod
//! through the Eviction API and retries every 429 (backing off 100 ms … 10 s). Without the
//! eviction webhook (the control, same test) the eviction kills the pod at once and the app has
//! no ready pod until Karpenter's next node runs a new one. With it, the eviction is held while
//! the Deployment rolls out: the new pod starts on a node Karpenter provisions for it, the old
//! pod goes after it, Karpenter's retry finds it gone, and the node is removed — zero samples
//! without a ready pod, no node left behind.
//!
//! Its own test binary: Karpenter is cluster-wide, and the story test counts its nodes.

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Node;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use support::drain::{Sampler, Samples, metric, node_of, until_ready_elsewhere};
use support::intercept::until_in_effect;
use support::operator::Operator;
use support::pods::ready_pods;
use support::{karpenter, wait, with_namespace};

const KARPENTER: Duration = Duration::from_secs(180);

/// Deletes the NodeClaim of the node running the app's pod and samples the app until a ready
/// pod runs on another node and Karpenter removed the old one; returns (samples, seconds).
async fn remove_the_pods_node(client: &Client, ns: &str) -> (Samples, f64) {
    let nodes: Api<Node> = Api::all(client.clone());
    let pod = wait::for_some("a ready pod of the app", KARPENTER, || async {
        ready_pods(client, ns, "api").await.pop()
    })
    .await;
    let node = node_of(&pod).unwrap();
    let claim = karpenter::node_claim_of(client, &node)
        .await
        .expect("the node's NodeClaim");
    let sampler = Sampler::start(client, ns, &["api"]);
    let started = Instant::now();
    karpenter::node_claims(client)
        .delete(&claim, &DeleteParams::background())
        .await
        .unwrap();
    until_ready_elsewhere(client, ns, "api", &node, KARPENTER).await;
    wait::until("Karpenter to remove the node", KARPENTER, || async {
        nodes.get_opt(&node).await.unwrap().is_none()
    })
    .await;
    let took = started.elapsed().as_secs_f64();
    (sampler.finish().await, took)
}

#[tokio::test]
async fn karpenter_removing_a_lone_pods_node_kills_it_without_the_webhook_and_moves_it_first_with_it()
 {
    karpenter::require();
    let client = support::client().await;
    karpenter::until_no_nodes(&client).await;
    with_namespace(|client, ns| async move {
        Api::<Deployment>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &karpenter::lone_app())
            .await
            .unwrap();

        let (without, secs_without) = remove_the_pods_node(&client, &ns).await;

        let op = Operator::intercepting(&ns, &[]).await;
        let pod = ready_pods(&client, &ns, "api").await.pop().unwrap();
        until_in_effect(&client, &op, &ns, pod.metadata.name.as_deref().unwrap()).await;
        let (with, secs_with) = remove_the_pods_node(&client, &ns).await;

        println!("                          without webhook    with webhook");
        println!("node gone after (s)       {secs_without:<18.1} {secs_with:.1}");
        println!(
            "samples (100 ms)          {:<18} {}",
            without.rounds, with.rounds
        );
        println!(
            "samples w/o ready pod     {:<18} {}",
            without.downtime_samples(),
            with.downtime_samples()
        );
        assert!(
            without.downtime_samples() > 0,
            "the control must see the pod killed"
        );
        assert_eq!(with.downtime_samples(), 0, "no sample without a ready pod");
        let metrics = op.metrics().await;
        assert!(metric(&metrics, "disruption_guard_intercept_denied_total") >= 1.0);
        assert_eq!(
            metric(
                &metrics,
                "disruption_guard_intercept_rollouts_total{result=\"rolled_out\"}"
            ),
            1.0
        );
    })
    .await;
}
