//! Metrics of the window controller: windows by phase, reconcile errors by category, the
//! open → Ready latency, how long windows stayed open and how they ended, and how many pods and
//! nodes are protected right now; and its handle of the shared reconcile-duration histogram
//! (`reconcile_duration_seconds{controller="window"}`, registered by the wiring).
//!
//! Every labelled series whose label values are known in advance exists from registration on
//! (at 0), so `rate()` and `increase()` see the first event. The gauges (windows by phase,
//! protected pods and nodes) are computed at scrape time by [`WindowGauges`].

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::gauges::WindowGauges;
use crate::resources::{Phase, TestWindowStatus};
use crate::runtime::Reconciles;
use crate::runtime::controller_runtime::{ControllerSeries, WorkQueue};
use crate::runtime::held::HeldNodeSeconds;

/// Label set with an error category.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CategoryLabel {
    pub category: &'static str,
}

/// Label set with how a window ended: `closed` or `expired`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndLabel {
    pub end: &'static str,
}

/// The values of `end` in `window_duration_seconds` and `windows_ended_total`.
pub const ENDS: [&str; 2] = ["closed", "expired"];

/// Buckets of `window_duration_seconds`: 10 s … 24 h (the longest `--max-ttl` default).
pub const DURATION_BUCKETS: [f64; 14] = [
    10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0, 10800.0, 21600.0,
    43200.0, 86400.0,
];

/// Metric families of the window controller.
#[derive(Debug)]
pub struct WindowMetrics {
    /// Windows by phase, protected pods and nodes: computed when scraped.
    pub gauges: Arc<WindowGauges>,
    errors: Family<CategoryLabel, Counter>,
    ready_latency: Histogram,
    durations: Family<EndLabel, Histogram, fn() -> Histogram>,
    ended: Family<EndLabel, Counter>,
    reconciles: Counter,
    writes: Counter,
    /// How long each reconcile took and whether it failed.
    pub reconcile_durations: Reconciles,
    /// Node-seconds held by windows (the family shared with the interception).
    pub held: HeldNodeSeconds,
    /// controller-runtime's reconcile series for this controller (set by the wiring).
    pub controller: ControllerSeries,
    /// controller-runtime's series of its queue of namespaces (set by the wiring).
    pub queue: WorkQueue,
}

impl Default for WindowMetrics {
    /// With a reconcile-duration handle of its own, registered nowhere.
    fn default() -> Self {
        Self::new(Reconciles::unregistered("window"))
    }
}

impl WindowMetrics {
    /// The window controller's families, recording reconcile durations in `reconcile_durations`.
    pub fn new(reconcile_durations: Reconciles) -> Self {
        let buckets = [0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0];
        let metrics = Self {
            gauges: Arc::default(),
            errors: Family::default(),
            ready_latency: Histogram::new(buckets),
            durations: Family::new_with_constructor(|| Histogram::new(DURATION_BUCKETS)),
            ended: Family::default(),
            reconciles: Counter::default(),
            writes: Counter::default(),
            reconcile_durations,
            held: HeldNodeSeconds::default(),
            controller: ControllerSeries::default(),
            queue: WorkQueue::default(),
        };
        // Every series with a known label value exists from the start, at 0.
        for category in super::error::CATEGORIES {
            drop(metrics.errors.get_or_create(&CategoryLabel { category }));
        }
        for end in ENDS {
            drop(metrics.durations.get_or_create(&EndLabel { end }));
            drop(metrics.ended.get_or_create(&EndLabel { end }));
        }
        metrics
    }

    /// Registers every family with the operator's registry.
    pub fn register(&self, registry: &mut Registry) {
        registry.register_collector(Box::new(self.gauges.clone()));
        registry.register(
            "window_reconcile_errors",
            "Failed window reconciles by error category",
            self.errors.clone(),
        );
        registry.register(
            "window_ready_seconds",
            "Time from a window opening to every piece of its protection being in place",
            self.ready_latency.clone(),
        );
        registry.register(
            "window_duration_seconds",
            "Seconds from a window opening to its end (openedAt to endedAt), by how it ended",
            self.durations.clone(),
        );
        registry.register(
            "windows_ended",
            "Windows that reached their final phase, by how they ended (closed or expired)",
            self.ended.clone(),
        );
        registry.register(
            "window_reconciles",
            "Window reconciles run",
            self.reconciles.clone(),
        );
        registry.register(
            "window_writes",
            "API writes made for windows (annotations, PDBs)",
            self.writes.clone(),
        );
    }

    /// Counts one failed reconcile.
    pub fn error(&self, category: &'static str) {
        self.errors.get_or_create(&CategoryLabel { category }).inc();
    }

    /// Records how long a window took from opening to Ready.
    pub fn ready_after(&self, seconds: f64) {
        self.ready_latency.observe(seconds.max(0.0));
    }

    /// Records one window's end, as [`ended_window`] tells it (never negative): counted once per
    /// window, at the transition to its final phase.
    pub fn window_ended(&self, end: &'static str, seconds: f64) {
        let label = EndLabel { end };
        self.ended.get_or_create(&label).inc();
        self.durations.get_or_create(&label).observe(seconds);
    }

