//! What the window controller keeps of the objects it caches: exactly the fields its decisions
//! read, so a cluster of 10,000 pods costs megabytes rather than the pods' full specs.
//!
//! Pods are cached (and read fresh) as [`PodDigest`](crate::resources::PodDigest)s, straight
//! from the API server's answers. Nodes and workloads are watched in full and trimmed before
//! they are stored. Every cached object also loses the
//! managedFields entries that are not the guard's ([`keep_own_entries`]).
//!
//! Of the labels and annotations of workloads, PDBs and CITrusts only the keys the operator reads
//! are kept ([`read_by_the_guard`]): whoever may write them can attach 256 KB to each, and a
//! cache of a thousand such objects would otherwise hold a quarter of a gigabyte. Pods keep
//! their labels (selectors match them) and, read that way as they are decoded, the same
//! annotations.
//!
//! | object | kept besides metadata |
//! |---|---|
//! | Pod (a `PodDigest`) | `spec.nodeName`; `status.phase`, `status.startTime`, the `DisruptionTarget` condition, `Ready`'s status, container restart counts |
//! | Node | `spec.taints`, `spec.unschedulable` (no status) |
//! | ReplicaSet, StatefulSet | `spec.selector`, `spec.replicas` (no template, no status) |
//! | Deployment | `spec.selector`, `replicas`, `strategy`, `paused`, `progressDeadlineSeconds`, the template's `restartedAt` annotation; `status.observedGeneration`, `replicas`, `updatedReplicas`, `availableReplicas` |
//! | PodDisruptionBudget | spec and status |
//! | CITrust | spec |

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStatus, ReplicaSet, ReplicaSetSpec, StatefulSet,
    StatefulSetSpec,
};
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Namespace, Node, NodeSpec, Pod, PodTemplateSpec};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::DynamicObject;
use kube::core::PartialObjectMeta;

use super::fields::keep_own_entries;
use crate::resources::names::{RESTARTED_AT, read_by_the_guard};
use crate::resources::{CITrust, PodDigest, TestWindow};

/// A kind the operator caches, and what its caches keep of it. Applied to each object as it is
/// decoded ([`super::decoded`]): what is dropped is never held for more than one object at a
/// time, however large the page of a list it came in.
pub trait Keep {
    /// Drops what no reader of the caches reads.
    fn keep(&mut self);
}

macro_rules! keep_with {
    ($($kind:ty => $trim:expr),* $(,)?) => {$(
        impl Keep for $kind {
            fn keep(&mut self) {
                $trim(self)
            }
        }
    )*};
}

keep_with!(
    Node => node,
    ReplicaSet => replica_set,
    StatefulSet => stateful_set,
    Deployment => deployment,
    PodDisruptionBudget => pdb,
    CITrust => ci_trust,
    PodDigest => PodDigest::trim,
    Namespace => namespace,
    PartialObjectMeta<Namespace> => |ns: &mut PartialObjectMeta<Namespace>| namespace_meta(&mut ns.metadata),
    PartialObjectMeta<Pod> => |pod: &mut PartialObjectMeta<Pod>| {
        keep_own_entries(&mut pod.metadata);
        keep_read_annotations(&mut pod.metadata);
    },
    DynamicObject => |claim: &mut DynamicObject| keep_own_entries(&mut claim.metadata),
    // Windows are read whole; the sweep reads only their uid.
    TestWindow => |_: &mut TestWindow| {},
    PartialObjectMeta<TestWindow> => |_: &mut PartialObjectMeta<TestWindow>| {},
);

/// Keeps a namespace's labels (selectors match them) and name.
fn namespace(ns: &mut Namespace) {
    namespace_meta(&mut ns.metadata);
    ns.spec = None;
    ns.status = None;
}

fn namespace_meta(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    meta.annotations = None;
}

/// Keeps, of an object's annotations, only the keys the operator reads.
fn keep_read_annotations(meta: &mut ObjectMeta) {
    if let Some(entries) = meta.annotations.as_mut() {
        entries.retain(|key, _| read_by_the_guard(key));
        if entries.is_empty() {
            meta.annotations = None;
        }
    }
}

