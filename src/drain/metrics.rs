//! Metrics of the drain watcher: decisions by kind, rollouts by result, skips by reason, the
//! latency from a node's disruption signal to the rollout patch, and its handle of the shared
//! reconcile-duration histogram (`reconcile_duration_seconds{controller="drain"}`: one pass over
//! a disrupted node, registered by the wiring).
//!
//! Every `decision`, `result` and `reason` series exists from registration on (at 0), so
//! `rate()` and `increase()` see the first rollout failure or skip.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use strum::IntoEnumIterator;

use super::decide::{Decision, SkipReason};
use crate::runtime::Reconciles;
use crate::runtime::controller_runtime::ControllerSeries;
use crate::runtime::labels::{ReasonLabel, ResultLabel};

/// Label of `drain_decisions_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabel {
    /// One of [`DECISIONS`].
    pub decision: &'static str,
}

/// Every `decision` of `drain_decisions_total`.
pub const DECISIONS: [&str; 4] = ["roll_out", "already_rolled_out", "skip", "ignore"];

/// The `decision` label of a decision.
pub fn decision_label(decision: &Decision) -> &'static str {
    match decision {
        Decision::RollOut(_) => "roll_out",
        Decision::AlreadyRolledOut => "already_rolled_out",
        Decision::Skip { .. } => "skip",
        Decision::Ignore => "ignore",
    }
}

/// Every `result` of `drain_rollouts_total`: a rollout, a re-check that decided otherwise, and
/// each `Error::category`.
pub const RESULTS: [&str; 5] = [
    "rolled_out",
    "changed",
    "recheck_failed",
    "conflict",
    "patch_failed",
];

/// Every `reason` of `drain_skips_total`: each [`SkipReason`].
pub fn reasons() -> impl Iterator<Item = SkipReason> {
    SkipReason::iter()
}

/// Metric families of the drain watcher.
#[derive(Debug)]
pub struct DrainMetrics {
    /// Decisions for pods in scope on disrupted nodes, by decision, each counted once carried
    /// out (every pass over such a node decides again).
    pub decisions: Family<DecisionLabel, Counter>,
    /// Rollout attempts by result.
    pub rollouts: Family<ResultLabel, Counter>,
    /// Pods on disrupted nodes a rollout could not save, by reason (counted once per
    /// Deployment, node and reason).
    pub skips: Family<ReasonLabel, Counter>,
    /// Seconds from the disruption signal (taint `timeAdded`, else when the watcher first saw
    /// it) to the rollout patch.
    pub signal_to_rollout: Histogram,
    /// How long each pass over a disrupted node took, and whether a rollout in it failed.
    pub passes: Reconciles,
    /// Pods deleted from nodes being disrupted after an eviction through the Eviction API
    /// (counted by the pod cache: `Pods::count_evictions`).
    pub pods_evicted: Counter,
    /// controller-runtime's reconcile series for the passes (set by the wiring; the watcher's
    /// channel of triggers, drained into one pass, is no work queue to export).
    pub controller: ControllerSeries,
}

impl Default for DrainMetrics {
    /// With a reconcile-duration handle of its own, registered nowhere.
    fn default() -> Self {
        Self::new(Reconciles::unregistered("drain"))
    }
}

impl DrainMetrics {
    /// The drain watcher's families, recording the duration of its passes in `passes`.
    pub fn new(passes: Reconciles) -> Self {
        let metrics = Self {
            decisions: Family::default(),
            rollouts: Family::default(),
            skips: Family::default(),
            signal_to_rollout: Histogram::new(exponential_buckets(0.005, 2.0, 14)),
            passes,
            pods_evicted: Counter::default(),
            controller: ControllerSeries::default(),
        };
        for decision in DECISIONS {
            drop(metrics.decisions.get_or_create(&DecisionLabel { decision }));
        }
        for result in RESULTS {
            drop(metrics.rollouts.get_or_create(&ResultLabel { result }));
        }
        for reason in reasons() {
            drop(metrics.skips.get_or_create(&ReasonLabel {
                reason: reason.as_str(),
            }));
        }
        metrics
    }

