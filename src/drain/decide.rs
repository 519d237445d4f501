//! The decision for one pod on a node being disrupted: roll its Deployment out, skip it (and
//! say why), or leave it alone. Pure: plain objects in, a [`Decision`] out.
//!
//! A rollout saves the pod when all of these hold, checked in this order:
//! a PDB over the pod allows no disruption now; the pod belongs to a Deployment (through its
//! ReplicaSet) that did not opt out and was not already rolled out for this node; it runs at
//! most `max_replicas` replicas, is not paused, rolls with an effective `maxSurge >= 1` and
//! `maxUnavailable == 0`, and no rollout is under way.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::core::{Selector, SelectorExt};

use super::ROLLED_OUT_FOR_NODE;
use super::strategy::{self, Rollout};
use crate::resources::names::ROLLOUT_ON_DRAIN;

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
}

/// What owns the pod, as far as the stores know.
#[derive(Debug, Clone, Copy)]
pub enum Owner<'a> {
    /// No controller: a bare pod.
    None,
    /// A ReplicaSet; its metadata and Deployment when known.
    ReplicaSet {
        /// The ReplicaSet's metadata, `None` when not (yet) in the store.
        replica_set: Option<&'a ObjectMeta>,
        /// The Deployment controlling the ReplicaSet, when there is one and it is known.
        deployment: Option<&'a Deployment>,
    },
    /// Any other controller (StatefulSet, DaemonSet, Job, …).
    Other(&'a OwnerReference),
}

/// Everything [`decide`] looks at.
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    /// The disrupted node.
    pub node: &'a NodeRef,
    /// A pod on it.
    pub pod: &'a Pod,
    /// Its owner chain.
    pub owner: Owner<'a>,
    /// PDBs in the pod's namespace.
    pub pdbs: &'a [&'a PodDisruptionBudget],
    /// Whether this process already rolled the Deployment out for this node.
    pub rolled_out_before: bool,
    /// `--max-replicas`.
    pub max_replicas: i32,
}

/// Why a rollout was not made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SkipReason {
    Recreate,
    MaxSurgeZero,
    MaxUnavailableNonZero,
    InvalidStrategy,
    Paused,
    RolloutInProgress,
    StatefulSet,
    BarePod,
    BareReplicaSet,
    OptedOut,
    TooManyReplicas,
}

impl SkipReason {
    /// Metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Recreate => "recreate",
            Self::MaxSurgeZero => "max_surge_zero",
            Self::MaxUnavailableNonZero => "max_unavailable_nonzero",
            Self::InvalidStrategy => "invalid_strategy",
            Self::Paused => "paused",
            Self::RolloutInProgress => "rollout_in_progress",
            Self::StatefulSet => "statefulset",
            Self::BarePod => "bare_pod",
            Self::BareReplicaSet => "bare_replicaset",
            Self::OptedOut => "opted_out",
            Self::TooManyReplicas => "too_many_replicas",
        }
    }

    /// Whether the skip leaves a drain blocked that a person should look at (a Warning Event).
    /// Opting out and Deployments above `--max-replicas` are choices, not problems.
    pub fn warns(self) -> bool {
        !matches!(self, Self::OptedOut | Self::TooManyReplicas)
    }

    /// A sentence for the Event.
    pub fn explain(self) -> &'static str {
        match self {
            Self::Recreate => "the Recreate strategy removes the old pod before a new one starts",
            Self::MaxSurgeZero => "maxSurge resolves to 0, so no new pod can start first",
            Self::MaxUnavailableNonZero => {
                "maxUnavailable resolves above 0, so the rollout may remove the pod first"
            }
            Self::InvalidStrategy => "the rolling update parameters cannot be resolved",
            Self::Paused => "the Deployment is paused",
            Self::RolloutInProgress => "a rollout is already in progress",
            Self::StatefulSet => "StatefulSet pods keep their identity; a rollout cannot surge",
            Self::BarePod => "the pod has no controller that could start a replacement",
            Self::BareReplicaSet => "the ReplicaSet has no Deployment to roll out",
            Self::OptedOut => "the Deployment opted out with disruption-guard.io/rollout-on-drain",
            Self::TooManyReplicas => "the Deployment runs more replicas than --max-replicas",
        }
    }
}

