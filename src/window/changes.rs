//! Whether a watched object changed in what a namespace's pass reads of it (its
//! [`Fingerprint`]): a pod, node or NodeClaim update that changes nothing the pass reads (kwok
//! heartbeats, Karpenter's pod-event times, other status churn) wakes no namespace.

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use k8s_openapi::api::core::v1::Node;
use kube::api::DynamicObject;

use super::held::is_consolidatable;
use super::model::labels;
use crate::resources::PodDigest;
use crate::resources::names::{
    CA_SCALE_DOWN_DISABLED, KARPENTER_DO_NOT_DISRUPT, KARPENTER_REGISTERED,
};

/// A hash of what a pass reads of an object.
pub type Fingerprint = u64;

/// The last fingerprint seen of each object.
#[derive(Debug, Default)]
pub struct Changes {
    seen: HashMap<String, Fingerprint>,
    /// The map's size after its last pruning: objects that leave a watch's scope without a
    /// deletion are forgotten once it has doubled.
    pruned_at: usize,
}

/// How many objects are remembered before the first pruning.
const PRUNE_FROM: usize = 1024;

impl Changes {
    /// Whether object `key` changed: `now` is its fingerprint, `None` when it is gone (a change).
    /// `present` tells, when the map is pruned, whether an object is still watched.
    pub fn changed(
        &mut self,
        key: String,
        now: Option<Fingerprint>,
        present: impl Fn(&str) -> bool,
    ) -> bool {
        let Some(fingerprint) = now else {
            self.seen.remove(&key);
            return true;
        };
        let before = self.seen.insert(key, fingerprint);
        if self.seen.len() > self.pruned_at.max(PRUNE_FROM) * 2 {
            self.seen.retain(|key, _| present(key));
            self.pruned_at = self.seen.len();
        }
        before != Some(fingerprint)
    }
}

/// What a pass reads of a pod: its labels, annotations, owner, node, phase, start, readiness,
/// disruption condition and restarts (never another window's entry, nor its resourceVersion).
pub fn pod(pod: &PodDigest) -> Fingerprint {
    let mut h = DefaultHasher::new();
    let meta = &pod.metadata;
    meta.labels.hash(&mut h);
    meta.annotations.hash(&mut h);
    meta.deletion_timestamp.as_ref().map(|t| t.0).hash(&mut h);
    for owner in meta.owner_references.iter().flatten() {
        (&owner.uid, &owner.kind, &owner.name, owner.controller).hash(&mut h);
    }
    pod.spec.node_name.hash(&mut h);
    let status = &pod.status;
    status.phase.hash(&mut h);
    status.start_time.as_ref().map(|t| t.0).hash(&mut h);
    status.ready.hash(&mut h);
    for c in status.conditions.iter().flatten() {
        (&c.type_, &c.status, &c.reason).hash(&mut h);
    }
    for c in status.container_statuses.iter().flatten() {
        (&c.name, c.restart_count).hash(&mut h);
    }
    h.finish()
}

/// What a pass reads of a node: the guard's annotations, whether Karpenter registered it, and
/// the disruption marks (kwok heartbeats and other status churn leave it alone).
pub fn node(node: &Node) -> Fingerprint {
    let mut h = DefaultHasher::new();
    let annotations = node.metadata.annotations.as_ref();
    for key in [KARPENTER_DO_NOT_DISRUPT, CA_SCALE_DOWN_DISABLED] {
        annotations.and_then(|a| a.get(key)).hash(&mut h);
    }
    node.metadata.deletion_timestamp.is_some().hash(&mut h);
    labels(&node.metadata)
        .get(KARPENTER_REGISTERED)
        .hash(&mut h);
    if let Some(spec) = &node.spec {
        spec.unschedulable.hash(&mut h);
        for t in spec.taints.iter().flatten() {
            (&t.key, &t.effect).hash(&mut h);
        }
    }
    h.finish()
}

