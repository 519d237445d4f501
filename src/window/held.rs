//! What protection cost: the nodes a window keeps that Karpenter could otherwise disrupt, and
//! the node-seconds it kept them. Pure: [`holds`] reads the world, [`advance`] and [`close`]
//! turn holds into seconds.
//!
//! A node is held by a window while a live pod of its selection runs there and the node is one
//! Karpenter could take: its NodeClaim says `Consolidatable` (Karpenter's own candidacy: past
//! `consolidateAfter`, nothing scheduled lately), or it is being drained (`--drain-signals`).
//! What holds it is what Karpenter meets first: on a consolidation candidate the
//! `do-not-disrupt` annotation, when the window writes it, else its PDB; on a draining node the
//! PDB, when the window writes one, else the annotation. A node is counted once per window; two
//! windows holding one node count it twice, each in its own report.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::DynamicObject;

use super::plan::{World, is_live};
use super::report::node_disruption;
use crate::k8s::signals::Signal;
use crate::resources::window_status::{HeldBy, HeldNode, HeldSeconds};
use crate::resources::{PodDigest, Protect};

/// Karpenter's NodeClaim condition that makes its node a consolidation candidate.
pub const CONSOLIDATABLE: &str = "Consolidatable";

/// Whether the NodeClaim says `Consolidatable` now.
pub fn is_consolidatable(claim: &DynamicObject) -> bool {
    let conditions = claim
        .data
        .pointer("/status/conditions")
        .and_then(|v| v.as_array());
    let mut conditions = conditions.into_iter().flatten();
    conditions.any(|c| c["type"] == CONSOLIDATABLE && c["status"] == "True")
}

/// The nodes of `claims` whose NodeClaim is `Consolidatable` now.
pub fn consolidatable(claims: &[Arc<DynamicObject>]) -> BTreeSet<String> {
    claims
        .iter()
        .filter(|c| is_consolidatable(c))
        .filter_map(|c| c.data.pointer("/status/nodeName")?.as_str())
        .map(str::to_string)
        .collect()
}

/// The nodes the window holds now (`selected`: its live selection), and by what.
pub fn holds(
    selected: &[&Arc<PodDigest>],
    world: &World,
    protect: &Protect,
    signals: &[Signal],
) -> BTreeMap<String, HeldBy> {
    let annotates = protect.do_not_disrupt || protect.nodes;
    let pdb = protect.pod_disruption_budgets;
    let candidates = world
        .node_claims
        .as_deref()
        .map(consolidatable)
        .unwrap_or_default();
    let mut held = BTreeMap::new();
    let nodes = selected
        .iter()
        .filter(|p| is_live(p))
        .filter_map(|p| p.node_name());
    for name in nodes {
        let by = if node_disruption(world, name, signals).is_some() {
            (pdb.then_some(HeldBy::Pdb)).or(annotates.then_some(HeldBy::Annotation))
        } else if candidates.contains(name) {
            (annotates.then_some(HeldBy::Annotation)).or(pdb.then_some(HeldBy::Pdb))
        } else {
            None
        };
        if let Some(by) = by {
            held.entry(name.to_string()).or_insert(by);
        }
    }
    held
}

/// Whole seconds from `since` to `now` (none when `now` is earlier).
fn seconds(since: &Time, now: Timestamp) -> u64 {
    now.duration_since(since.0).as_secs_f64().max(0.0).round() as u64
}

/// The holds after this reconcile: `now_held` kept from `previous` where unchanged, begun at
/// `now` where new; and the seconds of the holds that ended.
pub fn advance(
    previous: &BTreeMap<String, HeldNode>,
    now_held: &BTreeMap<String, HeldBy>,
    now: Timestamp,
) -> (BTreeMap<String, HeldNode>, HeldSeconds) {
    let mut ended = HeldSeconds::default();
    for (node, hold) in previous {
        if now_held.get(node) != Some(&hold.by) {
            ended.add(hold.by, seconds(&hold.since, now));
        }
    }
    let next = now_held.iter().map(|(node, &by)| {
        let kept = previous.get(node).filter(|hold| hold.by == by).cloned();
        let since = Time(now);
        (node.clone(), kept.unwrap_or(HeldNode { since, by }))
    });
    (next.collect(), ended)
}

