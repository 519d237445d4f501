//! The verdict on one eviction: allow it (and say why), deny it with a 429 while the pod's
//! Deployment rolls out, or allow it after all because the rollout took too long. Pure: the
//! Eviction request, the cached objects and the clock in, a [`Verdict`] out.
//!
//! Deny only when every one holds, checked in this order: the pod exists and matches the
//! Eviction's UID precondition; it is not terminating, Running and Ready; neither it nor its
//! namespace opted out; its node is being disrupted (`--drain-signals`, as the drain watcher
//! reads them); it belongs (through its ReplicaSet) to a Deployment a rollout can save
//! ([`crate::rollout::workload::surge`]); the Deployment was not already rolled out for this node
//! before the pod started; the eviction is not a dry run; and the deny has not lasted past the
//! timeout.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Node, Pod};
use strum::IntoEnumIterator;

use crate::k8s::signals::{self, Raised, Signal};
use crate::resources::names::INTERCEPT_EVICTIONS;
use crate::rollout::records;
use crate::rollout::target::{NodeRef, Target};
use crate::rollout::workload::{self, Chain, Owner, SkipReason, Surge};

pub use crate::rollout::deadline::{DEFAULT_PROGRESS_DEADLINE, MAX_TIMEOUT, timeout};

/// The Eviction as the API server sends it for review.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eviction {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// `deleteOptions.preconditions.uid`, when given.
    pub uid: Option<String>,
    /// Whether the eviction is a dry run.
    pub dry_run: bool,
}

/// Everything [`decide`] looks at.
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    /// The eviction under review.
    pub eviction: &'a Eviction,
    /// The pod, when cached.
    pub pod: Option<&'a Pod>,
    /// The pod's node, when cached.
    pub node: Option<&'a Node>,
    /// The pod's owner chain.
    pub owner: Owner<'a>,
    /// Whether the pod's namespace opted out.
    pub namespace_opted_out: bool,
    /// `--drain-signals`.
    pub signals: &'a [Signal],
    /// `--max-replicas`.
    pub max_replicas: i32,
    /// Now.
    pub now: Timestamp,
    /// When this replica first denied an eviction for this (Deployment, node).
    pub first_denied: Option<Timestamp>,
    /// Whether this replica already started the rollout for this (Deployment, node).
    pub rollout_started: bool,
    /// `--intercept-timeout`, when set.
    pub timeout: Option<Duration>,
}

/// Why an eviction is let through at once. The metric label of each is its name in snake case,
/// or the [`SkipReason`]'s own for [`AllowReason::Cannot`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, strum::EnumIter, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum AllowReason {
    /// No such pod (already gone, or never cached).
    PodGone,
    /// The Eviction's UID precondition names another pod of that name.
    UidMismatch,
    /// The pod is already being deleted.
    Terminating,
    /// The pod is not Running.
    NotRunning,
    /// The pod is not Ready: it serves nothing a rollout could keep up.
    NotReady,
    /// The pod opted out (annotation `disruption-guard.io/intercept-evictions: "false"`).
    PodOptedOut,
    /// The namespace opted out (label `disruption-guard.io/intercept-evictions: "false"`).
    NamespaceOptedOut,
    /// The pod's node is not being disrupted (`--drain-signals`).
    NodeNotDisrupted,
    /// The pod's controller is not a Deployment, nor a StatefulSet (DaemonSet, Job, …).
    NotADeployment,
    /// The ReplicaSet or Deployment is not cached (yet).
    OwnerUnknown,
    /// A rollout cannot save the pod, as the drain watcher would skip it.
    Cannot(SkipReason),
    /// The Deployment was already rolled out for this node, before this pod started: it is
    /// rolled out once per node.
    RolledOutBefore,
    /// A dry run: nothing is triggered.
    DryRun,
}

impl AllowReason {
    /// Metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cannot(reason) => reason.as_str(),
            other => other.into(),
        }
    }

    /// Every reason [`decide`] can give, each once: the label vocabulary of the metric. Every
    /// [`SkipReason`] but `RolloutInProgress`, which only the drain watcher decides.
    pub fn all() -> impl Iterator<Item = Self> {
        let plain = Self::iter().filter(|r| !matches!(r, Self::Cannot(_)));
        let skips = SkipReason::iter().filter(|r| *r != SkipReason::RolloutInProgress);
        plain.chain(skips.map(Self::Cannot))
    }
}

/// An eviction held back for a rollout: what to roll out, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Hold {
    /// The rollout that moves the pod.
    pub target: Target,
    /// The pod's uid.
    pub pod_uid: String,
    /// The node's disruption signal.
    pub raised: Raised,
    /// How long a deny may last for this Deployment ([`timeout`]).
    pub timeout: Duration,
}

