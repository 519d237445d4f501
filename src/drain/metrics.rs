//! Metrics of the drain watcher: rollouts by result, skips by reason, and the latency from a
//! node's disruption signal to the rollout patch.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Label of `drain_rollouts_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    /// `rolled_out`, `changed` (the re-check before the patch decided otherwise),
    /// or an error category.
    pub result: &'static str,
}

/// Label of `drain_skips_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    /// A `SkipReason` label value.
    pub reason: &'static str,
}

/// Metric families of the drain watcher.
#[derive(Debug)]
pub struct DrainMetrics {
    /// Rollout attempts by result.
    pub rollouts: Family<ResultLabel, Counter>,
    /// Pods on disrupted nodes a rollout could not save, by reason (counted once per
    /// Deployment, node and reason).
    pub skips: Family<ReasonLabel, Counter>,
    /// Seconds from the disruption signal (taint `timeAdded`, else when the watcher first saw
    /// it) to the rollout patch.
    pub signal_to_rollout: Histogram,
}

impl Default for DrainMetrics {
    fn default() -> Self {
        Self {
            rollouts: Family::default(),
            skips: Family::default(),
            signal_to_rollout: Histogram::new(exponential_buckets(0.005, 2.0, 14)),
        }
    }
}

impl DrainMetrics {
    /// Registers every family with the operator's registry.
    pub fn register(&self, registry: &mut Registry) {
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
