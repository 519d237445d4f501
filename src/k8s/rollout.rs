//! The rollout the guard makes, as data: which Deployment for which node ([`Target`]), the
//! record it leaves on the Deployment (`disruption-guard.io/rolled-out-for-node: <node>/<uid>`)
//! and the patch itself — `kubectl rollout restart`'s `restartedAt` plus that record, as one
//! server-side apply guarded by the resourceVersion that was checked. Pure; the write is
//! `runtime::rollout`.
//!
//! The record makes the rollout once per (Deployment, node) for every writer: the drain
//! watcher, the eviction interception, and any replica of the operator.

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ObjectReference;
use serde_json::json;

use crate::resources::names::{RESTARTED_AT, ROLLED_OUT_FOR_NODE};

/// The node whose disruption is being handled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRef {
    /// Node name.
    pub name: String,
    /// Node uid (a node re-created with the same name is another node).
    pub uid: String,
}

impl NodeRef {
    /// The value of the Deployment annotation recording a rollout for this node.
    pub fn marker(&self) -> String {
        format!("{}/{}", self.name, self.uid)
    }

    /// A reference to the node, for an Event.
    pub fn reference(&self) -> ObjectReference {
        ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(self.name.clone()),
            uid: Some(self.uid.clone()),
            ..Default::default()
        }
    }
}

/// A rollout to make: the Deployment, the chain to the pod it should move, and the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Namespace of the Deployment and the pod.
    pub namespace: String,
    /// Deployment name.
    pub deployment: String,
    /// Deployment uid.
    pub deployment_uid: String,
    /// The ReplicaSet between the pod and the Deployment.
    pub replica_set: String,
    /// The pod that should move.
    pub pod: String,
    /// The disrupted node.
    pub node: NodeRef,
}

impl Target {
    /// A reference to the Deployment, for an Event.
    pub fn deployment_reference(&self) -> ObjectReference {
        ObjectReference {
            api_version: Some("apps/v1".into()),
            kind: Some("Deployment".into()),
            name: Some(self.deployment.clone()),
            namespace: Some(self.namespace.clone()),
            uid: Some(self.deployment_uid.clone()),
            ..Default::default()
        }
    }
}

fn record(deployment: &Deployment) -> Option<&str> {
    deployment
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ROLLED_OUT_FOR_NODE))
        .map(String::as_str)
}

/// Whether the Deployment records a rollout for `node`.
pub fn marked_for(deployment: &Deployment, node: &NodeRef) -> bool {
    record(deployment) == Some(&node.marker())
}

/// Whether a later rollout for another node superseded this process's own record of having
/// rolled the Deployment out for `node`: the Deployment's marker names another node. Then
/// the marker, not the record, says what was done (a node disrupted, released and disrupted
/// again while the Deployment was rolled out for another node in between needs a new rollout,
/// even when this process never saw the node released).
pub fn superseded(deployment: &Deployment, node: &NodeRef) -> bool {
    record(deployment).is_some_and(|marker| marker != node.marker())
}

/// The template's `restartedAt`, when it is a time.
fn restarted(deployment: &Deployment) -> Option<&str> {
    deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.annotations.as_ref())
        .and_then(|a| a.get(RESTARTED_AT))
        .map(String::as_str)
}

/// When the rollout recorded for `node` was made: the template's `restartedAt`, if the
/// Deployment records a rollout for `node` (any replica's, any component's).
pub fn rolled_out_at(deployment: &Deployment, node: &NodeRef) -> Option<Timestamp> {
    if !marked_for(deployment, node) {
        return None;
    }
    restarted(deployment)?.parse().ok()
}

/// The server-side apply body of the rollout: `restartedAt` (see [`restarted_at`]) and the
/// record for the node, guarded by the `deployment`'s resourceVersion.
pub fn patch(target: &Target, deployment: &Deployment, now: Timestamp) -> serde_json::Value {
    let restarted_at = restarted_at(now, restarted(deployment));
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": target.deployment,
            "namespace": target.namespace,
            "resourceVersion": deployment.metadata.resource_version,
            "annotations": {ROLLED_OUT_FOR_NODE: target.node.marker()},
        },
        "spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: restarted_at}}}},
    })
}

/// The `restartedAt` value: RFC 3339 to the second like kubectl, to the millisecond when the
/// second-precision value equals the previous one (it would not change the template).
pub fn restarted_at(now: Timestamp, previous: Option<&str>) -> String {
    let seconds = now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    if previous == Some(seconds.as_str()) {
        now.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
    } else {
        seconds
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> NodeRef {
        NodeRef {
            name: "n1".into(),
            uid: "u1".into(),
        }
    }

    fn deployment(annotations: serde_json::Value, restarted: Option<&str>) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns", "resourceVersion": "7",
                "annotations": annotations},
            "spec": {"selector": {}, "template": {"metadata": {"annotations":
                restarted.map(|r| json!({RESTARTED_AT: r})).unwrap_or(json!({}))}}}
        }))
        .unwrap()
    }

    #[test]
    fn restarted_at_is_rfc3339_to_the_second_like_kubectl() {
        let now: Timestamp = "2026-12-02T14:05:06.789Z".parse().unwrap();
        assert_eq!(restarted_at(now, None), "2026-12-02T14:05:06Z");
        assert_eq!(
            restarted_at(now, Some("2026-12-01T00:00:00Z")),
            "2026-12-02T14:05:06Z"
        );
    }

    #[test]
    fn restarted_at_still_changes_the_template_within_the_same_second() {
        let now: Timestamp = "2026-12-02T14:05:06.789Z".parse().unwrap();
        assert_eq!(
            restarted_at(now, Some("2026-12-02T14:05:06Z")),
            "2026-12-02T14:05:06.789Z"
        );
    }

    #[test]
    fn the_patch_records_the_node_and_is_guarded_by_the_resource_version() {
        let d = deployment(json!({}), Some("2026-12-02T14:05:06Z"));
        let target = Target {
            namespace: "ns".into(),
            deployment: "web".into(),
            deployment_uid: "d".into(),
            replica_set: "web-rs".into(),
            pod: "web-1".into(),
            node: node(),
        };
        let now: Timestamp = "2026-12-02T14:05:06.5Z".parse().unwrap();
        let body = patch(&target, &d, now);
        assert_eq!(body["metadata"]["resourceVersion"], "7");
        assert_eq!(
            body["metadata"]["annotations"][ROLLED_OUT_FOR_NODE],
            "n1/u1"
        );
        assert_eq!(
            body["spec"]["template"]["metadata"]["annotations"][RESTARTED_AT],
            "2026-12-02T14:05:06.500Z"
        );
    }

    #[test]
    fn the_rollout_time_is_known_only_for_a_rollout_recorded_for_the_node() {
        let at = "2026-12-02T14:05:06Z";
        let this = deployment(json!({ROLLED_OUT_FOR_NODE: "n1/u1"}), Some(at));
        assert_eq!(rolled_out_at(&this, &node()), Some(at.parse().unwrap()));
        assert!(marked_for(&this, &node()) && !superseded(&this, &node()));
        let other = deployment(json!({ROLLED_OUT_FOR_NODE: "n2/u2"}), Some(at));
        assert_eq!(rolled_out_at(&other, &node()), None);
        assert!(!marked_for(&other, &node()) && superseded(&other, &node()));
        let kubectl = deployment(json!({}), Some(at));
        assert_eq!(rolled_out_at(&kubectl, &node()), None);
    }
}