/// The outcome of [`decide`].
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Let the eviction through.
    Allow(AllowReason),
    /// Answer 429 until the rollout has replaced the pod; start the rollout when asked, and
    /// record on the Deployment since when evictions are held when it records nothing yet.
    Deny {
        start_rollout: bool,
        record_hold: bool,
        hold: Hold,
    },
    /// Denied for longer than the timeout: let it through after all.
    AllowAfterTimeout { hold: Hold, since: Timestamp },
}

/// Decides on one eviction.
pub fn decide(facts: &Facts<'_>) -> Verdict {
    use AllowReason::*;
    let allow = Verdict::Allow;
    let Some(pod) = facts.pod else {
        return allow(PodGone);
    };
    if let Some(uid) = &facts.eviction.uid
        && pod.metadata.uid.as_ref() != Some(uid)
    {
        return allow(UidMismatch);
    }
    if pod.metadata.deletion_timestamp.is_some() {
        return allow(Terminating);
    }
    let status = pod.status.as_ref();
    if status.and_then(|s| s.phase.as_deref()) != Some("Running") {
        return allow(NotRunning);
    }
    if !is_ready(pod) {
        return allow(NotReady);
    }
    let pod_opt_out = pod.metadata.annotations.as_ref();
    if pod_opt_out.and_then(|a| a.get(INTERCEPT_EVICTIONS)) == Some(&"false".to_string()) {
        return allow(PodOptedOut);
    }
    if facts.namespace_opted_out {
        return allow(NamespaceOptedOut);
    }
    let Some((node, raised)) = facts
        .node
        .and_then(|n| Some((n, signals::disruption(n, facts.signals)?)))
    else {
        return allow(NodeNotDisrupted);
    };
    let (replica_set, deployment) = match workload::chain(pod, facts.owner) {
        Chain::Deployment {
            replica_set,
            deployment,
        } => (replica_set, deployment),
        Chain::Skip { reason, .. } => return allow(Cannot(reason)),
        Chain::NotOurs => return allow(NotADeployment),
        Chain::Unknown => return allow(OwnerUnknown),
    };
    match workload::surge(deployment, facts.max_replicas) {
        Surge::Saves { .. } => {}
        Surge::Cannot(reason) => return allow(Cannot(reason)),
        Surge::NoSpec => return allow(OwnerUnknown),
    }
    let node = NodeRef {
        name: node.metadata.name.clone().unwrap_or_default(),
        uid: node.metadata.uid.clone().unwrap_or_default(),
    };
    let marked = records::marked_for(deployment, &node);
    let rolled_out_at = records::rolled_out_at(deployment, &node);
    let held_since = records::held_since(deployment, &node);
    let created = pod.metadata.creation_timestamp.as_ref().map(|t| t.0);
    if marked && rolled_out_at.is_none_or(|at| created.is_some_and(|c| c > at)) {
        return allow(RolledOutBefore);
    }
    if facts.eviction.dry_run {
        return allow(DryRun);
    }
    let hold = Hold {
        target: Target {
            namespace: deployment.metadata.namespace.clone().unwrap_or_default(),
            deployment: deployment.metadata.name.clone().unwrap_or_default(),
            deployment_uid: deployment.metadata.uid.clone().unwrap_or_default(),
            replica_set: replica_set.name.clone().unwrap_or_default(),
            pod: pod.metadata.name.clone().unwrap_or_default(),
            node,
        },
        pod_uid: pod.metadata.uid.clone().unwrap_or_default(),
        raised,
        timeout: timeout(facts.timeout, deployment),
    };
    // The deny started with the first one any replica recorded on the Deployment, this
    // replica's first one, or the rollout any replica (or the drain watcher) made for this
    // node, whichever came first.
    let since = [held_since, facts.first_denied, rolled_out_at]
        .into_iter()
        .flatten()
        .min();
    if let Some(since) = since
        && facts.now.duration_since(since)
            >= SignedDuration::try_from(hold.timeout).unwrap_or(SignedDuration::MAX)
    {
        return Verdict::AllowAfterTimeout { hold, since };
    }
    Verdict::Deny {
        start_rollout: !marked && !facts.rollout_started,
        record_hold: held_since.is_none(),
        hold,
    }
}

/// Parses `--intercept-timeout`: a Go duration from 1s to [`MAX_TIMEOUT`]. A longer hold
/// would stall a drain past what any drainer waits for.
pub fn parse_timeout(value: &str) -> Result<Duration, String> {
    let timeout = crate::resources::duration::parse(value)?;
    if timeout < Duration::from_secs(1) || timeout > MAX_TIMEOUT {
        return Err(format!(
            "{value:?} is out of range: the interception holds an eviction between 1s and \
             15m at most, so that no drain stalls for longer"
        ));
    }
    Ok(timeout)
}

/// Whether the pod's `Ready` condition is `True`.
fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
