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

use crate::k8s::references::reference;
use crate::k8s::selector;
use crate::rollout::records;
use crate::rollout::target::Target;
use crate::rollout::workload::{self, Chain, Surge};

pub use crate::k8s::references::controller_of;
pub use crate::rollout::records::superseded;
pub use crate::rollout::target::NodeRef;
pub use crate::rollout::workload::{Owner, SkipReason, owner};

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
    let (replica_set, deployment) = match workload::chain(pod, facts.owner) {
        Chain::Deployment {
            replica_set,
            deployment,
        } => (replica_set, deployment),
        Chain::Skip { reason, subject } => return skip(reason, subject),
        // Not a rollout's business, or the owner chain is not in the stores yet (the next
        // pass sees it).
        Chain::NotOurs | Chain::Unknown => return Decision::Ignore,
    };
    let subject = reference(&deployment.metadata, "apps/v1", "Deployment");
    if facts.rolled_out_before || records::marked_for(deployment, facts.node) {
        return Decision::AlreadyRolledOut;
    }
    let replicas = match workload::surge(deployment, facts.max_replicas) {
        Surge::Saves { replicas } => replicas,
        Surge::Cannot(reason) => return skip(reason, subject),
        Surge::NoSpec => return Decision::Ignore,
    };
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

impl RolloutPlan {
    /// The rollout itself, without the PDB that called for it.
    pub fn target(&self) -> Target {
        Target {
            namespace: self.namespace.clone(),
            deployment: self.deployment.clone(),
            deployment_uid: self.deployment_uid.clone(),
            replica_set: self.replica_set.clone(),
            pod: self.pod.clone(),
            node: self.node.clone(),
        }
    }
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
        let selects =
            selector::optional_matches(pdb.spec.as_ref().and_then(|s| s.selector.as_ref()), labels);
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

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
