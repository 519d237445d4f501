//! What a held eviction sets going, each in its own task beside the answer: the rollout
//! through the shared rollout action ([`crate::rollout::restart`], so the drain watcher and
//! every replica make it once per (Deployment, node)), its Events, and the wait for the old pod
//! to go that the deny-to-gone metric measures; the hold record that dates the first deny on
//! the Deployment; and the Warning Events when an eviction is let through after the timeout.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::EventType;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::InterceptMetrics;
use super::decide::Hold;
use super::denials::{Denials, Key};
use super::handler::Actions;
use crate::k8s::signals::Signal;
use crate::rollout::restart::{Cause, Check, Fresh, Outcome, Rollouts, still_saves};
use crate::rollout::workload::SkipReason;
use crate::runtime::Pods;
use crate::runtime::events::Note;
use crate::runtime::held;

/// Action of the interception's Events.
const ACTION: &str = "RolloutOnEviction";
/// How often the wait for the old pod looks at the pod cache.
const GONE_POLL: Duration = Duration::from_millis(500);

/// The interception's writer.
pub struct Actor {
    pub rollouts: Rollouts,
    pub signals: Vec<Signal>,
    pub max_replicas: i32,
    pub denials: Arc<Denials>,
    pub metrics: Arc<InterceptMetrics>,
    pub pods: Pods,
    pub shutdown: CancellationToken,
}

impl Actions for Arc<Actor> {
    fn start_rollout(&self, hold: &Hold, key: Key) {
        let (actor, hold) = (self.clone(), hold.clone());
        tokio::spawn(async move { actor.roll_out(hold, key).await });
    }

    fn record_hold(&self, hold: &Hold, key: Key, since: Timestamp) {
        let (actor, hold) = (self.clone(), hold.clone());
        tokio::spawn(async move { actor.write_hold(hold, key, since).await });
    }

    fn report_timeout(&self, hold: &Hold, since: Timestamp) {
        self.warn_timeout(hold, since);
    }

    fn report_skip(&self, pod: &ObjectReference, reason: SkipReason) {
        self.publish_skip(pod, reason);
    }
}

impl Actor {
    /// Writes the hold record on the Deployment (see
    /// [`crate::rollout::restart::Rollouts::record_hold`]); a failure lets the next deny try
    /// again.
    async fn write_hold(&self, hold: Hold, key: Key, since: Timestamp) {
        let target = &hold.target;
        match self.rollouts.record_hold(target, since).await {
            Ok(written) => {
                debug!(deployment = %target.deployment, node = %target.node.name, %since, written, "hold recorded");
            }
            Err(error) => {
                warn!(
                    deployment = %target.deployment, node = %target.node.name,
                    error = %error, source = ?std::error::Error::source(&error),
                    "recording the held eviction failed; the next deny tries again"
                );
                self.denials.hold_record_failed(&key);
            }
        }
    }

    /// Rolls the Deployment out (unless the fresh reads say otherwise), reports it, and waits
    /// for the held pod to go.
    async fn roll_out(&self, hold: Hold, key: Key) {
        let max_replicas = self.max_replicas;
        // The fresh objects must still call for the rollout: a Deployment a rollout can save.
        let recheck = |fresh: &Fresh| {
            if still_saves(fresh, max_replicas) {
                Check::Go(())
            } else {
                Check::Stop(())
            }
        };
        let target = &hold.target;
        let outcome = self
            .rollouts
            .roll_out(target, None, &self.signals, recheck)
            .await;
        let result = match &outcome {
            Ok(Outcome::RolledOut(())) => "rolled_out",
            Ok(Outcome::AlreadyRolledOut) => "already_rolled_out",
            Ok(Outcome::MovedOn | Outcome::Declined(())) => "changed",
            Err(error) => error.category(),
        };
        self.metrics.rollout(result);
        match outcome {
            Ok(Outcome::RolledOut(())) => {
                info!(
                    namespace = %target.namespace, deployment = %target.deployment,
                    pod = %target.pod, node = %target.node.name, "rolled out for a held eviction"
                );
                self.report_rollout(&hold).await;
            }
            Ok(Outcome::AlreadyRolledOut) => {}
            Ok(Outcome::MovedOn | Outcome::Declined(())) => {
                debug!(deployment = %target.deployment, "re-check decided against the rollout");
                self.denials.rollout_failed(&key);
                return;
            }
            Err(error) => {
                warn!(
                    deployment = %target.deployment, node = %target.node.name,
                    error = %error, source = ?std::error::Error::source(&error),
                    "rollout for a held eviction failed; the next deny tries again"
                );
                self.denials.rollout_failed(&key);
                return;
            }
        }
        self.wait_until_gone(&hold, &key).await;
    }