/// Keeps what plans and reports read of a node: its disruption marks.
pub fn node(node: &mut Node) {
    keep_own_entries(&mut node.metadata);
    node.status = None;
    if let Some(spec) = node.spec.as_mut() {
        *spec = NodeSpec {
            taints: spec.taints.take(),
            unschedulable: spec.unschedulable.take(),
            ..NodeSpec::default()
        };
    }
}

/// Keeps, of an object's labels and annotations, only the keys the operator reads.
pub fn read_keys_only(meta: &mut ObjectMeta) {
    for map in [&mut meta.labels, &mut meta.annotations] {
        if let Some(entries) = map.as_mut() {
            entries.retain(|key, _| read_by_the_guard(key));
            if entries.is_empty() {
                *map = None;
            }
        }
    }
}

/// Keeps what the caches read of a PodDisruptionBudget: its spec and status, the guard's own
/// managedFields entries and the labels it reads.
pub fn pdb(pdb: &mut PodDisruptionBudget) {
    keep_own_entries(&mut pdb.metadata);
    read_keys_only(&mut pdb.metadata);
}

/// Keeps what the HTTP API reads of a CITrust: its spec.
pub fn ci_trust(trust: &mut CITrust) {
    trust.metadata.managed_fields = None;
    read_keys_only(&mut trust.metadata);
}

/// Keeps a ReplicaSet's selector and replica count.
pub fn replica_set(rs: &mut ReplicaSet) {
    rs.metadata.managed_fields = None;
    read_keys_only(&mut rs.metadata);
    rs.status = None;
    if let Some(spec) = rs.spec.as_mut() {
        *spec = ReplicaSetSpec {
            selector: std::mem::take(&mut spec.selector),
            replicas: spec.replicas,
            ..ReplicaSetSpec::default()
        };
    }
}

/// Keeps a StatefulSet's selector and replica count.
pub fn stateful_set(sts: &mut StatefulSet) {
    sts.metadata.managed_fields = None;
    read_keys_only(&mut sts.metadata);
    sts.status = None;
    if let Some(spec) = sts.spec.as_mut() {
        *spec = StatefulSetSpec {
            selector: std::mem::take(&mut spec.selector),
            replicas: spec.replicas,
            ..StatefulSetSpec::default()
        };
    }
}

