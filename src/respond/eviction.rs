//! The `lifecycle.k8s.io/v1alpha1` `Eviction` (Kubernetes 1.37+, gate `EvictionRequestAPI`), as
//! far as the responder reads it: its target pod, the responders the controller activates, the
//! responder entries and the two final conditions. k8s-openapi has no such type; unknown fields
//! are ignored, every field the responder does not need is left out, and the cache keeps no
//! managedFields.
//!
//! The controller (`evictionrequest-controller`) creates one Eviction per target pod and walks
//! its `status.targetResponders` by priority, one `Active` at a time; the Active responder
//! writes its own entry of `status.responders` (heartbeat, expected completion, completion,
//! message).

use std::borrow::Cow;

use jiff::Timestamp;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::Deserialize;

use crate::k8s::stub::Stub;
use crate::k8s::trim::Keep;

/// API group of Evictions and EvictionRequests.
pub const GROUP: &str = "lifecycle.k8s.io";
/// The one version 1.37 and 1.38 serve.
pub const VERSION: &str = "v1alpha1";
/// The responder the controller appends to every pod's list, priority 100: it evicts.
pub const IMPERATIVE_EVICTOR: &str = "imperative-eviction.k8s.io/evictor";

/// An Eviction, trimmed to what the responder reads.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Eviction {
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: EvictionSpec,
    #[serde(default)]
    pub status: Option<EvictionStatus>,
}

/// `spec`: the target.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct EvictionSpec {
    #[serde(default)]
    pub target: EvictionTarget,
}

/// `spec.target`: a pod (the only kind of target there is).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct EvictionTarget {
    #[serde(default)]
    pub pod: Option<PodReference>,
}

/// The target pod: name and uid.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct PodReference {
    pub name: String,
    pub uid: String,
}

/// `status`, the part the responder reads.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EvictionStatus {
    #[serde(default)]
    pub conditions: Vec<Condition>,
    #[serde(default)]
    pub target_responders: Vec<TargetResponder>,
    #[serde(default)]
    pub responders: Vec<ResponderStatus>,
}

/// A condition (`TargetEvicted`, `Failed`): type, status, reason.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default)]
    pub reason: String,
}

/// A responder of the target and its state (`Inactive`, `Active`, `Interrupted`, `Canceled`,
/// `Completed`), which only the controller sets.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct TargetResponder {
    pub name: String,
    #[serde(default)]
    pub priority: Option<i32>,
    #[serde(default)]
    pub state: String,
}

/// A responder's entry: `startTime` from the controller, the rest from the responder.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResponderStatus {
    pub name: String,
    #[serde(default)]
    pub start_time: Option<Timestamp>,
    #[serde(default)]
    pub heartbeat_time: Option<Timestamp>,
    #[serde(default)]
    pub expected_completion_time: Option<Timestamp>,
    #[serde(default)]
    pub completion_time: Option<Timestamp>,
    #[serde(default)]
    pub message: Option<String>,
}

impl Eviction {
    /// The state the controller gives responder `name` (empty when it is not listed).
    pub fn state_of(&self, name: &str) -> &str {
        self.status
            .as_ref()
            .and_then(|s| s.target_responders.iter().find(|r| r.name == name))
            .map_or("", |r| r.state.as_str())
    }

    /// Responder `name`'s entry, when there is one.
    pub fn entry(&self, name: &str) -> Option<&ResponderStatus> {
        self.status
            .as_ref()
            .and_then(|s| s.responders.iter().find(|r| r.name == name))
    }

    /// The condition of `type_` when it is `True`.
    pub fn condition_true(&self, type_: &str) -> Option<&Condition> {
        self.status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == type_))
            .filter(|c| c.status == "True")
    }

    /// The target pod.
    pub fn pod(&self) -> Option<&PodReference> {
        self.spec.target.pod.as_ref()
    }
}

impl Resource for Eviction {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("Eviction")
    }
    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(GROUP)
    }
    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(VERSION)
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("evictions")
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl Stub for Eviction {
    fn stub(metadata: ObjectMeta, _: &()) -> Self {
        Self {
            metadata,
            ..Self::default()
        }
    }
}

impl Keep for Eviction {
    fn keep(&mut self) {
        self.metadata.managed_fields = None;
        self.metadata.annotations = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_eviction_is_read_with_unknown_fields_and_without_a_status() {
        let e: Eviction = serde_json::from_value(json!({
            "apiVersion": "lifecycle.k8s.io/v1alpha1", "kind": "Eviction",
            "metadata": {"name": "pod-1-web", "namespace": "ci"},
            "spec": {"target": {"pod": {"name": "web", "uid": "u"}}, "future": 1},
        }))
        .unwrap();
        assert_eq!(e.pod().unwrap().name, "web");
        assert_eq!(e.state_of("x.io/y"), "");
        assert!(e.entry("x.io/y").is_none());
    }

    #[test]
    fn states_entries_and_conditions_are_found_by_name() {
        let e: Eviction = serde_json::from_value(json!({
            "metadata": {"name": "pod-1-web"},
            "spec": {"target": {"pod": {"name": "web", "uid": "u"}}},
            "status": {
                "conditions": [{"type": "Failed", "status": "True", "reason": "CanceledDueToNoRequesters",
                    "lastTransitionTime": "2026-01-01T00:00:00Z", "message": "m"}],
                "targetResponders": [{"name": "a.io/b", "priority": 10000, "state": "Active"}],
                "responders": [{"name": "a.io/b", "startTime": "2026-01-01T00:00:00Z"}],
            }
        }))
        .unwrap();
        assert_eq!(e.state_of("a.io/b"), "Active");
        assert!(e.entry("a.io/b").unwrap().start_time.is_some());
        assert_eq!(
            e.condition_true("Failed").unwrap().reason,
            "CanceledDueToNoRequesters"
        );
        assert!(e.condition_true("TargetEvicted").is_none());
    }
}