    /// Waits (at most the timeout and a minute) until the held pod is gone or terminating,
    /// then measures from the first deny.
    async fn wait_until_gone(&self, hold: &Hold, key: &Key) {
        let gone = || {
            let pod = self.pods.get(&hold.target.namespace, &hold.target.pod);
            pod.is_none_or(|p| {
                p.metadata.uid.as_deref() != Some(&hold.pod_uid)
                    || p.metadata.deletion_timestamp.is_some()
            })
        };
        let wait = async {
            while !gone() {
                tokio::time::sleep(GONE_POLL).await;
            }
        };
        let bound = hold.timeout + Duration::from_secs(60);
        tokio::select! {
            _ = self.shutdown.cancelled() => return,
            done = tokio::time::timeout(bound, wait) => if done.is_err() { return },
        }
        if let Some(first) = self.denials.forget(key) {
            let seconds = Timestamp::now()
                .duration_since(first)
                .as_secs_f64()
                .max(0.0);
            self.metrics.deny_to_gone.observe(seconds);
            // The pod held its node from the first deny until it was gone.
            let namespace = &hold.target.namespace;
            self.metrics.held.add(namespace, held::EVICTION, seconds);
            info!(
                namespace = %hold.target.namespace, pod = %hold.target.pod,
                seconds, "held pod gone"
            );
        }
    }

    /// Events on the Deployment and the node (the shared rollout Events), and on the pod.
    async fn report_rollout(&self, hold: &Hold) {
        let t = &hold.target;
        let why = format!(
            "node {} is being disrupted ({}) and an eviction of its lone pod {} was held back",
            t.node.name, hold.raised.signal, t.pod
        );
        let cause = Cause {
            reason: "RolledOutForEviction",
            action: ACTION,
            why,
        };
        self.rollouts.report(t, &cause);
        let note = Note {
            type_: EventType::Normal,
            reason: "EvictionHeld",
            action: ACTION,
            note: format!(
                "Eviction answered 429 while Deployment {} rolls out, so that a new pod starts \
                 on another node first; node {} is being disrupted ({})",
                t.deployment, t.node.name, hold.raised.signal
            ),
            secondary: Some(t.deployment_reference()),
        };
        self.rollouts.events().publish(&pod_reference(hold), note);
    }

    /// The Event for an eviction let through at once because a rollout cannot save the pod: a
    /// Warning when a person should look at it, as the drain watcher's skips.
    fn publish_skip(&self, pod: &ObjectReference, reason: SkipReason) {
        let type_ = if reason.warns() {
            EventType::Warning
        } else {
            EventType::Normal
        };
        let note = Note {
            type_,
            reason: "EvictionRolloutSkipped",
            action: ACTION,
            note: format!(
                "Eviction let through at once although the node is being disrupted: a rollout \
                 cannot start a new pod first: {} ({})",
                reason.explain(),
                reason.as_str()
            ),
            secondary: None,
        };
        self.rollouts.events().publish(pod, note);
    }

    /// Warning Events on the pod and the Deployment: the eviction was let through.
    fn warn_timeout(&self, hold: &Hold, since: Timestamp) {
        let t = &hold.target;
        let sentence = format!(
            "Eviction of pod {} allowed after {}s held back (since {since}): the rollout of \
             Deployment {} did not replace it in time (a new pod that cannot start or become \
             Ready, a volume that cannot attach twice?); a brief downtime beats a node that \
             never drains",
            t.pod,
            hold.timeout.as_secs(),
            t.deployment
        );
        for (regarding, secondary) in [
            (pod_reference(hold), t.deployment_reference()),
            (t.deployment_reference(), pod_reference(hold)),
        ] {
            let note = Note {
                type_: EventType::Warning,
                reason: "EvictionAllowedAfterTimeout",
                action: ACTION,
                note: sentence.clone(),
                secondary: Some(secondary),
            };
            self.rollouts.events().publish(&regarding, note);
        }
    }
}

fn pod_reference(hold: &Hold) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some(hold.target.pod.clone()),
        namespace: Some(hold.target.namespace.clone()),
        uid: Some(hold.pod_uid.clone()),
        ..Default::default()
    }
}
