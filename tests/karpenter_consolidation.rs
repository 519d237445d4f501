//! Karpenter's consolidation of a lone pod's node, three ways in one test: with nothing, with a
//! `minAvailable: 1` PDB, and with the eviction webhook (no PDB, no window).
//!
//! The scene is the same each time. `api` (one replica, 1.5 CPU) runs alone on a small node.
//! Then `anchor` (2.1 CPU, `karpenter.sh/do-not-disrupt`) needs a bigger node, with room for
//! `api` beside it. Now the small node is a waste, and Karpenter's consolidation deletes it:
//! it taints the node `karpenter.sh/disrupted`, evicts `api` and removes the node once it is
//! empty.
//!
//! - **Nothing:** the eviction kills `api` at once. It has no ready pod until its new pod
//!   starts on the bigger node. This is the control: the sampler (100 ms) must see the gap.
//! - **PDB:** Karpenter never picks the node. It says so with a `DisruptionBlocked` Event
//!   ("pdb prevents pod evictions"), and the small node stays: a node wasted for good.
//! - **Webhook:** the eviction is held (429) while `api` rolls out. The new pod starts on the
//!   bigger node first, the old one goes, Karpenter's retry finds it gone and removes the small
//!   node. Zero samples without a ready pod, and the node count drops to what the apps need.
//!   While the eviction is held, Karpenter counts the old pod as one it must find room for, and
//!   the new pod has taken the room it planned: so it may launch a node for the old pod, which
//!   is empty once the old pod goes and which it consolidates in turn. The test counts such
//!   nodes and waits until Karpenter is back to the control's node count.
//!
//! Printed per way: samples without a ready pod, seconds from Karpenter's taint to the node's
//! removal, and from `anchor` being ready (when consolidation became possible) to it, the nodes
//! Karpenter launched meanwhile, and when it was back to the nodes the apps need.
//!
//! Its own test binary: Karpenter is cluster-wide, and the other Karpenter tests count its
//! nodes.

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Event, Node};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use support::drain::{Sampler, Samples, metric, node_of, until_ready_elsewhere};
use support::intercept::until_in_effect;
use support::operator::Operator;
use support::pods::ready_pods;
use support::{karpenter, wait, with_namespace};

const KARPENTER: Duration = Duration::from_secs(180);
const DISRUPTED_TAINT: &str = "karpenter.sh/disrupted";
/// Nodes the two apps need: anchor's has room for api.
const NEEDED: usize = 1;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Guard {
    Nothing,
    Pdb,
    Webhook,
}

#[derive(Debug, Default)]
struct Run {
    samples: Samples,
    /// Seconds from Karpenter's taint on the small node to the node's removal.
    taint_to_removal: Option<f64>,
    /// Seconds from `anchor` being ready to the small node's removal.
    possible_to_removal: Option<f64>,
    /// Karpenter's `DisruptionBlocked` message about the small node.
    blocked: Option<String>,
    /// Karpenter's nodes at the end.
    nodes_after: usize,
    /// Nodes Karpenter launched after `anchor`'s.
    launched: usize,
    /// Seconds from `anchor` being ready until Karpenter ran only the node the apps need.
    settled: Option<f64>,
    /// The operator's metrics at the end, when it ran.
    metrics: Option<String>,
}

fn pdb() -> PodDisruptionBudget {
    serde_json::from_value(json!({
        "metadata": {"name": "api"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "api"}}}
    }))
    .unwrap()
}

fn tainted(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == DISRUPTED_TAINT))
}

/// Karpenter's `DisruptionBlocked` message about `node` that names a PDB, if any yet.
async fn blocked_by_pdb(client: &Client, node: &str) -> Option<String> {
    let events: Api<Event> = Api::all(client.clone());
    let selector = format!("involvedObject.name={node},reason=DisruptionBlocked");
    events
        .list(&ListParams::default().fields(&selector))
        .await
        .ok()?
        .items
        .into_iter()
        .filter_map(|e| e.message)
        .find(|m| m.to_lowercase().contains("pdb prevents pod evictions"))
}

