//! A window opened over a pod whose node is already being disrupted waits before it is first
//! Ready. Karpenter may have tainted the node `karpenter.sh/disrupted` a moment before the
//! window's protection arrived (its decision is final by then), or the node is cordoned for a
//! drain: the drain watcher rolls such a pod's Deployment out as soon as the window's PDB
//! covers it (the new pod starts elsewhere first), and a test should start on the pod that
//! stays, not on the one about to go. The wait is bounded: a pod nothing replaces (not a
//! lone-replica Deployment's, a namespace the drain watcher leaves alone) holds the window back
//! at most [`SETTLE_FOR`] after it opened: half the GitHub Action's default `wait-timeout` of
//! 60 s (the CLI's `--wait-timeout` is two minutes), enough for a replacement that fits on a
//! node already there. Pure.

use jiff::{SignedDuration, Timestamp};

use super::model::{WindowFacts, World, selected_pods};
use super::report::node_disruption;
use crate::k8s::signals::Signal;

/// How long after opening a window waits for its pods to leave nodes being disrupted.
pub const SETTLE_FOR: SignedDuration = SignedDuration::from_secs(30);

/// What the window waits for before its first `Ready`: each selected pod on a node that
/// carries one of `signals`, in words; empty once `SETTLE_FOR` has passed since `opened_at`.
pub fn unsettled(
    window: &WindowFacts,
    world: &World,
    signals: &[Signal],
    opened_at: Timestamp,
    now: Timestamp,
) -> Vec<String> {
    if !window.active || now.duration_since(opened_at) >= SETTLE_FOR {
        return vec![];
    }
    let selected = selected_pods(window, &world.pods);
    selected
        .iter()
        .filter_map(|p| {
            let node = p.node_name()?;
            let signal = node_disruption(world, node, signals)?.signal;
            let pod = p.metadata.name.as_deref().unwrap_or_default();
            Some(format!(
                "pod {pod} to move off node {node}, being disrupted ({signal})"
            ))
        })
        .collect()
}
