//! How long each reconcile takes and how it ended: the histogram
//! `reconcile_duration_seconds{controller, result}` that every loop of the operator shaped like a
//! reconcile (gather → decide → act for one object) observes, as controller-runtime's
//! `controller_runtime_reconcile_time_seconds` does.
//!
//! One family for every controller: the wiring registers it once and hands each component a
//! [`Reconciles`] handle naming its controller, which creates that controller's `success` and
//! `error` series at 0. The histogram's `_count` is the number of reconciles by controller and
//! result, so there is no separate counter of them.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// The values of `result`.
pub const RESULTS: [&str; 2] = ["success", "error"];

/// Buckets of `reconcile_duration_seconds`: 0.5 ms × 2ⁿ for n = 0…18 (0.5 ms … 131 s), from a
/// reconcile answered from the caches to one that waits on many slow writes.
pub fn buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(0.0005, 2.0, 19)
}

fn histogram() -> Histogram {
    Histogram::new(buckets())
}

/// Labels of `reconcile_duration_seconds`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    /// The loop: `window` or `drain`, as the wiring names them.
    pub controller: &'static str,
    /// One of [`RESULTS`].
    pub result: &'static str,
}

type Durations = Family<ReconcileLabels, Histogram, fn() -> Histogram>;

/// The `reconcile_duration_seconds` family, shared by every controller.
#[derive(Debug, Clone)]
pub struct ReconcileMetrics {
    durations: Durations,
}

impl Default for ReconcileMetrics {
    fn default() -> Self {
        Self {
            durations: Family::new_with_constructor(histogram),
        }
    }
}

impl ReconcileMetrics {
    /// Registers the family with the operator's registry.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "reconcile_duration_seconds",
            "Seconds each reconcile took, by controller and result (success or error)",
            self.durations.clone(),
        );
    }

    /// The handle of one controller; its `success` and `error` series exist from now on.
    pub fn controller(&self, controller: &'static str) -> Reconciles {
        for result in RESULTS {
            drop(
                self.durations
                    .get_or_create(&ReconcileLabels { controller, result }),
            );
        }
        Reconciles {
            controller,
            durations: self.durations.clone(),
        }
    }
}

/// What one controller records of its reconciles.
#[derive(Debug, Clone)]
pub struct Reconciles {
    controller: &'static str,
    durations: Durations,
}

impl Reconciles {
    /// Records one reconcile that took `elapsed` and succeeded or not.
    pub fn observe(&self, success: bool, elapsed: Duration) {
        let result = if success { RESULTS[0] } else { RESULTS[1] };
        self.durations
            .get_or_create(&ReconcileLabels {
                controller: self.controller,
                result,
            })
            .observe(elapsed.as_secs_f64());
    }

    /// A handle over a family of its own, registered nowhere (a component's own tests).
    pub fn unregistered(controller: &'static str) -> Self {
        ReconcileMetrics::default().controller(controller)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(m: &ReconcileMetrics) -> String {
        crate::testing::encode_registered(|r| m.register(r))
    }

    #[test]
    fn each_controller_handed_out_exports_both_results_at_zero() {
        let m = ReconcileMetrics::default();
        drop(m.controller("window"));
        drop(m.controller("drain"));
        let out = encoded(&m);
        for controller in ["window", "drain"] {
            for result in RESULTS {
                let line = format!(
                    "disruption_guard_reconcile_duration_seconds_count{{controller=\"{controller}\",result=\"{result}\"}} 0\n"
                );
                assert!(out.contains(&line), "missing {line} in\n{out}");
            }
        }
        assert_eq!(
            out.matches("disruption_guard_reconcile_duration_seconds_count{")
                .count(),
            4
        );
    }

    #[test]
    fn a_reconcile_lands_in_its_controller_and_result_and_bucket() {
        let m = ReconcileMetrics::default();
        let window = m.controller("window");
        let drain = m.controller("drain");
        window.observe(true, Duration::from_micros(300));
        window.observe(false, Duration::from_millis(3));
        drain.observe(true, Duration::from_secs(90));
        let out = encoded(&m);
        for line in [
            "reconcile_duration_seconds_count{controller=\"window\",result=\"success\"} 1",
            "reconcile_duration_seconds_bucket{le=\"0.0005\",controller=\"window\",result=\"success\"} 1",
            "reconcile_duration_seconds_count{controller=\"window\",result=\"error\"} 1",
            "reconcile_duration_seconds_bucket{le=\"0.002\",controller=\"window\",result=\"error\"} 0",
            "reconcile_duration_seconds_bucket{le=\"0.004\",controller=\"window\",result=\"error\"} 1",
            "reconcile_duration_seconds_count{controller=\"drain\",result=\"success\"} 1",
            "reconcile_duration_seconds_bucket{le=\"65.536\",controller=\"drain\",result=\"success\"} 0",
            "reconcile_duration_seconds_bucket{le=\"131.072\",controller=\"drain\",result=\"success\"} 1",
            "reconcile_duration_seconds_count{controller=\"drain\",result=\"error\"} 0",
        ] {
            let line = format!("disruption_guard_{line}\n");
            assert!(out.contains(&line), "missing {line} in\n{out}");
        }
    }

    #[test]
    fn the_buckets_reach_from_half_a_millisecond_to_minutes() {
        let buckets: Vec<f64> = buckets().collect();
        assert_eq!(buckets.first(), Some(&0.0005));
        assert!(*buckets.last().unwrap() > 120.0, "{buckets:?}");
    }
}