    /// Registers every family with the operator's registry.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "drain_decisions",
            "Decisions of the drain watcher for pods on disrupted nodes, by decision",
            self.decisions.clone(),
        );
        registry.register(
            "drain_rollouts",
            "Rollouts of Deployments on disrupted nodes, by result",
            self.rollouts.clone(),
        );
        registry.register(
            "drain_skips",
            "Pods on disrupted nodes that a rollout cannot save, by reason",
            self.skips.clone(),
        );
        registry.register(
            "drain_signal_to_rollout_seconds",
            "Seconds from a node's disruption signal to the rollout patch",
            self.signal_to_rollout.clone(),
        );
        registry.register(
            "drain_pods_evicted",
            "Pods deleted from nodes being disrupted after an eviction through the Eviction API",
            self.pods_evicted.clone(),
        );
    }

    /// Counts one decision, once carried out.
    pub fn decided(&self, decision: &'static str) {
        self.decisions
            .get_or_create(&DecisionLabel { decision })
            .inc();
    }

    /// Counts one rollout attempt.
    pub fn rollout(&self, result: &'static str) {
        self.rollouts.get_or_create(&ResultLabel { result }).inc();
    }

    /// Counts one skip.
    pub fn skip(&self, reason: &'static str) {
        self.skips.get_or_create(&ReasonLabel { reason }).inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drain::Error;

    fn encoded(m: &DrainMetrics) -> String {
        crate::testing::encode_registered(|r| m.register(r))
    }

    #[test]
    fn a_fresh_registry_exports_every_decision_result_and_reason_at_zero() {
        let out = encoded(&DrainMetrics::default());
        for decision in DECISIONS {
            let line =
                format!("disruption_guard_drain_decisions_total{{decision=\"{decision}\"}} 0\n");
            assert!(out.contains(&line), "missing {line} in\n{out}");
        }
        for result in RESULTS {
            let line = format!("disruption_guard_drain_rollouts_total{{result=\"{result}\"}} 0\n");
            assert!(out.contains(&line), "missing {line} in\n{out}");
        }
        for reason in reasons() {
            let line = format!(
                "disruption_guard_drain_skips_total{{reason=\"{}\"}} 0\n",
                reason.as_str()
            );
            assert!(out.contains(&line), "missing {line} in\n{out}");
        }
        assert_eq!(
            out.matches("disruption_guard_drain_rollouts_total{")
                .count(),
            RESULTS.len()
        );
        assert_eq!(
            out.matches("disruption_guard_drain_skips_total{").count(),
            reasons().count()
        );
    }

    #[test]
    fn counting_moves_only_its_own_series() {
        let m = DrainMetrics::default();
        m.rollout("patch_failed");
        m.skip(SkipReason::Recreate.as_str());
        m.decided("already_rolled_out");
        let out = encoded(&m);
        assert!(out.contains(
            "disruption_guard_drain_decisions_total{decision=\"already_rolled_out\"} 1\n"
        ));
        assert!(out.contains("disruption_guard_drain_decisions_total{decision=\"ignore\"} 0\n"));
        assert!(out.contains("disruption_guard_drain_rollouts_total{result=\"patch_failed\"} 1\n"));
        assert!(out.contains("disruption_guard_drain_rollouts_total{result=\"rolled_out\"} 0\n"));
        assert!(out.contains("disruption_guard_drain_skips_total{reason=\"recreate\"} 1\n"));
        assert!(out.contains("disruption_guard_drain_skips_total{reason=\"paused\"} 0\n"));
    }

    #[test]
    fn the_lists_hold_every_reason_and_error_category_once() {
        let labels: std::collections::BTreeSet<_> = reasons().map(SkipReason::as_str).collect();
        assert_eq!(labels.len(), reasons().count(), "two reasons share a label");
        let kube_error = || kube::Error::Service("connection refused".into());
        for err in [
            Error::Recheck {
                what: "the Deployment",
                source: kube_error(),
            },
            Error::Conflict(kube_error()),
            Error::Patch(kube_error()),
        ] {
            // No wildcard: a new variant must be added above.
            match &err {
                Error::Recheck { .. } | Error::Conflict(_) | Error::Patch(_) => {}
            }
            assert!(RESULTS.contains(&err.category()), "{}", err.category());
        }
        let unique: std::collections::BTreeSet<_> = RESULTS.iter().collect();
        assert_eq!(unique.len(), RESULTS.len());
        // `decision_label` matches without a wildcard: a new `Decision` must get a label.
        let node = crate::drain::decide::NodeRef {
            name: "n".into(),
            uid: "u".into(),
        };
        let plan = crate::drain::decide::RolloutPlan {
            namespace: "ns".into(),
            deployment: "d".into(),
            deployment_uid: "d-uid".into(),
            replica_set: "rs".into(),
            pod: "p".into(),
            pdb: "pdb".into(),
            node,
        };
        let labels: std::collections::BTreeSet<_> = [
            Decision::RollOut(plan),
            Decision::AlreadyRolledOut,
            Decision::Skip {
                reason: SkipReason::Paused,
                subject: Default::default(),
            },
            Decision::Ignore,
        ]
        .iter()
        .map(decision_label)
        .collect();
        assert_eq!(labels, DECISIONS.into_iter().collect());
    }
}
