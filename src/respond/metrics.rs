//! Metrics of the EvictionRequest responder: responses by outcome, and the seconds from the
//! controller's activation of the guard to its completion. Every `outcome` series exists from
//! registration on (at 0).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Every `outcome` of `respond_responses_total`: completed after a rollout (or the pod left),
/// handed over at once (a rollout cannot save the pod), handed over after the hold timeout,
/// withdrawn by every requester, and a status write that failed.
pub const OUTCOMES: [&str; 5] = [
    "completed",
    "stepped_aside",
    "timed_out",
    "withdrawn",
    "write_failed",
];

/// An `outcome` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    /// One of [`OUTCOMES`].
    pub outcome: &'static str,
}

/// Metric families of the responder.
#[derive(Debug)]
pub struct RespondMetrics {
    /// Responses, by how they ended.
    pub responses: Family<OutcomeLabel, Counter>,
    /// Seconds from the guard's activation (`startTime`) to its `completionTime`.
    pub time_to_completion: Histogram,
}

impl Default for RespondMetrics {
    fn default() -> Self {
        let metrics = Self {
            responses: Family::default(),
            time_to_completion: Histogram::new(exponential_buckets(1.0, 2.0, 12)),
        };
        for outcome in OUTCOMES {
            drop(metrics.responses.get_or_create(&OutcomeLabel { outcome }));
        }
        metrics
    }
}

impl RespondMetrics {
    /// Counts one response that ended with `outcome` (one of [`OUTCOMES`]).
    pub fn response(&self, outcome: &'static str) {
        self.responses
            .get_or_create(&OutcomeLabel { outcome })
            .inc();
    }

    /// Registers every family with the operator's registry.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "respond_responses",
            "EvictionRequest responses of disruption-guard.io/rollout, by outcome",
            self.responses.clone(),
        );
        registry.register(
            "respond_time_to_completion_seconds",
            "Seconds from the guard's activation as an Eviction's responder to its completion",
            self.time_to_completion.clone(),
        );
    }
}
