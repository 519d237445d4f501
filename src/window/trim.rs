//! What the window controller keeps of the objects it caches: exactly the fields its decisions
//! read, so a cluster of 10,000 pods costs a few megabytes rather than the pods' full specs.
//!
//! Pods are cached as [`PodDigest`](crate::resources::PodDigest)s, read straight from the watch;
//! [`pod`] makes the same cut on pods read fresh from the API server. Nodes and workloads are
//! watched in full and trimmed before they are stored. Every cached object also loses the
//! managedFields entries that are not the guard's ([`keep_own_entries`]).
//!
//! | object | kept besides metadata |
//! |---|---|
//! | Pod | `spec.nodeName`; `status.phase`, `status.startTime`, the `DisruptionTarget` condition, container restart counts |
//! | Node | `spec.taints`, `spec.unschedulable` (no status) |
//! | ReplicaSet, StatefulSet | `spec.selector`, `spec.replicas` (no template, no status) |
//! | Deployment | `spec.selector`, the template's `restartedAt` annotation (no status) |

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, ReplicaSet, ReplicaSetSpec, StatefulSet, StatefulSetSpec,
};
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ContainerStatus, Node, NodeSpec, Pod, PodSpec, PodStatus, PodTemplateSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::fields::keep_own_entries;
use crate::resources::names::RESTARTED_AT;

/// Pod condition the window report reads (set when an eviction or preemption targets a pod).
const DISRUPTION_TARGET: &str = "DisruptionTarget";

/// Keeps what plans and reports read of a pod.
pub fn pod(pod: &mut Pod) {
    keep_own_entries(&mut pod.metadata);
    if let Some(spec) = pod.spec.as_mut() {
        *spec = PodSpec {
            node_name: spec.node_name.take(),
            ..PodSpec::default()
        };
    }
    if let Some(status) = pod.status.as_mut() {
        let conditions = status.conditions.take().map(|c| {
            c.into_iter()
                .filter(|c| c.type_ == DISRUPTION_TARGET)
                .collect::<Vec<_>>()
        });
        let restarts = status.container_statuses.take().map(|c| {
            c.into_iter()
                .map(|c| ContainerStatus {
                    name: c.name,
                    restart_count: c.restart_count,
                    ..ContainerStatus::default()
                })
                .collect::<Vec<_>>()
        });
        *status = PodStatus {
            phase: status.phase.take(),
            start_time: status.start_time.take(),
            conditions: conditions.filter(|c| !c.is_empty()),
            container_statuses: restarts,
            ..PodStatus::default()
        };
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

/// Keeps a ReplicaSet's selector and replica count.
pub fn replica_set(rs: &mut ReplicaSet) {
    rs.metadata.managed_fields = None;
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
    sts.status = None;
    if let Some(spec) = sts.spec.as_mut() {
        *spec = StatefulSetSpec {
            selector: std::mem::take(&mut spec.selector),
            replicas: spec.replicas,
            ..StatefulSetSpec::default()
        };
    }
}

/// Keeps a Deployment's selector, its template's `restartedAt` annotation (a rollout the
/// report tells from a disruption) and the guard's own managedFields entries.
pub fn deployment(d: &mut Deployment) {
    keep_own_entries(&mut d.metadata);
    d.status = None;
    if let Some(spec) = d.spec.as_mut() {
        let restarted_at = spec
            .template
            .metadata
            .as_mut()
            .and_then(|m| m.annotations.as_mut())
            .and_then(|a| a.remove(RESTARTED_AT));
        *spec = DeploymentSpec {
            selector: std::mem::take(&mut spec.selector),
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

    fn full_pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {
                "name": "api-1", "namespace": "shop", "labels": {"app": "api"},
                "annotations": {"karpenter.sh/do-not-disrupt": "true"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "api-1",
                                     "uid": "u1", "controller": true}],
                "managedFields": [
                    {"manager": "kube-controller-manager", "operation": "Update"},
                    {"manager": "disruption-guard/w1", "operation": "Apply"}
                ]
            },
            "spec": {
                "nodeName": "n1",
                "containers": [{"name": "app", "image": "registry.invalid/app:1",
                                "env": [{"name": "A", "value": "b"}]}],
                "volumes": [{"name": "v", "emptyDir": {}}]
            },
            "status": {
                "phase": "Running",
                "startTime": "2026-01-01T00:00:00Z",
                "podIP": "10.0.0.1",
                "conditions": [
                    {"type": "Ready", "status": "True"},
                    {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
                ],
                "containerStatuses": [{"name": "app", "image": "registry.invalid/app:1", "imageID": "x",
                                       "ready": true, "restartCount": 2}]
            }
        }))
        .unwrap()
    }

    #[test]
    fn a_trimmed_pod_keeps_what_windows_read_and_nothing_else() {
        let mut p = full_pod();
        pod(&mut p);
        let meta = &p.metadata;
        assert_eq!(meta.labels.as_ref().unwrap()["app"], "api");
        assert_eq!(
            meta.annotations.as_ref().unwrap()["karpenter.sh/do-not-disrupt"],
            "true"
        );
        assert_eq!(meta.owner_references.as_ref().unwrap()[0].name, "api-1");
        let managers: Vec<_> = meta
            .managed_fields
            .iter()
            .flatten()
            .filter_map(|m| m.manager.as_deref())
            .collect();
        assert_eq!(managers, ["disruption-guard/w1"]);
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("n1"));
        assert!(spec.containers.is_empty() && spec.volumes.is_none());
        let status = p.status.as_ref().unwrap();
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert!(status.start_time.is_some());
        assert!(status.pod_ip.is_none());
        let conditions = status.conditions.as_ref().unwrap();
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].type_, "DisruptionTarget");
        assert_eq!(
            status.container_statuses.as_ref().unwrap()[0].restart_count,
            2
        );
    }

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
    fn trimmed_workloads_keep_selector_and_replicas() {
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
            "spec": {"selector": {"matchLabels": {"app": "api"}},
                     "template": {"metadata": {"labels": {"app": "api"},
                                               "annotations": {RESTARTED_AT: "2026-01-01T00:00:00Z", "x": "y"}},
                                  "spec": {"containers": [{"name": "app"}]}}},
            "status": {"replicas": 1}
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
        assert!(spec.template.spec.is_none() && d.status.is_none());
    }
}