/// Sets the scene in `ns` and follows the small node until Karpenter removes it (or, with a
/// PDB, says why it will not).
/// Unless a PDB blocks it, it then waits until Karpenter runs only the node the apps need.
async fn consolidate(client: &Client, ns: &str, guard: Guard) -> Run {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let nodes: Api<Node> = Api::all(client.clone());
    let op = match guard {
        Guard::Webhook => Some(Operator::intercepting(ns, &[]).await),
        _ => None,
    };
    deployments
        .create(&PostParams::default(), &karpenter::lone_app())
        .await
        .unwrap();
    let pod = wait::for_some("a ready pod of api", KARPENTER, || async {
        ready_pods(client, ns, "api").await.pop()
    })
    .await;
    let small = node_of(&pod).unwrap();
    if guard == Guard::Pdb {
        Api::<PodDisruptionBudget>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &pdb())
            .await
            .unwrap();
    }
    if let Some(op) = &op {
        until_in_effect(client, op, ns, pod.metadata.name.as_deref().unwrap()).await;
    }

    let sampler = Sampler::start(client, ns, &["api"]);
    deployments
        .create(&PostParams::default(), &karpenter::anchor())
        .await
        .unwrap();
    let anchor = wait::for_some("a ready pod of anchor", KARPENTER, || async {
        ready_pods(client, ns, "anchor").await.pop()
    })
    .await;
    assert_ne!(
        node_of(&anchor).as_deref(),
        Some(small.as_str()),
        "anchor must need a node of its own"
    );
    let possible = Instant::now();
    let mut seen = karpenter::node_names(client).await;

    let mut run = Run::default();
    let mut tainted_at = None;
    let deadline = possible + KARPENTER;
    loop {
        assert!(
            Instant::now() < deadline,
            "Karpenter neither removed {small} nor said it is blocked within {KARPENTER:?}"
        );
        match nodes.get_opt(&small).await.unwrap() {
            None => {
                let gone = Instant::now();
                run.possible_to_removal = Some((gone - possible).as_secs_f64());
                run.taint_to_removal = tainted_at.map(|t: Instant| (gone - t).as_secs_f64());
                break;
            }
            Some(node) if tainted(&node) && tainted_at.is_none() => {
                tainted_at = Some(Instant::now())
            }
            Some(_) => {}
        }
        seen.extend(karpenter::node_names(client).await);
        if guard == Guard::Pdb
            && let Some(message) = blocked_by_pdb(client, &small).await
        {
            assert!(
                tainted_at.is_none(),
                "Karpenter tainted {small} though a PDB blocks its pod"
            );
            run.blocked = Some(message);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if guard != Guard::Pdb {
        until_ready_elsewhere(client, ns, "api", &small, KARPENTER).await;
    }
    if guard != Guard::Pdb {
        loop {
            let now = karpenter::node_names(client).await;
            let settled = now.len() <= NEEDED;
            seen.extend(now);
            if settled {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "Karpenter still runs more than {NEEDED} node(s) after {KARPENTER:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        run.settled = Some(possible.elapsed().as_secs_f64());
    }
    run.samples = sampler.finish().await;
    run.nodes_after = karpenter::node_names(client).await.len();
    seen.extend(karpenter::node_names(client).await);
    // The small node and anchor's were there when consolidation became possible.
    run.launched = seen.len().saturating_sub(2);
    if let Some(op) = &op {
        run.metrics = Some(op.metrics().await);
    }
    run
}

async fn run(guard: Guard) -> Run {
    let client = support::client().await;
    karpenter::until_no_nodes(&client).await;
    let (tx, rx) = tokio::sync::oneshot::channel();
    with_namespace(move |client, ns| async move {
        let _ = tx.send(consolidate(&client, &ns, guard).await);
    })
    .await;
    rx.await.expect("the run reports its figures")
}

fn secs(s: Option<f64>) -> String {
    s.map_or_else(|| "never".to_string(), |s| format!("{s:.1}"))
}

#[tokio::test]
async fn karpenter_consolidation_kills_a_lone_pod_keeps_a_pdb_node_forever_and_with_the_webhook_moves_the_pod_first()
 {
    karpenter::require();
    let nothing = run(Guard::Nothing).await;
    let pdb = run(Guard::Pdb).await;
    let webhook = run(Guard::Webhook).await;

    println!("                                 nothing      PDB          webhook");
    println!(
        "samples (100 ms)                 {:<12} {:<12} {}",
        nothing.samples.rounds, pdb.samples.rounds, webhook.samples.rounds
    );
    println!(
        "samples w/o ready pod            {:<12} {:<12} {}",
        nothing.samples.downtime_samples(),
        pdb.samples.downtime_samples(),
        webhook.samples.downtime_samples()
    );
    println!(
        "taint -> node removed (s)        {:<12} {:<12} {}",
        secs(nothing.taint_to_removal),
        secs(pdb.taint_to_removal),
        secs(webhook.taint_to_removal)
    );
    println!(
        "consolidable -> removed (s)      {:<12} {:<12} {}",
        secs(nothing.possible_to_removal),
        secs(pdb.possible_to_removal),
        secs(webhook.possible_to_removal)
    );
    println!(
        "nodes Karpenter launched         {:<12} {:<12} {}",
        nothing.launched, pdb.launched, webhook.launched
    );
    println!(
        "consolidable -> nodes needed (s) {:<12} {:<12} {}",
        secs(nothing.settled),
        secs(pdb.settled),
        secs(webhook.settled)
    );
    println!(
        "Karpenter nodes after            {:<12} {:<12} {}",
        nothing.nodes_after, pdb.nodes_after, webhook.nodes_after
    );
    println!(
        "Karpenter on the PDB's node: {}",
        pdb.blocked.as_deref().unwrap_or("-")
    );

    assert!(
        nothing.samples.downtime_samples() > 0 && nothing.possible_to_removal.is_some(),
        "the control must see Karpenter consolidate the node and the pod killed"
    );
    assert!(
        pdb.blocked.is_some() && pdb.nodes_after > NEEDED,
        "with a PDB Karpenter keeps the node"
    );
    assert!(
        webhook.possible_to_removal.is_some() && webhook.nodes_after <= NEEDED,
        "with the webhook Karpenter removes the node and runs only what the apps need"
    );
    assert_eq!(
        webhook.samples.downtime_samples(),
        0,
        "no sample without a ready pod"
    );
    let metrics = webhook.metrics.unwrap();
    assert!(metric(&metrics, "disruption_guard_intercept_denied_total") >= 1.0);
    assert_eq!(
        metric(
            &metrics,
            "disruption_guard_intercept_rollouts_total{result=\"rolled_out\"}"
        ),
        1.0
    );
}