/// A rollout to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolloutPlan {
    /// Namespace of the Deployment and the pod.
    pub namespace: String,
    /// Deployment name.
    pub deployment: String,
    /// Deployment uid.
    pub deployment_uid: String,
    /// The ReplicaSet between the pod and the Deployment.
    pub replica_set: String,
    /// The pod that blocks the drain.
    pub pod: String,
    /// The PDB that blocks its eviction.
    pub pdb: String,
    /// The disrupted node.
    pub node: NodeRef,
}

/// The outcome of [`decide`].
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Not ours to act on: nothing blocks the eviction, or the pod is not a workload pod.
    Ignore,
    /// The Deployment was already rolled out for this node.
    AlreadyRolledOut,
    /// A rollout cannot save the pod; `subject` is what the Event is about.
    Skip {
        reason: SkipReason,
        subject: ObjectReference,
    },
    /// Roll the Deployment out.
    RollOut(RolloutPlan),
}

/// Decides what to do about one pod on a disrupted node.
pub fn decide(facts: &Facts<'_>) -> Decision {
    let pod = facts.pod;
    if !is_live(pod) {
        return Decision::Ignore;
    }
    let Some(pdb) = blocking_pdb(pod, facts.pdbs) else {
        return Decision::Ignore;
    };
    let pdb_name = pdb.metadata.name.clone().unwrap_or_default();
    let deployment = match facts.owner {
        Owner::None => return skip(SkipReason::BarePod, reference(&pod.metadata, "v1", "Pod")),
        Owner::Other(owner) if owner.kind == "StatefulSet" => {
            return skip(SkipReason::StatefulSet, owner_reference(pod, owner));
        }
        Owner::Other(_) => return Decision::Ignore,
        Owner::ReplicaSet {
            replica_set: None, ..
        } => return Decision::Ignore,
        Owner::ReplicaSet {
            replica_set: Some(rs),
            deployment: None,
        } => {
            let is_owned = controller_of(rs).is_some_and(|o| o.kind == "Deployment");
            if is_owned {
                // The Deployment is not in the store yet; the next pass sees it.
                return Decision::Ignore;
            }
            return skip(
                SkipReason::BareReplicaSet,
                reference(rs, "apps/v1", "ReplicaSet"),
            );
        }
        Owner::ReplicaSet {
            replica_set: Some(rs),
            deployment: Some(d),
        } => (rs, d),
    };
    let (replica_set, deployment) = deployment;
    let subject = reference(&deployment.metadata, "apps/v1", "Deployment");
    let annotations = deployment.metadata.annotations.as_ref();
    let annotation = |key: &str| annotations.and_then(|a| a.get(key)).map(String::as_str);
    if facts.rolled_out_before || annotation(ROLLED_OUT_FOR_NODE) == Some(&facts.node.marker()) {
        return Decision::AlreadyRolledOut;
    }
    if annotation(ROLLOUT_ON_DRAIN) == Some("false") {
        return skip(SkipReason::OptedOut, subject);
    }
    let Some(spec) = deployment.spec.as_ref() else {
        return Decision::Ignore;
    };
    let replicas = spec.replicas.unwrap_or(1);
    if replicas > facts.max_replicas {
        return skip(SkipReason::TooManyReplicas, subject);
    }
    if spec.paused == Some(true) {
        return skip(SkipReason::Paused, subject);
    }
    match strategy::resolve(spec.strategy.as_ref(), replicas) {
        Err(_) => return skip(SkipReason::InvalidStrategy, subject),
        Ok(Rollout::Recreate) => return skip(SkipReason::Recreate, subject),
        Ok(Rollout::Rolling { max_surge: 0, .. }) => {
            return skip(SkipReason::MaxSurgeZero, subject);
        }
        Ok(Rollout::Rolling {
            max_unavailable, ..
        }) if max_unavailable > 0 => return skip(SkipReason::MaxUnavailableNonZero, subject),
        Ok(Rollout::Rolling { .. }) => {}
    }
    if rollout_in_progress(deployment, replicas) {
        return skip(SkipReason::RolloutInProgress, subject);
    }
    Decision::RollOut(RolloutPlan {
        namespace: deployment.metadata.namespace.clone().unwrap_or_default(),
        deployment: deployment.metadata.name.clone().unwrap_or_default(),
        deployment_uid: deployment.metadata.uid.clone().unwrap_or_default(),
        replica_set: replica_set.name.clone().unwrap_or_default(),
        pod: pod.metadata.name.clone().unwrap_or_default(),
        pdb: pdb_name,
        node: facts.node.clone(),
    })
}

