//! What the responder does next for one Eviction. Pure: the Eviction, the pod and its owner
//! chain read fresh, the flags and the clock in, a [`Step`] out.
//!
//! In order: an Eviction already decided (`TargetEvicted` or `Failed` True) or withdrawn
//! (`Failed=True CanceledDueToNoRequesters`, or our state `Canceled`) is left alone; the guard
//! acts only while its entry is `Active`, started and not completed. The pod gone or
//! terminating: done. A pod a rollout cannot save (the drain watcher's and the webhook's rule,
//! [`workload::chain`] and [`workload::surge`]): step aside at once, saying why, so the next
//! responder (in the end the imperative evictor) acts. Else roll the Deployment out once,
//! report progress at most every [`HEARTBEAT_EVERY`], and complete once the new pod is Ready
//! and the old one is gone or terminating; a rollout that has not done so within the hold
//! timeout ([`deadline::timeout`]) is given up: step aside (fail open).

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;

use super::eviction::Eviction;
use crate::resources::names::{RESPONDER, RESTARTED_AT};
use crate::rollout::deadline;
use crate::rollout::workload::{self, Chain, Owner, SkipReason, Surge};

/// The least time between two progress reports (the API asks for no more than one per 20 s;
/// the controller interrupts a responder silent for 20 minutes).
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(20);
/// The reason of the `Failed` condition when every requester withdrew.
pub const CANCELED: &str = "CanceledDueToNoRequesters";

/// Everything [`decide`] looks at.
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    /// The Eviction, as cached.
    pub eviction: &'a Eviction,
    /// The target pod, read fresh (`None`: not found).
    pub pod: Option<&'a Pod>,
    /// The pod's owner chain, read fresh.
    pub owner: Owner<'a>,
    /// Whether the pod's namespace is within `--namespaces`.
    pub in_scope: bool,
    /// `--max-replicas`.
    pub max_replicas: i32,
    /// `--intercept-timeout`, when set.
    pub timeout: Option<Duration>,
    /// Now.
    pub now: Timestamp,
}

/// Why the responder hands over without acting. The metric and Event wording of each is
/// [`Aside::explain`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aside {
    /// A rollout cannot save the pod.
    Cannot(SkipReason),
    /// The pod's controller is neither a Deployment nor a StatefulSet (DaemonSet, Job, …).
    NotADeployment,
    /// The ReplicaSet or Deployment is gone.
    OwnerGone,
    /// The namespace is outside `--namespaces`.
    OutOfScope,
    /// The pod runs on no node: no service a rollout would keep up.
    NotScheduled,
    /// The rollout did not make a Ready replacement within the hold timeout.
    TimedOut(Duration),
}

impl Aside {
    /// A sentence for the Eviction's message and the Events.
    pub fn explain(self) -> String {
        match self {
            Self::Cannot(reason) => format!(
                "a rollout cannot start a new pod first: {} ({})",
                reason.explain(),
                reason.as_str()
            ),
            Self::NotADeployment => "the pod does not belong to a Deployment".into(),
            Self::OwnerGone => "the pod's ReplicaSet or Deployment is gone".into(),
            Self::OutOfScope => "the namespace is outside the guard's --namespaces".into(),
            Self::NotScheduled => "the pod is not scheduled: no running pod to keep up".into(),
            Self::TimedOut(t) => format!(
                "the rollout made no Ready replacement within {}s; handing over (fail open)",
                t.as_secs()
            ),
        }
    }

    /// The `outcome` metric label.
    pub fn outcome(self) -> &'static str {
        match self {
            Self::TimedOut(_) => "timed_out",
            _ => "stepped_aside",
        }
    }
}

/// What to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Not the guard's turn, or its turn is over: nothing to do.
    Idle,
    /// Every requester withdrew: stop, write nothing more.
    Withdrawn,
    /// Hand over at once: `completionTime` now, with why.
    StepAside(Aside),
    /// Roll the Deployment out, then report.
    RollOut(Progress),
    /// Report progress.
    Heartbeat(Progress),
    /// Nothing to write yet.
    Wait,
    /// The pod moved: `completionTime` now.
    Complete { message: String },
}

/// A progress report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    /// The Deployment being rolled out.
    pub deployment: String,
    /// The `message`.
    pub message: String,
    /// The `expectedCompletionTime`: the end of the hold timeout.
    pub expected: Timestamp,
}

/// Whose turn it is: `Some(Idle)` or `Some(Withdrawn)` when the guard has nothing to do for
/// `eviction` (whatever the pod), `None` when its response is Active, started and unfinished.
pub fn turn(eviction: &Eviction) -> Option<Step> {
    let ours = matches!(eviction.state_of(RESPONDER), "Active" | "Canceled");
    if let Some(failed) = eviction.condition_true("Failed") {
        return Some(if failed.reason == CANCELED && ours {
            Step::Withdrawn
        } else {
            Step::Idle
        });
    }
    if eviction.condition_true("TargetEvicted").is_some() {
        return Some(Step::Idle);
    }
    match eviction.state_of(RESPONDER) {
        "Active" => {}
        "Canceled" => return Some(Step::Withdrawn),
        _ => return Some(Step::Idle),
    }
    let entry = eviction.entry(RESPONDER)?;
    if entry.start_time.is_none() || entry.completion_time.is_some() {
        return Some(Step::Idle);
    }
    None
}

