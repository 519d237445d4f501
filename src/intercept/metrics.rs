//! Metrics of the eviction interception: evictions reviewed, denied, allowed by reason,
//! intercepts that hit the timeout, rollouts by result, the seconds from the first deny to the
//! old pod gone, and how long an answer takes; the webhook port's connections (open, refused
//! per address, closed by a timeout: [`ConnectionEvents`]); and the webhook's health
//! (registered, and its certificate's expiry), computed at scrape time by [`WebhookHealth`].
//!
//! Every `reason` and `result` series exists from registration on (at 0), so `rate()` and
//! `increase()` see the first one.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::decide::AllowReason;
use super::health::WebhookHealth;
use crate::runtime::held::HeldNodeSeconds;
use crate::runtime::labels::{ReasonLabel, ResultLabel};
use crate::runtime::limited_server::{ConnectionCounts, ConnectionEvents, Timeout};

/// Allowed after the timeout.
pub const TIMEOUT: &str = "timeout";
/// Allowed because the body is no AdmissionReview of an Eviction (fail open).
pub const MALFORMED: &str = "malformed";
/// Allowed because the caches have not synced yet (fail open).
pub const NOT_SYNCED: &str = "not_synced";
/// Allowed because the namespace is outside `--namespaces`.
pub const OUT_OF_SCOPE: &str = "out_of_scope";
/// Allowed untouched because its client address is over `--intercept-rate-limit` (fail open).
pub const RATE_LIMITED: &str = "rate_limited";

/// Every `reason` of `intercept_allowed_total`: each [`AllowReason`] label, then the five above.
pub fn reasons() -> impl Iterator<Item = &'static str> {
    AllowReason::all().map(AllowReason::as_str).chain([
        TIMEOUT,
        MALFORMED,
        NOT_SYNCED,
        OUT_OF_SCOPE,
        RATE_LIMITED,
    ])
}

/// Every `result` of `intercept_rollouts_total`: made, already made (by this or another
/// writer), declined by the fresh re-check or moved on, and each rollout error category.
pub const RESULTS: [&str; 6] = [
    "rolled_out",
    "already_rolled_out",
    "changed",
    "recheck_failed",
    "conflict",
    "patch_failed",
];

/// Every `reason` of `intercept_connections_timed_out_total`.
const TIMED_OUT: [&str; 2] = ["header_read", "idle"];

/// Metric families of the eviction interception.
#[derive(Debug)]
pub struct InterceptMetrics {
    /// Eviction reviews received.
    pub reviews: Counter,
    /// Evictions answered 429.
    pub denied: Counter,
    /// Evictions let through, by reason.
    pub allowed: Family<ReasonLabel, Counter>,
    /// (Deployment, node) pairs whose eviction was let through after the timeout.
    pub timeouts: Counter,
    /// Rollouts started by a deny, by result.
    pub rollouts: Family<ResultLabel, Counter>,
    /// Seconds from the first deny to the held pod gone.
    pub deny_to_gone: Histogram,
    /// Seconds to answer one review.
    pub answer: Histogram,
    /// `intercept_registered` and the certificate's expiry, computed at scrape time.
    pub health: std::sync::Arc<WebhookHealth>,
    /// Node-seconds held by held evictions (the family shared with the window controller).
    pub held: HeldNodeSeconds,
    /// Webhook connections open now, and those refused: their address held
    /// `--intercept-max-connections-per-address`.
    pub connections: ConnectionCounts,
    /// Webhook connections closed by a timeout, by which (`header_read`, `idle`).
    pub connections_timed_out: Family<ReasonLabel, Counter>,
}

impl Default for InterceptMetrics {
    fn default() -> Self {
        let metrics = Self {
            reviews: Counter::default(),
            denied: Counter::default(),
            allowed: Family::default(),
            timeouts: Counter::default(),
            rollouts: Family::default(),
            deny_to_gone: Histogram::new(exponential_buckets(1.0, 2.0, 12)),
            answer: Histogram::new(exponential_buckets(0.0001, 2.0, 14)),
            health: std::sync::Arc::default(),
            held: HeldNodeSeconds::default(),
            connections: ConnectionCounts::default(),
            connections_timed_out: Family::default(),
        };
        for reason in TIMED_OUT {
            drop(
                metrics
                    .connections_timed_out
                    .get_or_create(&ReasonLabel { reason }),
            );
        }
        for reason in reasons() {
            drop(metrics.allowed.get_or_create(&ReasonLabel { reason }));
        }
        for result in RESULTS {
            drop(metrics.rollouts.get_or_create(&ResultLabel { result }));
        }
        metrics
    }
}

