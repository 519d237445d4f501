//! The records the guard leaves on a Deployment, as data, and the patches that write them: the
//! rollout's (`kubectl rollout restart`'s `restartedAt` plus
//! `disruption-guard.io/rolled-out-for-node: <node>/<uid>`, as one server-side apply guarded by
//! the resourceVersion that was checked), the hold's, and their end. Pure; the writes are
//! [`super::restart`] and [`super::record_writes`].
//!
//! The record makes the rollout once per (Deployment, node) for every writer: the drain
//! watcher, the eviction interception, and any replica of the operator. A second record,
//! `disruption-guard.io/eviction-held-since: <node>/<uid>@<time>`, dates the first eviction the
//! interception held back, so its timeout survives restarts and replicas. Both records belong to
//! one disruption of the node: they end when the node is no longer disrupted (or gone), see
//! [`ended_records`], so a later drain of the same node is a new episode.

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Node;
use serde_json::json;

use super::target::{NodeRef, Target};
use crate::k8s::signals::{self, Signal};
use crate::resources::names::{EVICTION_HELD_SINCE, RESTARTED_AT, ROLLED_OUT_FOR_NODE};

fn annotation<'a>(deployment: &'a Deployment, key: &str) -> Option<&'a str> {
    deployment
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

fn record(deployment: &Deployment) -> Option<&str> {
    annotation(deployment, ROLLED_OUT_FOR_NODE)
}

/// The hold record, split: (node marker, since).
fn hold(deployment: &Deployment) -> Option<(&str, Option<Timestamp>)> {
    let value = annotation(deployment, EVICTION_HELD_SINCE)?;
    match value.rsplit_once('@') {
        Some((marker, since)) => Some((marker, since.parse().ok())),
        None => Some((value, None)),
    }
}

/// When the interception first held back an eviction of the Deployment's pod on `node`, as
/// recorded on the Deployment by whichever replica denied first.
pub fn held_since(deployment: &Deployment, node: &NodeRef) -> Option<Timestamp> {
    hold(deployment)
        .filter(|(marker, _)| *marker == node.marker())
        .and_then(|(_, since)| since)
}

/// Whether the Deployment carries either record for `node` (a rollout or a hold).
pub fn recorded_for(deployment: &Deployment, node: &NodeRef) -> bool {
    marked_for(deployment, node) || held_since(deployment, node).is_some()
}

/// The merge patch that records a hold on `node` since `since`, guarded by the Deployment's
/// resourceVersion (a concurrent writer gets a conflict and reads the other's record).
pub fn hold_patch(deployment: &Deployment, node: &NodeRef, since: Timestamp) -> serde_json::Value {
    let value = format!(
        "{}@{}",
        node.marker(),
        since.strftime("%Y-%m-%dT%H:%M:%S%.3fZ")
    );
    json!({
        "metadata": {
            "resourceVersion": deployment.metadata.resource_version,
            "annotations": {EVICTION_HELD_SINCE: value},
        }
    })
}

/// The nodes the Deployment's records name (a rollout's, a hold's), without repeats.
pub fn recorded_nodes(deployment: &Deployment) -> Vec<NodeRef> {
    let mut nodes: Vec<NodeRef> = vec![];
    let markers = [record(deployment), hold(deployment).map(|(m, _)| m)];
    for marker in markers.into_iter().flatten() {
        let (name, uid) = marker.rsplit_once('/').unwrap_or((marker, ""));
        let node = NodeRef {
            name: name.to_string(),
            uid: uid.to_string(),
        };
        if !nodes.contains(&node) {
            nodes.push(node);
        }
    }
    nodes
}

/// The records of a Deployment whose node is no longer being disrupted: gone, re-created
/// under its name (another uid), or without any of `enabled`'s signals. `lookup` finds a node
/// by name. The annotation keys to remove; empty when every record still stands.
pub fn ended_records<'a>(
    deployment: &Deployment,
    lookup: impl Fn(&str) -> Option<&'a Node>,
    enabled: &[Signal],
) -> Vec<&'static str> {
    let over = |marker: &str| {
        let (name, uid) = marker.rsplit_once('/').unwrap_or((marker, ""));
        lookup(name).is_none_or(|n| {
            n.metadata.uid.as_deref() != Some(uid) || signals::disruption(n, enabled).is_none()
        })
    };
    let mut ended = vec![];
    if record(deployment).is_some_and(over) {
        ended.push(ROLLED_OUT_FOR_NODE);
    }
    if hold(deployment).is_some_and(|(marker, _)| over(marker)) {
        ended.push(EVICTION_HELD_SINCE);
    }
    ended
}

