//! Prometheus metrics of the operator: its own, prefixed `disruption_guard_`, and, unprefixed as
//! every client library exports them, the standard process metrics (`process_*`,
//! [`super::process`]) and controller-runtime's reconcile and work-queue series for each
//! controller (`controller_runtime_*`, `workqueue_*`: [`crate::runtime::controller_runtime`]).
//!
//! Each component owns its metric families (`window::WindowMetrics`, `drain::DrainMetrics`,
//! `api::ApiMetrics`, `intercept::InterceptMetrics`) and registers them here; the runtime's
//! (`runtime::RequestMetrics` for the API client, `runtime::ReconcileMetrics` shared by the
//! controllers) too, and each controller gets its handle of the latter from here. Label values
//! come from fixed vocabularies (phases, reasons, error categories, verbs), never from object
//! names, so cardinality stays bounded.

use std::sync::Arc;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

use super::process::ProcessCollector;
use crate::api::ApiMetrics;
use crate::drain::DrainMetrics;
use crate::intercept::InterceptMetrics;
use crate::respond::RespondMetrics;
use crate::runtime::controller_runtime::ControllerRuntimeMetrics;
use crate::runtime::held::HeldNodeSeconds;
use crate::runtime::refusals::RefusalMetrics;
use crate::runtime::{ReconcileMetrics, RequestMetrics};
use crate::window::WindowMetrics;

/// The prefix of the operator's own metrics.
pub const PREFIX: &str = "disruption_guard";

/// The `controller` label of the window controller's reconciles.
pub const WINDOW_CONTROLLER: &str = "window";
/// The `controller` label of the drain watcher's passes over a disrupted node.
pub const DRAIN_CONTROLLER: &str = "drain";

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
    /// EvictionRequest responder metrics.
    pub respond: Arc<RespondMetrics>,
    /// Requests of the Kubernetes client (its layer is built from this handle).
    pub kube_requests: RequestMetrics,
    /// Objects the watches could not represent (the runtime's readiness reports them).
    pub objects_refused: RefusalMetrics,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut root = Registry::default();
        root.register_collector(Box::new(ProcessCollector));
        let controller_runtime = ControllerRuntimeMetrics::default();
        controller_runtime.register(&mut root);
        let registry = root.sub_registry_with_prefix(PREFIX);
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
        let reconciles = ReconcileMetrics::default();
        reconciles.register(registry);
        let kube_requests = RequestMetrics::default();
        kube_requests.register(registry);
        let objects_refused = RefusalMetrics::default();
        objects_refused.register(registry);
        let held = HeldNodeSeconds::default();
        held.register(registry);
        let mut window = WindowMetrics::new(reconciles.controller(WINDOW_CONTROLLER));
        window.held = held.clone();
        window.controller = controller_runtime.controller(WINDOW_CONTROLLER);
        window.queue = controller_runtime.work_queue(WINDOW_CONTROLLER);
        window.register(registry);
        let mut drain = DrainMetrics::new(reconciles.controller(DRAIN_CONTROLLER));
        drain.controller = controller_runtime.controller(DRAIN_CONTROLLER);
        drain.register(registry);
        let api = ApiMetrics::default();
        api.register(registry);
        let intercept = InterceptMetrics {
            held,
            ..InterceptMetrics::default()
        };
        intercept.register(registry);
        let respond = RespondMetrics::default();
        respond.register(registry);
        Self {
            registry: root,
            leader,
            window: Arc::new(window),
            drain: Arc::new(drain),
            api: Arc::new(api),
            intercept: Arc::new(intercept),
            respond: Arc::new(respond),
            kube_requests,
            objects_refused,
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
            "disruption_guard_drain_pods_evicted_total 0",
            "disruption_guard_reconcile_duration_seconds_count{controller=\"window\",result=\"success\"} 0",
            "disruption_guard_reconcile_duration_seconds_count{controller=\"window\",result=\"error\"} 0",
            "disruption_guard_reconcile_duration_seconds_count{controller=\"drain\",result=\"success\"} 0",
            "disruption_guard_reconcile_duration_seconds_count{controller=\"drain\",result=\"error\"} 0",
            "disruption_guard_kube_request_duration_seconds_count{verb=\"watch\"} 0",
            "disruption_guard_kube_request_duration_seconds_count{verb=\"patch\"} 0",
            "controller_runtime_reconcile_total{controller=\"window\",result=\"success\"} 0",
            "controller_runtime_reconcile_total{controller=\"drain\",result=\"error\"} 0",
            "controller_runtime_reconcile_errors_total{controller=\"window\"} 0",
            "workqueue_depth{name=\"window\",controller=\"window\"} 0",
            "workqueue_adds_total{name=\"window\",controller=\"window\"} 0",
        ] {
            assert!(
                out.contains(&format!("{line}\n")),
                "missing {line} in\n{out}"
            );
        }
    }

    #[test]
    fn the_process_metrics_are_exported_without_the_prefix() {
        let out = Metrics::default().encode();
        if cfg!(target_os = "linux") {
            for family in [
                "process_cpu_seconds_total ",
                "process_resident_memory_bytes ",
                "process_virtual_memory_bytes ",
                "process_open_fds ",
                "process_max_fds ",
                "process_start_time_seconds ",
            ] {
                assert!(
                    out.lines().any(|l| l.starts_with(family)),
                    "missing {family} in\n{out}"
                );
            }
        }
        assert!(!out.contains("disruption_guard_process_"), "{out}");
        // Everything else keeps its prefix, but controller-runtime's series.
        for line in out.lines().filter(|l| !l.starts_with('#')) {
            assert!(
                [
                    "disruption_guard_",
                    "process_",
                    "controller_runtime_",
                    "workqueue_"
                ]
                .iter()
                .any(|prefix| line.starts_with(prefix)),
                "{line}"
            );
        }
    }

    #[test]
    fn the_kube_requests_counted_by_the_handle_appear_in_the_registry() {
        let metrics = Metrics::default();
        metrics
            .kube_requests
            .observe("list", Some(200), std::time::Duration::from_millis(12));
        let out = metrics.encode();
        assert!(
            out.contains("disruption_guard_kube_requests_total{verb=\"list\",code=\"200\"} 1\n"),
            "{out}"
        );
        assert!(
            out.contains("disruption_guard_kube_request_duration_seconds_count{verb=\"list\"} 1\n"),
            "{out}"
        );
    }
}