    /// Counts a reconcile and the writes it made.
    pub fn reconciled(&self, writes: usize) {
        self.reconciles.inc();
        self.writes.inc_by(writes as u64);
    }
}

/// What one window's end records: `end` (`closed` or `expired`) and the seconds from its
/// `openedAt` to its `endedAt`. None unless the status is in a final phase with both times.
pub fn ended_window(status: &TestWindowStatus) -> Option<(&'static str, f64)> {
    let end = match status.phase {
        Phase::Closed => "closed",
        Phase::Expired => "expired",
        Phase::Pending | Phase::Active => return None,
    };
    let opened = status.opened_at.as_ref()?.0;
    let ended = status.ended_at.as_ref()?.0;
    Some((end, ended.duration_since(opened).as_secs_f64().max(0.0)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::Timestamp;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn encoded(m: &WindowMetrics) -> String {
        crate::testing::encode_registered(|r| m.register(r))
    }

    fn at(s: i64) -> Option<Time> {
        Some(Time(Timestamp::from_second(1_800_000_000 + s).unwrap()))
    }

    fn status(phase: Phase, opened: i64, ended: Option<i64>) -> TestWindowStatus {
        TestWindowStatus {
            phase,
            opened_at: at(opened),
            ended_at: ended.and_then(at),
            ..Default::default()
        }
    }

    #[test]
    fn families_are_exported_under_the_documented_names() {
        let m = WindowMetrics::default();
        m.error("write_conflict");
        m.ready_after(0.3);
        m.reconciled(3);
        m.window_ended("closed", 75.0);
        let out = encoded(&m);
        for line in [
            "disruption_guard_windows{phase=\"Active\"} 0",
            "disruption_guard_window_reconcile_errors_total{category=\"write_conflict\"} 1",
            "disruption_guard_window_ready_seconds_count 1",
            "disruption_guard_window_writes_total 3",
            "disruption_guard_windows_ended_total{end=\"closed\"} 1",
            "disruption_guard_windows_ended_total{end=\"expired\"} 0",
            "disruption_guard_window_duration_seconds_count{end=\"closed\"} 1",
            "disruption_guard_window_duration_seconds_sum{end=\"closed\"} 75.0",
            "disruption_guard_window_duration_seconds_bucket{le=\"60.0\",end=\"closed\"} 0",
            "disruption_guard_window_duration_seconds_bucket{le=\"120.0\",end=\"closed\"} 1",
            "disruption_guard_window_duration_seconds_count{end=\"expired\"} 0",
            "disruption_guard_protected_pods 0",
            "disruption_guard_protected_nodes 0",
        ] {
            assert!(
                out.contains(&format!("{line}\n")),
                "missing {line} in\n{out}"
            );
        }
    }

    #[test]
    fn a_fresh_registry_exports_every_known_series_at_zero() {
        let out = encoded(&WindowMetrics::default());
        let mut expected = Vec::new();
        for phase in super::super::gauges::PHASES {
            expected.push(format!("disruption_guard_windows{{phase=\"{phase}\"}} 0"));
        }
        for category in super::super::error::CATEGORIES {
            expected.push(format!(
                "disruption_guard_window_reconcile_errors_total{{category=\"{category}\"}} 0"
            ));
        }
        for end in ENDS {
            expected.push(format!(
                "disruption_guard_windows_ended_total{{end=\"{end}\"}} 0"
            ));
            expected.push(format!(
                "disruption_guard_window_duration_seconds_count{{end=\"{end}\"}} 0"
            ));
            expected.push(format!(
                "disruption_guard_window_duration_seconds_bucket{{le=\"+Inf\",end=\"{end}\"}} 0"
            ));
        }
        for line in expected {
            assert!(
                out.contains(&format!("{line}\n")),
                "missing {line} in\n{out}"
            );
        }
        assert_eq!(
            out.matches("disruption_guard_window_reconcile_errors_total{")
                .count(),
            11
        );
    }

    #[test]
    fn the_end_of_a_window_is_its_phase_and_the_time_from_opened_at_to_ended_at() {
        assert_eq!(
            ended_window(&status(Phase::Closed, 0, Some(125))),
            Some(("closed", 125.0))
        );
        assert_eq!(
            ended_window(&status(Phase::Expired, 10, Some(100))),
            Some(("expired", 90.0))
        );
        // A clock step backwards never gives a negative duration.
        assert_eq!(
            ended_window(&status(Phase::Closed, 100, Some(90))),
            Some(("closed", 0.0))
        );
    }

    #[test]
    fn a_window_that_has_not_ended_records_nothing() {
        assert_eq!(ended_window(&status(Phase::Active, 0, None)), None);
        assert_eq!(ended_window(&status(Phase::Pending, 0, None)), None);
        assert_eq!(ended_window(&status(Phase::Active, 0, Some(5))), None);
        assert_eq!(ended_window(&status(Phase::Closed, 0, None)), None);
    }
}
