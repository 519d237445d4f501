//! A `TestWindow`'s status, written only by the window controller: its phase, the `Ready`
//! condition, what it tracks between reconciles and the report; and the one decision of
//! whether a window's protection is in effect (`TestWindowStatus::is_ready`) or gone
//! ([`is_released`]).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Lifecycle of a window.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Phase {
    /// Accepted, protection not yet written.
    #[default]
    Pending,
    /// Open: protection is kept in place.
    Active,
    /// Its time ran out; protection is released (or being released: see `Ready`).
    Expired,
    /// Closed by CI; protection is released (or being released: see `Ready`).
    Closed,
}

impl Phase {
    /// The phase's name as the status writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Active => "Active",
            Phase::Expired => "Expired",
            Phase::Closed => "Closed",
        }
    }

    /// Whether the window has ended (protection released or being released).
    pub fn is_final(self) -> bool {
        matches!(self, Phase::Expired | Phase::Closed)
    }

    /// The phase a status names (`as_str`'s inverse).
    pub fn from_name(name: &str) -> Option<Phase> {
        [Phase::Pending, Phase::Active, Phase::Expired, Phase::Closed]
            .into_iter()
            .find(|p| p.as_str() == name)
    }
}

/// The type of the condition that says whether protection is in effect.
pub const READY: &str = "Ready";

/// Whether a window has ended and its protection is gone, from its phase and the `Ready`
/// condition's reason. The controller records the end first (the phase turns final, `Ready`
/// False with reason [`RELEASING`]) and removes the protection after, so a final phase alone
/// does not mean released. The one decision the status, the API's view and the client share.
pub fn is_released(phase: Phase, ready_reason: Option<&str>) -> bool {
    phase.is_final() && ready_reason != Some(RELEASING)
}

/// Observed state of a window, written only by the window controller.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TestWindowStatus {
    /// Where the window is in its lifecycle.
    #[serde(default)]
    pub phase: Phase,
    /// When the window opened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opened_at: Option<Time>,
    /// When the window ends by itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Time>,
    /// When every piece of protection was first in place (the window first became Ready).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_at: Option<Time>,
    /// When the window ended (closed or expired).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<Time>,
    /// What is protected right now.
    #[serde(default)]
    pub protected: ProtectedSummary,
    /// What happened to the selection while the window was open.
    #[serde(default)]
    pub report: WindowReport,
    /// `Ready` is True once every piece of protection is written and observed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// What the controller remembers between reconciles to build the report (pods seen,
    /// rollout markers); kept in the status so a restart of the operator loses nothing.
    #[serde(default, skip_serializing_if = "Tracking::is_empty")]
    pub tracking: Tracking,
}

/// The `Ready` condition's reason while an ended window's protection is still being removed.
pub const RELEASING: &str = "Releasing";

/// The `Ready` condition's reason (status True) of an open window whose selector selects no
/// pod: it is kept Ready (a window opened before a deploy is legitimate), and says so.
pub const NO_PODS_SELECTED: &str = "NoPodsSelected";

/// Whether a window whose `Ready` condition has `ready_status` and `ready_reason` is open over
/// no pod: the one decision the API's view, `requirePods` and the client share.
pub fn selects_no_pod(ready_status: Option<&str>, ready_reason: Option<&str>) -> bool {
    ready_status == Some("True") && ready_reason == Some(NO_PODS_SELECTED)
}

impl TestWindowStatus {
    /// The `Ready` condition, if the controller has written one.
    pub fn ready_condition(&self) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == READY)
    }

    /// Whether protection is in effect: `Ready` is True.
    pub fn is_ready(&self) -> bool {
        self.ready_condition().is_some_and(|c| c.status == "True")
    }

    /// Whether the window has ended and its protection is gone ([`is_released`]).
    pub fn is_released(&self) -> bool {
        is_released(
            self.phase,
            self.ready_condition().map(|c| c.reason.as_str()),
        )
    }

    /// Whether the window is Ready over no pod ([`selects_no_pod`]).
    pub fn selects_no_pod(&self) -> bool {
        let ready = self.ready_condition();
        selects_no_pod(
            ready.map(|c| c.status.as_str()),
            ready.map(|c| c.reason.as_str()),
        )
    }
}