/// What a pass reads of a NodeClaim: its node, the `do-not-disrupt` annotation and whether it
/// is `Consolidatable` (Karpenter's pod-event times and other status churn leave it alone).
pub fn node_claim(claim: &DynamicObject) -> Fingerprint {
    let mut h = DefaultHasher::new();
    let annotations = claim.metadata.annotations.as_ref();
    annotations
        .and_then(|a| a.get(KARPENTER_DO_NOT_DISRUPT))
        .hash(&mut h);
    claim.metadata.deletion_timestamp.is_some().hash(&mut h);
    claim
        .data
        .pointer("/status/nodeName")
        .and_then(|v| v.as_str())
        .hash(&mut h);
    is_consolidatable(claim).hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(node: &str, annotations: serde_json::Value) -> PodDigest {
        serde_json::from_value(json!({
            "metadata": {"name": "api-1", "namespace": "shop", "labels": {"app": "api"},
                         "annotations": annotations, "resourceVersion": node},
            "spec": {"nodeName": node},
            "status": {"phase": "Running"}
        }))
        .unwrap()
    }

    fn seen(c: &mut Changes, p: &PodDigest) -> bool {
        c.changed("shop/api-1".into(), Some(super::pod(p)), |_| true)
    }

    #[test]
    fn a_pod_changes_when_what_a_pass_reads_changes_and_when_it_goes() {
        let mut c = Changes::default();
        assert!(seen(&mut c, &pod("n1", json!({}))), "a new pod");
        assert!(!seen(&mut c, &pod("n1", json!({}))), "the same again");
        assert!(seen(
            &mut c,
            &pod("n1", json!({"karpenter.sh/do-not-disrupt": "true"}))
        ));
        assert!(seen(
            &mut c,
            &pod("n2", json!({"karpenter.sh/do-not-disrupt": "true"}))
        ));
        assert!(c.changed("shop/api-1".into(), None, |_| true), "gone");
    }

    #[test]
    fn heartbeats_leave_a_node_alone_and_a_mark_does_not() {
        let node = |taints: serde_json::Value, heartbeat: &str| -> Node {
            serde_json::from_value(json!({
                "metadata": {"name": "n1"},
                "spec": {"taints": taints},
                "status": {"conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": heartbeat}]}
            }))
            .unwrap()
        };
        let base = super::node(&node(json!([]), "2026-01-01T00:00:00Z"));
        assert_eq!(base, super::node(&node(json!([]), "2026-01-01T00:00:10Z")));
        let tainted = json!([{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]);
        assert_ne!(base, super::node(&node(tainted, "2026-01-01T00:00:10Z")));
        // Registration moves a window's NodeClaim annotation to the Node: windows read it.
        let mut registered = node(json!([]), "2026-01-01T00:00:10Z");
        registered.metadata.labels = Some([(KARPENTER_REGISTERED.into(), "true".into())].into());
        assert_ne!(base, super::node(&registered));
    }

    #[test]
    fn a_claims_candidacy_is_read_and_its_pod_event_time_is_not() {
        let claim = |consolidatable: &str, last_pod_event: &str| -> DynamicObject {
            serde_json::from_value(json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                "metadata": {"name": "c1"},
                "status": {"nodeName": "n1", "lastPodEventTime": last_pod_event,
                           "conditions": [{"type": "Consolidatable", "status": consolidatable}]}
            }))
            .unwrap()
        };
        let base = node_claim(&claim("True", "2026-01-01T00:00:00Z"));
        assert_eq!(base, node_claim(&claim("True", "2026-01-01T00:00:05Z")));
        assert_ne!(base, node_claim(&claim("False", "2026-01-01T00:00:05Z")));
    }

    #[test]
    fn objects_that_left_the_watch_are_forgotten_once_the_map_doubled() {
        let mut c = Changes::default();
        for i in 0..=2 * PRUNE_FROM {
            c.changed(format!("ns/p{i}"), Some(1), |key| key == "ns/p0");
        }
        assert_eq!(c.seen.len(), 1);
    }
}