impl InterceptMetrics {
    /// Registers every family with the operator's registry.
    pub fn register(&self, registry: &mut Registry) {
        registry.register_collector(Box::new(self.health.clone()));
        registry.register(
            "intercept_reviews",
            "Eviction reviews the interception webhook received",
            self.reviews.clone(),
        );
        registry.register(
            "intercept_denied",
            "Evictions answered 429 while the pod's Deployment rolls out",
            self.denied.clone(),
        );
        registry.register(
            "intercept_allowed",
            "Evictions let through, by reason",
            self.allowed.clone(),
        );
        registry.register(
            "intercept_timeouts",
            "Held evictions let through because the rollout did not move the pod in time",
            self.timeouts.clone(),
        );
        registry.register(
            "intercept_rollouts",
            "Rollouts started by an intercepted eviction, by result",
            self.rollouts.clone(),
        );
        registry.register(
            "intercept_deny_to_gone_seconds",
            "Seconds from the first deny of an eviction to its pod gone",
            self.deny_to_gone.clone(),
        );
        registry.register(
            "intercept_answer_seconds",
            "Seconds the webhook took to answer an eviction review",
            self.answer.clone(),
        );
        registry.register(
            "intercept_connections",
            "Webhook connections open now",
            self.connections.open.clone(),
        );
        registry.register(
            "intercept_connections_refused_per_address",
            "Webhook connections closed at once because their client address held --intercept-max-connections-per-address",
            self.connections.refused_per_address.clone(),
        );
        registry.register(
            "intercept_connections_timed_out",
            "Webhook connections closed because their HTTP/1 request headers did not arrive within --intercept-header-read-timeout (header_read) or no request was in flight for --intercept-idle-timeout (idle)",
            self.connections_timed_out.clone(),
        );
    }

    /// Counts one eviction let through.
    pub fn allow(&self, reason: &'static str) {
        self.allowed.get_or_create(&ReasonLabel { reason }).inc();
    }

    /// Counts one rollout attempt.
    pub fn rollout(&self, result: &'static str) {
        self.rollouts.get_or_create(&ResultLabel { result }).inc();
    }
}

impl ConnectionEvents for InterceptMetrics {
    fn counts(&self) -> &ConnectionCounts {
        &self.connections
    }
    fn timed_out(&self, ended: Timeout) {
        let reason = match ended {
            Timeout::HeaderRead => TIMED_OUT[0],
            Timeout::Idle => TIMED_OUT[1],
        };
        self.connections_timed_out
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(m: &InterceptMetrics) -> String {
        crate::testing::encode_registered(|r| m.register(r))
    }

    #[test]
    fn every_allow_reason_has_a_series_from_the_start() {
        let out = encoded(&InterceptMetrics::default());
        for reason in AllowReason::all() {
            let line = format!(
                "disruption_guard_intercept_allowed_total{{reason=\"{}\"}} 0\n",
                reason.as_str()
            );
            assert!(out.contains(&line), "missing {line} in\n{out}");
        }
        for result in RESULTS {
            let line =
                format!("disruption_guard_intercept_rollouts_total{{result=\"{result}\"}} 0\n");
            assert!(out.contains(&line), "missing {line} in\n{out}");
        }
        assert!(out.contains("disruption_guard_intercept_timeouts_total 0\n"));
        assert!(out.contains("disruption_guard_intercept_answer_seconds_count 0\n"));
        let unique: std::collections::BTreeSet<_> = reasons().collect();
        assert_eq!(unique.len(), reasons().count(), "two reasons share a label");
    }

    #[test]
    fn counting_moves_only_its_own_series() {
        let m = InterceptMetrics::default();
        m.allow(super::super::decide::AllowReason::PodGone.as_str());
        m.rollout("conflict");
        let out = encoded(&m);
        assert!(out.contains("disruption_guard_intercept_allowed_total{reason=\"pod_gone\"} 1\n"));
        assert!(out.contains("disruption_guard_intercept_allowed_total{reason=\"dry_run\"} 0\n"));
        assert!(out.contains("disruption_guard_intercept_rollouts_total{result=\"conflict\"} 1\n"));
    }
}
