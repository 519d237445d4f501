//! Prometheus metrics of the operator, all prefixed `disruption_guard_`.
//!
//! Each component owns its metric families (`window::WindowMetrics`, `drain::DrainMetrics`,
//! `api::ApiMetrics`, `intercept::InterceptMetrics`) and registers them here. Label values come
//! from fixed vocabularies
//! (phases, reasons, error categories), never from object names, so cardinality stays bounded.

use std::sync::Arc;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

use crate::api::ApiMetrics;
use crate::drain::DrainMetrics;
use crate::intercept::InterceptMetrics;
use crate::window::WindowMetrics;

/// The operator's metric registry and the handles of every component.
pub struct Metrics {
    registry: Registry,
    /// 1 while this replica holds the leader Lease (or runs without election).
    pub leader: Gauge,
    /// Window controller metrics.
    pub window: Arc<WindowMetrics>,
    /// Drain watcher metrics.
    pub drain: Arc<DrainMetrics>,
    /// HTTP API metrics.
    pub api: Arc<ApiMetrics>,
    /// Eviction interception metrics.
    pub intercept: Arc<InterceptMetrics>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("disruption_guard");
        registry.register(
            "build",
            "Version of the running binary",
            Info::new(vec![("version", env!("CARGO_PKG_VERSION"))]),
        );
        let leader = Gauge::default();
        registry.register(
            "leader",
            "1 while this replica may write (holds the leader Lease)",
            leader.clone(),
        );
        let window = WindowMetrics::default();
        window.register(&mut registry);
        let drain = DrainMetrics::default();
        drain.register(&mut registry);
        let api = ApiMetrics::default();
        api.register(&mut registry);
        let intercept = InterceptMetrics::default();
        intercept.register(&mut registry);
        Self {
            registry,
            leader,
            window: Arc::new(window),
            drain: Arc::new(drain),
            api: Arc::new(api),
            intercept: Arc::new(intercept),
        }
    }
}

impl Metrics {
    /// The registry in OpenMetrics text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_registry_already_exports_the_zero_series_of_every_known_label_value() {
        let out = Metrics::default().encode();
        for line in [
            "disruption_guard_leader 0",
            "disruption_guard_windows{phase=\"Active\"} 0",
            "disruption_guard_windows{phase=\"Closed\"} 0",
            "disruption_guard_window_reconcile_errors_total{category=\"write_forbidden\"} 0",
            "disruption_guard_window_reconcile_errors_total{category=\"status\"} 0",
            "disruption_guard_windows_ended_total{end=\"closed\"} 0",
            "disruption_guard_windows_ended_total{end=\"expired\"} 0",
            "disruption_guard_window_duration_seconds_count{end=\"closed\"} 0",
            "disruption_guard_window_duration_seconds_count{end=\"expired\"} 0",
            "disruption_guard_drain_rollouts_total{result=\"rolled_out\"} 0",
            "disruption_guard_drain_rollouts_total{result=\"patch_failed\"} 0",
            "disruption_guard_drain_skips_total{reason=\"recreate\"} 0",
            "disruption_guard_drain_skips_total{reason=\"too_many_replicas\"} 0",
            "disruption_guard_intercept_allowed_total{reason=\"timeout\"} 0",
            "disruption_guard_intercept_timeouts_total 0",
        ] {
            assert!(
                out.contains(&format!("{line}\n")),
                "missing {line} in\n{out}"
            );
        }
    }
}
