//! Which windows a watched object's change concerns, decided from its previous version: what
//! every window reads of the object (its [`Fingerprint`]) and what each window's own field
//! manager holds there (its entry).
//!
//! A pod, node or NodeClaim that several windows protect is written once by each of them; every
//! write changes the object, and waking every window that selects it on each of them makes one
//! window's write cost a reconcile of all the others (with eight windows over the same pods,
//! sixty-four reconciles a pod). A window's plan reads only the object's shared part and its own
//! entry, so a change wakes every concerned window when the shared part changed (or the object
//! went), and otherwise only the windows whose own entry changed.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::DynamicObject;

use super::held::is_consolidatable;
use crate::resources::PodDigest;
use crate::resources::names::{
    CA_SCALE_DOWN_DISABLED, FIELD_MANAGER, KARPENTER_DO_NOT_DISRUPT, KARPENTER_REGISTERED,
};

/// A hash of what every window reads of an object.
pub type Fingerprint = u64;

/// What a change concerns.
#[derive(Debug, Default, PartialEq)]
pub struct Change {
    /// The shared part changed, or the object is new or gone: every window it concerns.
    pub shared: bool,
    /// UIDs of the windows that hold (or held) an entry on the object and must look again:
    /// all of them when `shared`, else those whose entry changed.
    pub windows: BTreeSet<String>,
}

/// The last fingerprint and window entries seen of each object.
#[derive(Debug, Default)]
pub struct Changes {
    seen: HashMap<String, (Fingerprint, BTreeMap<String, u64>)>,
    /// The map's size after its last pruning: objects that leave a watch's scope without a
    /// deletion are forgotten once it has doubled.
    pruned_at: usize,
}

/// How many objects are remembered before the first pruning.
const PRUNE_FROM: usize = 1024;

impl Changes {
    /// What the new version of object `key` concerns: `now` is its fingerprint and its
    /// windows' entries ([`entries`]), `None` when it is gone. `present` tells, when the map
    /// is pruned, whether an object is still watched.
    pub fn change(
        &mut self,
        key: String,
        now: Option<(Fingerprint, BTreeMap<String, u64>)>,
        present: impl Fn(&str) -> bool,
    ) -> Change {
        let Some((fingerprint, entries)) = now else {
            let windows = self
                .seen
                .remove(&key)
                .map(|(_, held)| held.into_keys().collect())
                .unwrap_or_default();
            return Change {
                shared: true,
                windows,
            };
        };
        let before = self.seen.insert(key, (fingerprint, entries.clone()));
        if self.seen.len() > self.pruned_at.max(PRUNE_FROM) * 2 {
            self.seen.retain(|key, _| present(key));
            self.pruned_at = self.seen.len();
        }
        match before {
            Some((was, held)) if was == fingerprint => Change {
                shared: false,
                windows: changed_entries(&held, &entries),
            },
            before => Change {
                shared: true,
                windows: before
                    .into_iter()
                    .flat_map(|(_, held)| held.into_keys())
                    .chain(entries.into_keys())
                    .collect(),
            },
        }
    }
}

/// The windows whose entry differs between two versions (added, changed or gone).
pub fn changed_entries(
    before: &BTreeMap<String, u64>,
    now: &BTreeMap<String, u64>,
) -> BTreeSet<String> {
    before
        .keys()
        .chain(now.keys())
        .filter(|uid| before.get(*uid) != now.get(*uid))
        .cloned()
        .collect()
}

/// Each window's entry on the object, by window UID: a hash of the fields its field manager
/// (`disruption-guard/<uid>`) holds.
pub fn entries(meta: &ObjectMeta) -> BTreeMap<String, u64> {
    let prefix = format!("{FIELD_MANAGER}/");
    let mut out = BTreeMap::new();
    for entry in meta.managed_fields.iter().flatten() {
        let Some(uid) = entry
            .manager
            .as_deref()
            .and_then(|m| m.strip_prefix(&prefix))
        else {
            continue;
        };
        if uid.is_empty() {
            continue;
        }
        let mut h = DefaultHasher::new();
        entry.subresource.hash(&mut h);
        entry
            .fields_v1
            .as_ref()
            .map(|f| f.0.to_string())
            .hash(&mut h);
        // One manager may hold an Apply and an Update entry: both count.
        let slot = out.entry(uid.to_string()).or_insert(0u64);
        *slot = slot.wrapping_add(h.finish());
    }
    out
}