/// Observations the report is computed from.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Tracking {
    /// Pods of the selection seen alive during the window.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pods: Vec<TrackedPod>,
    /// `restartedAt` of each protected Deployment's pod template when last seen.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub restarted_at: std::collections::BTreeMap<String, String>,
    /// Nodes this window holds now, that Karpenter could otherwise disrupt, by node name: since
    /// when, and by what.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub held: std::collections::BTreeMap<String, HeldNode>,
}

impl Tracking {
    /// True when nothing is tracked.
    pub fn is_empty(&self) -> bool {
        self.pods.is_empty() && self.restarted_at.is_empty() && self.held.is_empty()
    }
}

/// A node the window has held since `since`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeldNode {
    /// When the hold began.
    pub since: Time,
    /// What holds it.
    pub by: HeldBy,
}

/// What of a window keeps a node Karpenter could disrupt.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum HeldBy {
    /// The `karpenter.sh/do-not-disrupt` annotation (on the pod or the node): Karpenter leaves
    /// a consolidatable node alone.
    Annotation,
    /// The window's PodDisruptionBudget: Karpenter cannot evict the pod from the node.
    Pdb,
}

impl HeldBy {
    /// Metric label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            HeldBy::Annotation => "annotation",
            HeldBy::Pdb => "pdb",
        }
    }
}

/// Node-seconds a window held nodes Karpenter could otherwise disrupt, by what held them.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HeldSeconds {
    /// Held by the `do-not-disrupt` annotation.
    #[serde(default)]
    #[schemars(schema_with = "seconds")]
    pub annotation: u64,
    /// Held by the window's PodDisruptionBudget.
    #[serde(default)]
    #[schemars(schema_with = "seconds")]
    pub pdb: u64,
}

impl HeldSeconds {
    /// The seconds held by `by`.
    pub fn get(&self, by: HeldBy) -> u64 {
        match by {
            HeldBy::Annotation => self.annotation,
            HeldBy::Pdb => self.pdb,
        }
    }

    /// Adds `seconds` held by `by`.
    pub fn add(&mut self, by: HeldBy, seconds: u64) {
        match by {
            HeldBy::Annotation => self.annotation += seconds,
            HeldBy::Pdb => self.pdb += seconds,
        }
    }

    /// Every reason, with its seconds.
    pub fn each(&self) -> [(HeldBy, u64); 2] {
        [
            (HeldBy::Annotation, self.annotation),
            (HeldBy::Pdb, self.pdb),
        ]
    }

    /// The node-seconds held in all.
    pub fn total(&self) -> u64 {
        self.annotation + self.pdb
    }
}

/// One pod of the selection as last seen.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TrackedPod {
    /// Pod name.
    pub name: String,
    /// Pod UID: a new pod under the same name is a different pod.
    pub uid: String,
    /// Sum of container restart counts.
    #[serde(default)]
    pub restarts: i32,
    /// The ReplicaSet that owns it, if any (tells a rollout's replacement from a disruption).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_set: Option<String>,
    /// Whether an eviction of it was seen blocked (counted once).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub blocked: bool,
}

/// Counts and names of what a window protects.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProtectedSummary {
    /// Workloads (Deployments, StatefulSets, ReplicaSets) covered by a PDB.
    #[serde(default)]
    #[schemars(schema_with = "count")]
    pub workloads: u32,
    /// Pods carrying the do-not-disrupt annotations.
    #[serde(default)]
    #[schemars(schema_with = "count")]
    pub pods: u32,
    /// Nodes carrying the do-not-disrupt annotations.
    #[serde(default)]
    #[schemars(schema_with = "count")]
    pub nodes: u32,
    /// PodDisruptionBudgets the window relies on: its own and reused ones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pdbs: Vec<String>,
    /// Of `pdbs`, those that existed before the window (owned by someone else).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reused_pdbs: Vec<String>,
}