/// The merge patch that removes `keys`, guarded by the Deployment's resourceVersion (a record
/// written in between is not lost).
pub fn end_patch(deployment: &Deployment, keys: &[&str]) -> serde_json::Value {
    let annotations: serde_json::Map<String, serde_json::Value> = keys
        .iter()
        .map(|k| (k.to_string(), serde_json::Value::Null))
        .collect();
    json!({
        "metadata": {
            "resourceVersion": deployment.metadata.resource_version,
            "annotations": annotations,
        }
    })
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
pub fn restarted(deployment: &Deployment) -> Option<&str> {
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

    fn node_object(name: &str, uid: &str, cordoned: bool) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name, "uid": uid},
            "spec": {"unschedulable": cordoned}
        }))
        .unwrap()
    }

    #[test]
    fn a_hold_is_known_only_for_the_node_it_names() {
        let d = deployment(
            json!({EVICTION_HELD_SINCE: "n1/u1@2026-12-02T14:05:06.250Z"}),
            None,
        );
        assert_eq!(
            held_since(&d, &node()),
            Some("2026-12-02T14:05:06.250Z".parse().unwrap())
        );
        assert!(recorded_for(&d, &node()) && !marked_for(&d, &node()));
        let other = NodeRef {
            name: "n1".into(),
            uid: "u2".into(),
        };
        assert_eq!(held_since(&d, &other), None);
        let garbled = deployment(json!({EVICTION_HELD_SINCE: "n1/u1@yesterday"}), None);
        assert_eq!(held_since(&garbled, &node()), None);
    }

    #[test]
    fn the_hold_patch_writes_the_node_and_the_time_guarded_by_the_resource_version() {
        let d = deployment(json!({}), None);
        let since: Timestamp = "2026-12-02T14:05:06.25Z".parse().unwrap();
        let body = hold_patch(&d, &node(), since);
        assert_eq!(body["metadata"]["resourceVersion"], "7");
        let value = body["metadata"]["annotations"][EVICTION_HELD_SINCE]
            .as_str()
            .unwrap();
        assert_eq!(value, "n1/u1@2026-12-02T14:05:06.250Z");
        let written = deployment(json!({EVICTION_HELD_SINCE: value}), None);
        assert_eq!(held_since(&written, &node()), Some(since));
    }

    #[test]
    fn records_end_when_their_node_is_no_longer_disrupted_or_gone() {
        let both = deployment(
            json!({ROLLED_OUT_FOR_NODE: "n1/u1", EVICTION_HELD_SINCE: "n1/u1@2026-12-02T14:05:06Z"}),
            Some("2026-12-02T14:05:06Z"),
        );
        let enabled = [Signal::Unschedulable];
        let cordoned = node_object("n1", "u1", true);
        let uncordoned = node_object("n1", "u1", false);
        let recreated = node_object("n1", "u9", true);
        let find = |n: &'static Node| move |name: &str| (name == "n1").then_some(n);
        let leak = |n: Node| -> &'static Node { Box::leak(Box::new(n)) };
        assert!(ended_records(&both, find(leak(cordoned)), &enabled).is_empty());
        assert_eq!(
            ended_records(&both, find(leak(uncordoned)), &enabled),
            vec![ROLLED_OUT_FOR_NODE, EVICTION_HELD_SINCE]
        );
        assert_eq!(
            ended_records(&both, find(leak(recreated)), &enabled).len(),
            2
        );
        assert_eq!(ended_records(&both, |_| None, &enabled).len(), 2);
        let none = deployment(json!({}), None);
        assert!(ended_records(&none, |_| None, &enabled).is_empty());
    }

    #[test]
    fn the_end_patch_removes_exactly_the_ended_records_guarded_by_the_resource_version() {
        let d = deployment(json!({}), None);
        let body = end_patch(&d, &[ROLLED_OUT_FOR_NODE]);
        assert_eq!(body["metadata"]["resourceVersion"], "7");
        assert_eq!(
            body["metadata"]["annotations"],
            json!({ROLLED_OUT_FOR_NODE: null})
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