/// Decides the next step for the Eviction in `facts`.
pub fn decide(facts: &Facts<'_>) -> Step {
    let eviction = facts.eviction;
    if let Some(step) = turn(eviction) {
        return step;
    }
    let Some(entry) = eviction.entry(RESPONDER) else {
        return Step::Idle;
    };
    let Some(started) = entry.start_time else {
        return Step::Idle;
    };
    let target_uid = eviction.pod().map(|p| p.uid.as_str());
    let pod = facts
        .pod
        .filter(|p| p.metadata.uid.is_some() && p.metadata.uid.as_deref() == target_uid);
    let Some(pod) = pod else {
        return Step::Complete {
            message: "the pod is gone".into(),
        };
    };
    if pod.metadata.deletion_timestamp.is_some() {
        return Step::Complete {
            message: "the pod is terminating".into(),
        };
    }
    if !facts.in_scope {
        return Step::StepAside(Aside::OutOfScope);
    }
    if pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_ref())
        .is_none()
    {
        return Step::StepAside(Aside::NotScheduled);
    }
    let deployment = match workload::chain(pod, facts.owner) {
        Chain::Deployment { deployment, .. } => deployment,
        Chain::Skip { reason, .. } => return Step::StepAside(Aside::Cannot(reason)),
        Chain::NotOurs => return Step::StepAside(Aside::NotADeployment),
        Chain::Unknown => return Step::StepAside(Aside::OwnerGone),
    };
    match workload::surge(deployment, facts.max_replicas) {
        Surge::Saves { .. } => {}
        Surge::Cannot(reason) => return Step::StepAside(Aside::Cannot(reason)),
        Surge::NoSpec => return Step::StepAside(Aside::OwnerGone),
    }
    let timeout = deadline::timeout(facts.timeout, deployment);
    let expected = started
        .checked_add(SignedDuration::try_from(timeout).unwrap_or(SignedDuration::MAX))
        .unwrap_or(started);
    let name = deployment.metadata.name.clone().unwrap_or_default();
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    if !rolled_out_since(deployment, pod) {
        // A rollout the re-check keeps declining is given up as a slow one is.
        if facts.now >= expected {
            return Step::StepAside(Aside::TimedOut(timeout));
        }
        return Step::RollOut(Progress {
            message: format!(
                "rolling out Deployment {name} so that a new pod is Ready before pod {pod_name} goes"
            ),
            deployment: name,
            expected,
        });
    }
    if rollout_complete(deployment) {
        return Step::Complete {
            message: format!(
                "Deployment {name} rolled out: the new pod is Ready and pod {pod_name} is leaving"
            ),
        };
    }
    if facts.now >= expected {
        return Step::StepAside(Aside::TimedOut(timeout));
    }
    let last = entry.heartbeat_time.unwrap_or(started);
    let every = SignedDuration::try_from(HEARTBEAT_EVERY).unwrap_or(SignedDuration::MAX);
    if facts.now.duration_since(last) < every {
        return Step::Wait;
    }
    Step::Heartbeat(Progress {
        message: progress(deployment, pod_name),
        deployment: name,
        expected,
    })
}

/// Whether the Deployment was rolled out after the pod was created: its template's
/// `restartedAt` is not older than the pod, so the pod belongs to an old template and the
/// rollout replaces it.
pub fn rolled_out_since(deployment: &Deployment, pod: &Pod) -> bool {
    let restarted = deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.annotations.as_ref())
        .and_then(|a| a.get(RESTARTED_AT))
        .and_then(|t| t.parse::<Timestamp>().ok());
    let created = pod.metadata.creation_timestamp.as_ref().map(|t| t.0);
    match (restarted, created) {
        (Some(restarted), Some(created)) => restarted >= created,
        _ => false,
    }
}

/// `kubectl rollout status`'s test of a finished rollout: the controller saw the latest spec,
/// every replica is updated and available, and no old replica is left (a terminating pod no
/// longer counts).
pub fn rollout_complete(deployment: &Deployment) -> bool {
    let (Some(spec), Some(status)) = (deployment.spec.as_ref(), deployment.status.as_ref()) else {
        return false;
    };
    let replicas = spec.replicas.unwrap_or(1);
    let generation = deployment.metadata.generation.unwrap_or(0);
    let updated = status.updated_replicas.unwrap_or(0);
    status.observed_generation.unwrap_or(0) >= generation
        && updated >= replicas
        && status.replicas.unwrap_or(0) <= updated
        && status.available_replicas.unwrap_or(0) >= updated
}

/// The progress message of a rollout under way.
fn progress(deployment: &Deployment, pod: &str) -> String {
    let name = deployment.metadata.name.as_deref().unwrap_or_default();
    let replicas = deployment
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1);
    let status = deployment.status.clone().unwrap_or_default();
    format!(
        "rolling out Deployment {name} so that a new pod is Ready before pod {pod} goes: \
         {}/{replicas} updated, {} available, {} in all",
        status.updated_replicas.unwrap_or(0),
        status.available_replicas.unwrap_or(0),
        status.replicas.unwrap_or(0),
    )
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
