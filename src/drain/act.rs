//! The one place the drain watcher writes: [`Actor::act`] hands a rollout decision to the
//! shared rollout action ([`crate::rollout::restart`]), which re-checks it against fresh reads
//! (with this watcher's own decision, PDB included) and patches the Deployment; then Events on
//! the Deployment and the node say so.
//!
//! Only the Lease holder may act: [`Actor::act`] checks leadership first (see
//! [`Actor::may_act`]), right before the fresh reads and the patch.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::events::EventType;

use super::Error;
use super::decide::{self, Decision, Facts, RolloutPlan, SkipReason};
use super::stores::DrainStores;
use crate::k8s::signals::{Raised, Signal};
use crate::rollout::restart::{Cause, Check, Fresh, Outcome, Rollouts};
use crate::runtime::events::Note;
use crate::runtime::{Leadership, Runtime};

/// Action of the drain watcher's Events.
const ACTION: &str = "RolloutOnDrain";

/// Writes rollouts and Events.
#[derive(Clone)]
pub struct Actor {
    rollouts: Rollouts,
    leader: Leadership,
}

impl Actor {
    /// An actor writing with the runtime's client and reporting Events as this replica.
    pub fn new(runtime: &Runtime) -> Self {
        Self {
            rollouts: Rollouts::new(runtime),
            leader: runtime.leader.clone(),
        }
    }

    /// Whether this replica may write: it holds the leader Lease (or runs without election).
    fn may_act(&self) -> bool {
        self.leader.is_leader()
    }

    /// Re-decides `plan` from fresh reads and, if it still holds, rolls the Deployment out.
    /// Returns the fresh decision (`RollOut` means the patch was made), or `None` when this
    /// replica may not act.
    pub async fn act(
        &self,
        plan: &RolloutPlan,
        enabled: &[Signal],
        max_replicas: i32,
    ) -> Result<Option<Decision>, Error> {
        if !self.may_act() {
            return Ok(None);
        }
        let recheck = |fresh: &Fresh| {
            let pdbs: Vec<&PodDisruptionBudget> = fresh.pdb.iter().collect();
            let decision = decide::decide(&Facts {
                node: &plan.node,
                pod: &fresh.pod,
                owner: decide::owner(
                    &fresh.pod,
                    Some(&fresh.replica_set.metadata),
                    Some(&fresh.deployment),
                ),
                pdbs: &pdbs,
                // Fresh reads: the Deployment's own marker says whether it was rolled out.
                rolled_out_before: false,
                max_replicas,
            });
            match decision {
                Decision::RollOut(_) => Check::Go(decision),
                other => Check::Stop(other),
            }
        };
        let outcome = self
            .rollouts
            .roll_out(&plan.target(), Some(&plan.pdb), enabled, recheck)
            .await?;
        Ok(Some(match outcome {
            Outcome::MovedOn => Decision::Ignore,
            Outcome::AlreadyRolledOut => Decision::AlreadyRolledOut,
            Outcome::Declined(decision) | Outcome::RolledOut(decision) => decision,
        }))
    }

    /// Ends the rollout and hold records of Deployments whose node is no longer disrupted (see
    /// [`crate::rollout::restart::Rollouts::end_records`]), so the next drain of that node is a
    /// new episode. `Ok(0)` when this replica may not act.
    pub async fn end_records(
        &self,
        stores: &DrainStores,
        enabled: &[Signal],
        in_scope: impl Fn(&str) -> bool,
    ) -> Result<usize, Error> {
        if !self.may_act() {
            return Ok(0);
        }
        self.rollouts
            .end_records(&stores.deployments, &stores.nodes, enabled, in_scope)
            .await
    }

    /// Events on the Deployment and the node after a rollout.
    pub fn report_rollout(&self, plan: &RolloutPlan, raised: &Raised) {
        let why = format!(
            "node {} is being disrupted ({}) and PodDisruptionBudget {} allows no disruption \
             of pod {}",
            plan.node.name, raised.signal, plan.pdb, plan.pod
        );
        let cause = Cause {
            reason: "RolledOutForDrain",
            action: ACTION,
            why,
        };
        self.rollouts.report(&plan.target(), &cause);
    }

    /// The Event for a skip: a Warning when the drain stays blocked by something a person
    /// should look at.
    pub fn report_skip(&self, subject: &ObjectReference, reason: SkipReason, node: &str) {
        let type_ = if reason.warns() {
            EventType::Warning
        } else {
            EventType::Normal
        };
        let note = format!(
            "Not rolled out although node {node} is being disrupted and a \
             PodDisruptionBudget blocks the eviction: {} ({})",
            reason.explain(),
            reason.as_str()
        );
        let note = Note {
            type_,
            reason: "DrainRolloutSkipped",
            action: ACTION,
            note,
            secondary: None,
        };
        self.rollouts.events().publish(subject, note);
    }
}