/// The seconds of every hold in `held`, ended at `end` (the window's end).
pub fn close(held: &BTreeMap<String, HeldNode>, end: Timestamp) -> HeldSeconds {
    advance(held, &BTreeMap::new(), end).1
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(node: &str, consolidatable: &str) -> Arc<DynamicObject> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                "metadata": {"name": format!("claim-{node}")},
                "status": {"nodeName": node, "conditions": [
                    {"type": "Initialized", "status": "True"},
                    {"type": CONSOLIDATABLE, "status": consolidatable},
                ]}
            }))
            .unwrap(),
        )
    }

    fn pod(name: &str, node: &str) -> Arc<PodDigest> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ci", "uid": name},
                "spec": {"nodeName": node},
                "status": {"phase": "Running",
                    "conditions": [{"type": "Ready", "status": "True"}]}
            }))
            .unwrap(),
        )
    }

    fn node(name: &str, tainted: bool) -> Arc<k8s_openapi::api::core::v1::Node> {
        let taints = if tainted {
            json!([{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}])
        } else {
            json!([])
        };
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name}, "spec": {"taints": taints}
            }))
            .unwrap(),
        )
    }

    fn protect(pdb: bool, annotate: bool) -> Protect {
        serde_json::from_value(json!({
            "podDisruptionBudgets": pdb, "doNotDisrupt": annotate, "nodes": annotate
        }))
        .unwrap()
    }

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    fn signals() -> Vec<Signal> {
        vec![Signal::KarpenterDisrupted]
    }

    fn world() -> World {
        World {
            nodes: vec![node("a", false), node("b", false), node("c", true)],
            node_claims: Some(vec![claim("a", "True"), claim("b", "False")]),
            ..Default::default()
        }
    }

    #[test]
    fn a_consolidatable_or_draining_node_of_a_live_pod_is_held_by_what_karpenter_meets_first() {
        let pods = [pod("p1", "a"), pod("p2", "b"), pod("p3", "c")];
        let selected: Vec<_> = pods.iter().collect();
        let signals = signals();
        let both = holds(&selected, &world(), &protect(true, true), &signals);
        assert_eq!(
            both,
            BTreeMap::from([
                ("a".to_string(), HeldBy::Annotation),
                ("c".to_string(), HeldBy::Pdb),
            ]),
            "b is not a candidate: nothing of it is held"
        );
        let pdb_only = holds(&selected, &world(), &protect(true, false), &signals);
        assert_eq!(pdb_only.get("a"), Some(&HeldBy::Pdb));
        let annotation_only = holds(&selected, &world(), &protect(false, true), &signals);
        assert_eq!(annotation_only.get("c"), Some(&HeldBy::Annotation));
        assert!(holds(&selected, &world(), &protect(false, false), &signals).is_empty());
    }

    #[test]
    fn without_karpenter_only_a_draining_node_is_held() {
        let pods = [pod("p1", "a"), pod("p3", "c")];
        let selected: Vec<_> = pods.iter().collect();
        let w = World {
            node_claims: None,
            ..world()
        };
        let held = holds(&selected, &w, &protect(true, true), &signals());
        assert_eq!(held.keys().collect::<Vec<_>>(), ["c"]);
    }

    #[test]
    fn a_hold_counts_from_its_start_to_its_end_once() {
        let a = BTreeMap::from([("a".to_string(), HeldBy::Annotation)]);
        let (held, ended) = advance(&BTreeMap::new(), &a, at(0));
        assert_eq!(ended, HeldSeconds::default());
        let (held, ended) = advance(&held, &a, at(30));
        assert_eq!(ended, HeldSeconds::default(), "still held: nothing ended");
        assert_eq!(held["a"].since, Time(at(0)), "the start is kept");
        // The node is drained now: the annotation's hold ends, the PDB's begins.
        let c = BTreeMap::from([("a".to_string(), HeldBy::Pdb)]);
        let (held, ended) = advance(&held, &c, at(90));
        assert_eq!(ended.annotation, 90);
        assert_eq!(held["a"].since, Time(at(90)));
        let ended = close(&held, at(100));
        assert_eq!(ended.pdb, 10);
        assert_eq!(ended.total(), 10);
    }

    #[test]
    fn a_clock_that_went_back_counts_nothing() {
        let held = BTreeMap::from([(
            "a".to_string(),
            HeldNode {
                since: Time(at(50)),
                by: HeldBy::Pdb,
            },
        )]);
        assert_eq!(close(&held, at(10)).total(), 0);
    }
}
