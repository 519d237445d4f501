//! `PodDigest`: the part of a Pod the operator's caches hold, deserialized straight from the
//! API server's watch, so a pod's containers, volumes and full status are never kept in memory.
//!
//! A metadata-only watch cannot serve pods: their node, phase and start time are in `spec` and
//! `status`. A `k8s_openapi` `Pod` is over 2 KiB before any field is set (its spec is inline), so
//! two caches of 10,000 pods would cost tens of megabytes; a digest is a fifth of that. It is
//! the same API object (`v1` `pods`): watches and lists of `Api<PodDigest>` read pods and
//! ignore every field not named here. The pure decisions keep taking `Pod`s: [`PodDigest::to_pod`]
//! builds one with exactly these fields for the few pods a decision looks at.

use std::borrow::Cow;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodCondition, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::Resource;
use serde::Deserialize;

/// Pod condition the window report reads (set when an eviction or preemption targets a pod).
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";
/// Pod condition the eviction interception reads (only its type and status are kept).
pub const READY: &str = "Ready";
/// Reason of the `DisruptionTarget` condition the API server sets on a pod the Eviction API
/// evicts (after every admission webhook let the eviction through).
pub const EVICTION_BY_EVICTION_API: &str = "EvictionByEvictionAPI";

/// The fields of a Pod the window controller and the drain watcher read.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct PodDigest {
    /// The pod's metadata, with only the guard's managedFields entries.
    #[serde(deserialize_with = "super::digest_meta::deserialize")]
    pub metadata: ObjectMeta,
    /// `spec.nodeName`.
    #[serde(default)]
    pub spec: DigestSpec,
    /// Phase, start time, the `DisruptionTarget` condition and restart counts.
    #[serde(default)]
    pub status: DigestStatus,
}

/// The part of `spec` kept.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DigestSpec {
    pub node_name: Option<String>,
}

/// The part of `status` kept.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DigestStatus {
    pub phase: Option<String>,
    pub start_time: Option<Time>,
    /// Only `DisruptionTarget` (rare) is kept once [`PodDigest::trim`] ran; `Ready` moves to
    /// [`DigestStatus::ready`].
    pub conditions: Option<Vec<PodCondition>>,
    /// The `Ready` condition's status (`None`: the pod has none), once trimmed: a flag instead
    /// of a condition per pod (about 250 bytes each, 2.4 MiB at 10,000 pods).
    #[serde(skip)]
    pub ready: Option<bool>,
    pub container_statuses: Option<Vec<RestartCount>>,
}

/// A container's name and restart count.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RestartCount {
    pub name: String,
    #[serde(default)]
    pub restart_count: i32,
}

impl Resource for PodDigest {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("Pod")
    }
    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("")
    }
    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("v1")
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("pods")
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl PodDigest {
    /// Drops the conditions nothing reads, and keeps of `Ready` only whether it is `True`
    /// (other managers' managedFields entries are never read in the first place: see
    /// [`digest_meta`](super::digest_meta)).
    pub fn trim(&mut self) {
        if let Some(conditions) = self.status.conditions.as_mut() {
            if let Some(ready) = conditions.iter().find(|c| c.type_ == READY) {
                self.status.ready = Some(ready.status == "True");
            }
            conditions.retain(|c| c.type_ == DISRUPTION_TARGET);
            if conditions.is_empty() {
                self.status.conditions = None;
            }
        }
    }

    /// Whether the Eviction API evicted the pod: its `DisruptionTarget` condition is `True`
    /// with reason `EvictionByEvictionAPI` (a plain delete, a preemption or a kubelet's own
    /// eviction give no condition or another reason).
    pub fn evicted_through_eviction_api(&self) -> bool {
        self.status.conditions.iter().flatten().any(|c| {
            c.type_ == DISRUPTION_TARGET
                && c.status == "True"
                && c.reason.as_deref() == Some(EVICTION_BY_EVICTION_API)
        })
    }

    /// The node the pod is bound to.
    pub fn node_name(&self) -> Option<&str> {
        self.spec.node_name.as_deref()
    }

    /// A `Pod` with exactly the digest's fields.
    pub fn to_pod(&self) -> Pod {
        let status = &self.status;
        Pod {
            metadata: self.metadata.clone(),
            spec: Some(PodSpec {
                node_name: self.spec.node_name.clone(),
                ..PodSpec::default()
            }),
            status: Some(PodStatus {
                phase: status.phase.clone(),
                start_time: status.start_time.clone(),
                conditions: conditions(status),
                container_statuses: status.container_statuses.as_ref().map(|c| {
                    c.iter()
                        .map(|c| ContainerStatus {
                            name: c.name.clone(),
                            restart_count: c.restart_count,
                            ..ContainerStatus::default()
                        })
                        .collect()
                }),
                ..PodStatus::default()
            }),
        }
    }
}