/// What windows read of a pod: its labels, annotations, owner, node, phase, start, readiness,
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

/// What windows read of a node: the guard's annotations, whether Karpenter registered it, and
/// the disruption marks (kwok heartbeats and other status churn leave it alone).
pub fn node(node: &Node) -> Fingerprint {
    let mut h = DefaultHasher::new();
    let annotations = node.metadata.annotations.as_ref();
    for key in [KARPENTER_DO_NOT_DISRUPT, CA_SCALE_DOWN_DISABLED] {
        annotations.and_then(|a| a.get(key)).hash(&mut h);
    }
    node.metadata.deletion_timestamp.is_some().hash(&mut h);
    node.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(KARPENTER_REGISTERED))
        .hash(&mut h);
    if let Some(spec) = &node.spec {
        spec.unschedulable.hash(&mut h);
        for t in spec.taints.iter().flatten() {
            (&t.key, &t.effect).hash(&mut h);
        }
    }
    h.finish()
}

/// What windows read of a NodeClaim: its node, the `do-not-disrupt` annotation and whether it
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
    use crate::k8s::fields::tests::entry;
    use serde_json::json;

    fn uids(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    fn concerns(shared: bool, names: &[&str]) -> Change {
        Change {
            shared,
            windows: uids(names),
        }
    }

    fn pod(node: &str, windows: &[(&str, &[&str])]) -> PodDigest {
        let mut p: PodDigest = serde_json::from_value(json!({
            "metadata": {"name": "api-1", "namespace": "shop", "labels": {"app": "api"}},
            "spec": {"nodeName": node},
            "status": {"phase": "Running"}
        }))
        .unwrap();
        p.metadata.managed_fields = Some(
            windows
                .iter()
                .map(|(uid, keys)| entry(&format!("disruption-guard/{uid}"), keys))
                .collect(),
        );
        p
    }

    fn seen(c: &mut Changes, p: &PodDigest) -> Change {
        c.change(
            "shop/api-1".into(),
            Some((super::pod(p), entries(&p.metadata))),
            |_| true,
        )
    }

    #[test]
    fn another_windows_write_wakes_only_the_window_that_wrote() {
        let mut c = Changes::default();
        let first = seen(&mut c, &pod("n1", &[("a", &["k"])]));
        assert_eq!(first, concerns(true, &["a"]));
        // b writes its entry: the pod's shared part is as it was.
        let joined = seen(&mut c, &pod("n1", &[("a", &["k"]), ("b", &["k"])]));
        assert_eq!(joined, concerns(false, &["b"]));
        // The same version again (the pod is in two watched scopes): nobody.
        let again = seen(&mut c, &pod("n1", &[("a", &["k"]), ("b", &["k"])]));
        assert_eq!(again, Change::default());
        // a's entry was taken from it: a.
        let taken = seen(&mut c, &pod("n1", &[("a", &[]), ("b", &["k"])]));
        assert_eq!(taken.windows, uids(&["a"]));
    }

    #[test]
    fn a_change_windows_read_or_a_deletion_wakes_everyone_concerned() {
        let mut c = Changes::default();
        seen(&mut c, &pod("n1", &[("a", &["k"])]));
        let moved = seen(&mut c, &pod("n2", &[("a", &["k"])]));
        assert!(moved.shared);
        assert_eq!(moved.windows, uids(&["a"]));
        let gone = c.change("shop/api-1".into(), None, |_| true);
        assert_eq!(gone, concerns(true, &["a"]));
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
            c.change(format!("ns/p{i}"), Some((1, BTreeMap::new())), |key| {
                key == "ns/p0"
            });
        }
        assert_eq!(c.seen.len(), 1);
    }
}