/// Keeps what the window controller and the drain watcher read of a Deployment: its metadata
/// (the guard's own managedFields entries only), the selector, replicas, strategy and pause
/// (a rollout decision), `progressDeadlineSeconds` (how long an intercepted eviction may wait
/// for a rollout), the template's `restartedAt` annotation (a rollout the report tells from a
/// disruption), and of the status only what says whether a rollout is under way.
pub fn deployment(d: &mut Deployment) {
    keep_own_entries(&mut d.metadata);
    read_keys_only(&mut d.metadata);
    if let Some(status) = d.status.as_mut() {
        *status = DeploymentStatus {
            observed_generation: status.observed_generation,
            replicas: status.replicas,
            updated_replicas: status.updated_replicas,
            available_replicas: status.available_replicas,
            ..DeploymentStatus::default()
        };
    }
    if let Some(spec) = d.spec.as_mut() {
        let restarted_at = spec
            .template
            .metadata
            .as_mut()
            .and_then(|m| m.annotations.as_mut())
            .and_then(|a| a.remove(RESTARTED_AT));
        *spec = DeploymentSpec {
            selector: std::mem::take(&mut spec.selector),
            replicas: spec.replicas,
            strategy: spec.strategy.take(),
            paused: spec.paused,
            progress_deadline_seconds: spec.progress_deadline_seconds,
            template: PodTemplateSpec {
                metadata: restarted_at.map(|at| ObjectMeta {
                    annotations: Some(BTreeMap::from([(RESTARTED_AT.to_string(), at)])),
                    ..ObjectMeta::default()
                }),
                spec: None,
            },
            ..DeploymentSpec::default()
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_trimmed_node_keeps_its_disruption_marks() {
        let mut n: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1", "annotations": {"karpenter.sh/do-not-disrupt": "true"}},
            "spec": {"podCIDR": "10.0.0.0/24", "unschedulable": true,
                     "taints": [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]},
            "status": {"capacity": {"cpu": "4"}, "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .unwrap();
        node(&mut n);
        let spec = n.spec.as_ref().unwrap();
        assert_eq!(spec.unschedulable, Some(true));
        assert_eq!(
            spec.taints.as_ref().unwrap()[0].key,
            "karpenter.sh/disrupted"
        );
        assert!(spec.pod_cidr.is_none());
        assert!(n.status.is_none());
        assert!(n.metadata.annotations.is_some());
    }

    #[test]
    fn caches_keep_only_the_labels_and_annotations_the_guard_reads() {
        let big = "x".repeat(250_000);
        let mut p: PodDisruptionBudget = serde_json::from_value(json!({
            "metadata": {"name": "p", "labels": {"app.kubernetes.io/managed-by": "disruption-guard",
                                                 "disruption-guard.io/workload": "api", "team": "a"},
                         "annotations": {"note": big}},
            "spec": {"maxUnavailable": 0}
        }))
        .unwrap();
        pdb(&mut p);
        let labels = p.metadata.labels.as_ref().unwrap();
        assert_eq!(labels.len(), 2, "{labels:?}");
        assert!(p.metadata.annotations.is_none());
        assert!(p.spec.is_some());

        let mut d: Deployment = serde_json::from_value(json!({
            "metadata": {"name": "d", "labels": {"team": "a"},
                         "annotations": {"disruption-guard.io/rollout-on-drain": "false", "note": big}}
        }))
        .unwrap();
        deployment(&mut d);
        assert!(d.metadata.labels.is_none());
        let annotations = d.metadata.annotations.as_ref().unwrap();
        assert_eq!(annotations.len(), 1);
        assert_eq!(annotations["disruption-guard.io/rollout-on-drain"], "false");

        let mut rs: ReplicaSet = serde_json::from_value(json!({
            "metadata": {"name": "r", "annotations": {"deployment.kubernetes.io/revision": "3", "note": big}}
        }))
        .unwrap();
        replica_set(&mut rs);
        assert_eq!(rs.metadata.annotations.unwrap().len(), 1);
    }

    #[test]
    fn trimmed_workloads_keep_what_plans_and_rollout_decisions_read() {
        let mut rs: ReplicaSet = serde_json::from_value(json!({
            "metadata": {"name": "api-1"},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "api"}},
                     "template": {"spec": {"containers": [{"name": "app"}]}}},
            "status": {"replicas": 1}
        }))
        .unwrap();
        replica_set(&mut rs);
        let spec = rs.spec.as_ref().unwrap();
        assert_eq!(spec.replicas, Some(0));
        assert_eq!(spec.selector.match_labels.as_ref().unwrap()["app"], "api");
        assert!(spec.template.is_none() && rs.status.is_none());

        let mut d: Deployment = serde_json::from_value(json!({
            "metadata": {"name": "api"},
            "spec": {"selector": {"matchLabels": {"app": "api"}}, "replicas": 1, "paused": true,
                     "progressDeadlineSeconds": 120,
                     "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}},
                     "template": {"metadata": {"labels": {"app": "api"},
                                               "annotations": {RESTARTED_AT: "2026-01-01T00:00:00Z", "x": "y"}},
                                  "spec": {"containers": [{"name": "app"}]}}},
            "status": {"replicas": 1, "updatedReplicas": 1, "observedGeneration": 3,
                       "conditions": [{"type": "Available", "status": "True"}]}
        }))
        .unwrap();
        deployment(&mut d);
        let spec = d.spec.as_ref().unwrap();
        assert_eq!(spec.selector.match_labels.as_ref().unwrap()["app"], "api");
        let annotations = spec
            .template
            .metadata
            .as_ref()
            .unwrap()
            .annotations
            .as_ref()
            .unwrap();
        assert_eq!(annotations.len(), 1);
        assert_eq!(annotations[RESTARTED_AT], "2026-01-01T00:00:00Z");
        assert!(spec.template.spec.is_none());
        assert_eq!((spec.replicas, spec.paused), (Some(1), Some(true)));
        assert_eq!(spec.progress_deadline_seconds, Some(120));
        assert!(spec.strategy.as_ref().unwrap().rolling_update.is_some());
        let status = d.status.as_ref().unwrap();
        assert_eq!(
            (
                status.replicas,
                status.updated_replicas,
                status.observed_generation
            ),
            (Some(1), Some(1), Some(3))
        );
        assert!(status.conditions.is_none());
    }
}