/// What CI needs to know after its tests: did the environment stay stable?
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WindowReport {
    /// Evictions of protected pods that a PDB refused.
    #[serde(default)]
    #[schemars(schema_with = "count")]
    pub evictions_blocked: u32,
    /// Selected pods that went away anyway (deleted, evicted, restarted).
    #[serde(default)]
    #[schemars(schema_with = "count")]
    pub pods_disrupted: u32,
    /// Names of the disrupted pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disrupted_pods: Vec<String>,
    /// Rollouts the drain watcher made for the selection.
    #[serde(default)]
    #[schemars(schema_with = "count")]
    pub rollouts: u32,
    /// Nodes hosting protected pods that were disrupted (tainted, cordoned, deleted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes_disrupted: Vec<String>,
    /// The most the window protected at once while it was open, each count on its own (what
    /// `protected` said at its highest); kept after the release, which clears `protected`.
    #[serde(default)]
    pub peak_protected: PeakProtected,
    /// What protection cost: node-seconds during which a node hosting a protected pod was one
    /// Karpenter could disrupt (its NodeClaim `Consolidatable`, or the node being drained) and
    /// the window kept it. Counted when each hold ends (the pod left the node, the node stopped
    /// being a candidate, or the window ended).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub held_node_seconds: HeldSeconds,
}

/// The most of each kind a window protected at once while it was open.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PeakProtected {
    /// Workloads covered by a PDB.
    #[serde(default)]
    #[schemars(schema_with = "count")]
    pub workloads: u32,
    /// Pods carrying the do-not-disrupt annotations.
    #[serde(default)]
    #[schemars(schema_with = "count")]
    pub pods: u32,
    /// Nodes carrying the do-not-disrupt annotations.
    #[serde(default)]
    #[schemars(schema_with = "count")]
    pub nodes: u32,
}

impl PeakProtected {
    /// The peak once `now` is protected: each count the larger of the two.
    pub fn with(self, now: &ProtectedSummary) -> PeakProtected {
        PeakProtected {
            workloads: self.workloads.max(now.workloads),
            pods: self.pods.max(now.pods),
            nodes: self.nodes.max(now.nodes),
        }
    }
}

fn is_zero(held: &HeldSeconds) -> bool {
    held.total() == 0
}

impl WindowReport {
    /// True when nothing of the selection was disrupted.
    pub fn is_clean(&self) -> bool {
        self.pods_disrupted == 0 && self.nodes_disrupted.is_empty()
    }
}

/// Seconds are `u64` in Rust; Kubernetes schemas know `int64`, not `uint64`.
fn seconds(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "integer", "format": "int64", "minimum": 0})
}

/// Counts are `u32` in Rust; Kubernetes schemas know `int32`/`int64`, not `uint32`.
fn count(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "integer", "format": "int32", "minimum": 0})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peak_keeps_the_most_of_each_count_seen_at_once() {
        let now = |workloads, pods, nodes| ProtectedSummary {
            workloads,
            pods,
            nodes,
            ..Default::default()
        };
        let peak = PeakProtected::default()
            .with(&now(1, 3, 2))
            .with(&now(2, 1, 1))
            .with(&ProtectedSummary::default());
        assert_eq!(
            peak,
            PeakProtected {
                workloads: 2,
                pods: 3,
                nodes: 2
            }
        );
    }

    #[test]
    fn no_pod_selected_is_a_ready_window_with_that_reason_only() {
        assert!(selects_no_pod(Some("True"), Some(NO_PODS_SELECTED)));
        assert!(!selects_no_pod(Some("True"), Some("Protected")));
        assert!(!selects_no_pod(Some("False"), Some(NO_PODS_SELECTED)));
        assert!(!selects_no_pod(None, None));
    }
}