/// The digest's conditions as a pod has them: `Ready` (type and status) first, if known.
fn conditions(status: &DigestStatus) -> Option<Vec<PodCondition>> {
    let ready = status.ready.map(|ready| PodCondition {
        type_: READY.into(),
        status: if ready { "True" } else { "False" }.into(),
        ..PodCondition::default()
    });
    let mut all: Vec<PodCondition> = ready.into_iter().collect();
    all.extend(status.conditions.iter().flatten().cloned());
    (!all.is_empty()).then_some(all)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_a_disruption_target_of_the_eviction_api_means_evicted_through_it() {
        let with = |reason: &str, status: &str| -> PodDigest {
            let mut pod: PodDigest = serde_json::from_value(json!({
                "metadata": {"name": "p", "namespace": "shop"},
                "status": {"conditions": [
                    {"type": "Ready", "status": "True"},
                    {"type": "DisruptionTarget", "status": status, "reason": reason}
                ]}
            }))
            .unwrap();
            pod.trim();
            pod
        };
        assert!(with("EvictionByEvictionAPI", "True").evicted_through_eviction_api());
        assert!(!with("EvictionByEvictionAPI", "False").evicted_through_eviction_api());
        assert!(!with("PreemptionByScheduler", "True").evicted_through_eviction_api());
        assert!(!with("DeletionByTaintManager", "True").evicted_through_eviction_api());
        assert!(!PodDigest::default().evicted_through_eviction_api());
    }

    fn full_pod() -> serde_json::Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
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
                    {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:05Z"},
                    {"type": "ContainersReady", "status": "True"},
                    {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
                ],
                "containerStatuses": [{"name": "app", "image": "registry.invalid/app:1", "imageID": "x",
                                       "ready": true, "restartCount": 2}]
            }
        })
    }

    #[test]
    fn a_digest_read_from_a_full_pod_keeps_what_decisions_read() {
        let mut digest: PodDigest = serde_json::from_value(full_pod()).unwrap();
        digest.trim();
        let pod = digest.to_pod();
        let meta = &pod.metadata;
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
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("n1"));
        assert!(spec.containers.is_empty() && spec.volumes.is_none());
        let status = pod.status.as_ref().unwrap();
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert!(status.start_time.is_some());
        assert!(status.pod_ip.is_none());
        let conditions = status.conditions.as_ref().unwrap();
        let types: Vec<_> = conditions.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, [READY, DISRUPTION_TARGET]);
        assert_eq!(conditions[0].status, "True");
        assert!(conditions[0].last_transition_time.is_none());
        assert_eq!(
            status.container_statuses.as_ref().unwrap()[0].restart_count,
            2
        );
    }

    #[test]
    fn a_digest_is_a_fraction_of_a_pod_in_memory() {
        assert!(
            std::mem::size_of::<PodDigest>() * 3 < std::mem::size_of::<Pod>(),
            "{} vs {} bytes",
            std::mem::size_of::<PodDigest>(),
            std::mem::size_of::<Pod>()
        );
    }

    #[test]
    fn a_pod_without_spec_or_status_reads_as_an_empty_digest() {
        let digest: PodDigest = serde_json::from_value(json!({"metadata": {"name": "p"}})).unwrap();
        assert_eq!(digest.node_name(), None);
        assert_eq!(digest.status, DigestStatus::default());
    }

    #[test]
    fn it_is_the_v1_pods_resource() {
        assert_eq!(
            PodDigest::url_path(&(), Some("shop")),
            "/api/v1/namespaces/shop/pods"
        );
        assert_eq!(PodDigest::api_version(&()), "v1");
    }
}
