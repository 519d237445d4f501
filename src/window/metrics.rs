//! Metrics of the window controller: windows by phase, reconcile errors by category, the
//! open → Ready latency, and how many pods and nodes are protected right now.

use std::collections::BTreeMap;
use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Label set with a phase.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabel {
    pub phase: String,
}

/// Label set with an error category.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CategoryLabel {
    pub category: String,
}

/// Metric families of the window controller.
#[derive(Debug)]
pub struct WindowMetrics {
    windows: Family<PhaseLabel, Gauge>,
    errors: Family<CategoryLabel, Counter>,
    ready_latency: Histogram,
    protected_pods: Gauge,
    protected_nodes: Gauge,
    reconciles: Counter,
    writes: Counter,
    per_window: Mutex<BTreeMap<String, (i64, i64)>>,
}

impl Default for WindowMetrics {
    fn default() -> Self {
        let buckets = [0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0];
        Self {
            windows: Family::default(),
            errors: Family::default(),
            ready_latency: Histogram::new(buckets),
            protected_pods: Gauge::default(),
            protected_nodes: Gauge::default(),
            reconciles: Counter::default(),
            writes: Counter::default(),
            per_window: Mutex::default(),
        }
    }
}

impl WindowMetrics {
    /// Registers every family with the operator's registry.
    pub fn register(&self, registry: &mut Registry) {
        registry.register("windows", "Test windows by phase", self.windows.clone());
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
            "protected_pods",
            "Pods carrying do-not-disrupt annotations of an open window",
            self.protected_pods.clone(),
        );
        registry.register(
            "protected_nodes",
            "Nodes carrying do-not-disrupt annotations of an open window",
            self.protected_nodes.clone(),
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

    /// Sets the number of windows in each phase.
    pub fn set_phases(&self, counts: &BTreeMap<&'static str, i64>) {
        for phase in ["Pending", "Active", "Expired", "Closed"] {
            let label = PhaseLabel {
                phase: phase.to_string(),
            };
            self.windows
                .get_or_create(&label)
                .set(counts.get(phase).copied().unwrap_or(0));
        }
    }

    /// Counts one failed reconcile.
    pub fn error(&self, category: &'static str) {
        let label = CategoryLabel {
            category: category.to_string(),
        };
        self.errors.get_or_create(&label).inc();
    }

    /// Records how long a window took from opening to Ready.
    pub fn ready_after(&self, seconds: f64) {
        self.ready_latency.observe(seconds.max(0.0));
    }

    /// Counts a reconcile and the writes it made.
    pub fn reconciled(&self, writes: usize) {
        self.reconciles.inc();
        self.writes.inc_by(writes as u64);
    }

    /// Records what one window protects now (zero when it ended or went away).
    pub fn set_protected(&self, window_uid: &str, pods: u32, nodes: u32) {
        let mut map = self.per_window.lock().expect("metrics lock");
        if pods == 0 && nodes == 0 {
            map.remove(window_uid);
        } else {
            map.insert(window_uid.to_string(), (i64::from(pods), i64::from(nodes)));
        }
        self.protected_pods.set(map.values().map(|v| v.0).sum());
        self.protected_nodes.set(map.values().map(|v| v.1).sum());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_exported_under_the_documented_names() {
        let mut registry = Registry::with_prefix("disruption_guard");
        let m = WindowMetrics::default();
        m.register(&mut registry);
        m.set_phases(&BTreeMap::from([("Active", 2)]));
        m.error("write_conflict");
        m.ready_after(0.3);
        m.reconciled(3);
        m.set_protected("a", 2, 1);
        m.set_protected("b", 1, 1);
        m.set_protected("a", 0, 0);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
        for line in [
            "disruption_guard_windows{phase=\"Active\"} 2",
            "disruption_guard_window_reconcile_errors_total{category=\"write_conflict\"} 1",
            "disruption_guard_window_ready_seconds_count 1",
            "disruption_guard_window_writes_total 3",
            "disruption_guard_protected_pods 1",
            "disruption_guard_protected_nodes 1",
        ] {
            assert!(out.contains(line), "missing {line} in\n{out}");
        }
    }
}