/// Whether a later rollout for another node superseded this process's own record of having
/// rolled the Deployment out for `node`: the Deployment's marker names another node. Then
/// the marker, not the record, says what was done (a node disrupted, released and disrupted
/// again while the Deployment was rolled out for another node in between needs a new rollout,
/// even when this process never saw the node released).
pub fn superseded(deployment: &Deployment, node: &NodeRef) -> bool {
    deployment
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ROLLED_OUT_FOR_NODE))
        .is_some_and(|marker| *marker != node.marker())
}

fn skip(reason: SkipReason, subject: ObjectReference) -> Decision {
    Decision::Skip { reason, subject }
}

/// A pod that still runs: not terminating, not finished.
fn is_live(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    pod.metadata.deletion_timestamp.is_none() && !matches!(phase, Some("Succeeded" | "Failed"))
}

/// The first PDB selecting the pod that allows no disruption right now.
fn blocking_pdb<'a>(
    pod: &Pod,
    pdbs: &[&'a PodDisruptionBudget],
) -> Option<&'a PodDisruptionBudget> {
    let empty = Default::default();
    let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
    pdbs.iter().copied().find(|pdb| {
        let same_namespace = pdb.metadata.namespace == pod.metadata.namespace;
        // policy/v1: an empty selector selects every pod of the namespace, a missing one none.
        let selects = pdb
            .spec
            .as_ref()
            .and_then(|s| s.selector.clone())
            .and_then(|s| Selector::try_from(s).ok())
            .is_some_and(|s| s.matches(labels));
        let blocked = pdb
            .status
            .as_ref()
            .is_some_and(|s| s.disruptions_allowed == 0);
        same_namespace && selects && blocked
    })
}

/// Whether the deployment controller is still rolling the Deployment out: it has not seen the
/// latest spec, or old or not-yet-updated pods remain.
fn rollout_in_progress(deployment: &Deployment, replicas: i32) -> bool {
    let Some(status) = deployment.status.as_ref() else {
        return true;
    };
    let observed = status.observed_generation.unwrap_or(0);
    observed < deployment.metadata.generation.unwrap_or(0)
        || status.updated_replicas.unwrap_or(0) < replicas
        || status.replicas.unwrap_or(0) > replicas
}

/// The owner chain of `pod`, given the ReplicaSet and Deployment its controller references
/// resolve to (looked up by the caller, from stores or fresh reads).
pub fn owner<'a>(
    pod: &'a Pod,
    replica_set: Option<&'a ObjectMeta>,
    deployment: Option<&'a Deployment>,
) -> Owner<'a> {
    match controller_of(&pod.metadata) {
        None => Owner::None,
        Some(o) if o.kind == "ReplicaSet" => Owner::ReplicaSet {
            replica_set,
            deployment,
        },
        Some(o) => Owner::Other(o),
    }
}

/// The controller owner reference of an object.
pub fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .as_ref()?
        .iter()
        .find(|o| o.controller == Some(true))
}

fn reference(meta: &ObjectMeta, api_version: &str, kind: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some(api_version.into()),
        kind: Some(kind.into()),
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        uid: meta.uid.clone(),
        ..Default::default()
    }
}

fn owner_reference(pod: &Pod, owner: &OwnerReference) -> ObjectReference {
    ObjectReference {
        api_version: Some(owner.api_version.clone()),
        kind: Some(owner.kind.clone()),
        name: Some(owner.name.clone()),
        namespace: pod.metadata.namespace.clone(),
        uid: Some(owner.uid.clone()),
        ..Default::default()
    }
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
