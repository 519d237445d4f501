//! Karpenter forcing a node away while a lone pod under a blocking PDB runs on it: its
//! NodeClaim is deleted, so Karpenter taints the node (`karpenter.sh/disrupted`) and evicts
//! through the Eviction API, retrying every 429. Without the drain watcher the drain is stuck:
//! the PDB refuses every eviction and the node stays. With it, the Deployment is rolled out,
//! the new pod starts on a node Karpenter provisions for it, the old pod goes after it with
//! zero downtime, and Karpenter removes the node.
//!
//! Its own test binary: Karpenter is cluster-wide, and the story test counts its nodes.

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use support::drain::{Sampler, metric, node_of};
use support::fixtures::pdb_max_unavailable_zero;
use support::operator::Operator;
use support::pods::ready_pods;
use support::{karpenter, wait, with_namespace};

/// How long the control phase watches the drain being stuck.
const STUCK_FOR: Duration = Duration::from_secs(40);

#[tokio::test]
async fn a_nodeclaim_deleted_under_a_blocking_pdb_drains_with_zero_downtime_once_the_watcher_rolls_out()
 {
    karpenter::require();
    let client = support::client().await;
    karpenter::until_no_nodes(&client).await;
    with_namespace(|client, ns| async move {
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns);
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let nodes: Api<Node> = Api::all(client.clone());
        deployments.create(&PostParams::default(), &karpenter::lone_app()).await.unwrap();
        pdbs.create(&PostParams::default(), &pdb_max_unavailable_zero("api", "api"))
            .await
            .unwrap();
        let pod = wait::for_some(
            "Karpenter to provision a node and the pod to run",
            Duration::from_secs(120),
            || async { ready_pods(&client, &ns, "api").await.pop() },
        )
        .await;
        let (pod, node) = (pod.metadata.name.clone().unwrap(), node_of(&pod).unwrap());
        wait::until("the PDB to allow no disruption", Duration::from_secs(30), || async {
            pdbs.get("api")
                .await
                .ok()
                .and_then(|p| p.status)
                .is_some_and(|s| s.current_healthy == 1 && s.disruptions_allowed == 0)
        })
        .await;
        let claim = karpenter::node_claim_of(&client, &node)
            .await
            .expect("the node's NodeClaim");

        let sampler = Sampler::start(&client, &ns, &["api"]);
        karpenter::node_claims(&client)
            .delete(&claim, &DeleteParams::background())
            .await
            .unwrap();
        let deleted = Instant::now();

        // Without the watcher: Karpenter taints the node, the PDB refuses its evictions.
        wait::until("Karpenter's disrupted taint", Duration::from_secs(30), || async {
            nodes.get(&node).await.ok().and_then(|n| n.spec?.taints).is_some_and(|t| {
                t.iter().any(|t| t.key == "karpenter.sh/disrupted")
            })
        })
        .await;
        tokio::time::sleep(STUCK_FOR.saturating_sub(deleted.elapsed())).await;
        assert!(
            nodes.get_opt(&node).await.unwrap().is_some(),
            "without the watcher the node is still there after {STUCK_FOR:?}"
        );
        assert!(
            pods.get_opt(&pod).await.unwrap().is_some_and(|p| p.metadata.deletion_timestamp.is_none()),
            "the pod was not evicted: the PDB refused"
        );

        // With the watcher: the rollout moves the pod, the drain completes, the node goes.
        let operator = Operator::start(&ns, &[]).await;
        let started = Instant::now();
        let moved_to = wait::for_some(
            "the new pod to run on another node",
            Duration::from_secs(120),
            || async {
                let ready = ready_pods(&client, &ns, "api").await;
                ready
                    .iter()
                    .find_map(|p| node_of(p).filter(|n| n != &node))
            },
        )
        .await;
        let moved = started.elapsed();
        wait::until("Karpenter to remove the node", Duration::from_secs(180), || async {
            nodes.get_opt(&node).await.unwrap().is_none()
        })
        .await;
        let gone = started.elapsed();
        let samples = sampler.finish().await;
        eprintln!(
            "forced drain: stuck {:.0}s without the watcher; with it the pod ran on {moved_to} after {:.1}s \
             and the node was gone after {:.1}s; {} samples (100 ms), {} without a ready pod",
            STUCK_FOR.as_secs_f64(),
            moved.as_secs_f64(),
            gone.as_secs_f64(),
            samples.rounds,
            samples.downtime_samples()
        );
        assert_eq!(samples.downtime_samples(), 0, "no sample without a ready pod");
        let metrics = operator.metrics().await;
        assert_eq!(
            metric(
                &metrics,
                "disruption_guard_drain_rollouts_total{result=\"rolled_out\"}"
            ),
            1.0,
            "one rollout\n{metrics}"
        );
    })
    .await;
}
