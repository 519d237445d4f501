//! The window gauges — windows by phase, pods and nodes protected right now — computed when
//! Prometheus scrapes, from the window cache and the leader status (a prometheus-client
//! [`Collector`]), rather than pushed by every reconcile and zeroed by hand.
//!
//! Only the Lease holder's view counts: a replica that does not hold the Lease exports zeros,
//! as does one whose controller has not started yet.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use kube::ResourceExt;
use kube::runtime::reflector::Store;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};

use crate::resources::{Phase, TestWindow};
use crate::runtime::Runtime;

/// The phases `windows{phase}` is exported for.
pub const PHASES: [&str; 4] = ["Pending", "Active", "Expired", "Closed"];

/// Label set with a phase.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabel {
    pub phase: &'static str,
}

/// The gauges' values at one moment.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct GaugeValues {
    /// Windows per phase; every phase is present.
    pub phases: BTreeMap<&'static str, i64>,
    /// Pods the Active windows report protected.
    pub pods: i64,
    /// Nodes the Active windows report protected.
    pub nodes: i64,
}

/// The gauges' values over `windows`, from what their statuses say.
pub fn values<'a>(windows: impl Iterator<Item = &'a TestWindow>) -> GaugeValues {
    let mut v = GaugeValues {
        phases: PHASES.iter().map(|p| (*p, 0)).collect(),
        ..Default::default()
    };
    for w in windows {
        let phase = w.status.as_ref().map(|s| s.phase).unwrap_or_default();
        *v.phases.entry(phase.as_str()).or_insert(0) += 1;
        if let Some(status) = w.status.as_ref().filter(|s| s.phase == Phase::Active) {
            v.pods += i64::from(status.protected.pods);
            v.nodes += i64::from(status.protected.nodes);
        }
    }
    v
}

/// What the gauges are read from once the window controller runs.
struct Source {
    windows: Store<TestWindow>,
    runtime: Runtime,
}

/// The collector; registered with the operator's registry before the controller starts, fed
/// its cache by [`WindowGauges::attach`].
#[derive(Default)]
pub struct WindowGauges {
    source: OnceLock<Source>,
}

impl std::fmt::Debug for WindowGauges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WindowGauges")
            .field("attached", &self.source.get().is_some())
            .finish()
    }
}

impl WindowGauges {
    /// Reads the gauges from `windows` (the controller's cache) from now on.
    pub fn attach(&self, windows: Store<TestWindow>, runtime: Runtime) {
        let _ = self.source.set(Source { windows, runtime });
    }

    fn current(&self) -> GaugeValues {
        match self.source.get() {
            Some(s) if s.runtime.leader.is_leader() => {
                let all = s.windows.state();
                let in_scope = all
                    .iter()
                    .filter(|w| s.runtime.in_scope(&w.namespace().unwrap_or_default()));
                values(in_scope.map(|w| w.as_ref()))
            }
            _ => values(std::iter::empty()),
        }
    }
}

impl Collector for WindowGauges {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let v = self.current();
        let windows = Family::<PhaseLabel, Gauge>::default();
        for (&phase, count) in &v.phases {
            windows.get_or_create(&PhaseLabel { phase }).set(*count);
        }
        windows.encode(encoder.encode_descriptor(
            "windows",
            "Test windows by phase",
            None,
            windows.metric_type(),
        )?)?;
        let protected = [
            ("protected_pods", "Pods", v.pods),
            ("protected_nodes", "Nodes", v.nodes),
        ];
        for (name, what, value) in protected {
            let help = format!("{what} carrying do-not-disrupt annotations of an open window");
            let gauge = ConstGauge::new(value);
            gauge.encode(encoder.encode_descriptor(name, &help, None, gauge.metric_type())?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{ProtectedSummary, TestWindowStatus};

    fn window(phase: Phase, pods: u32, nodes: u32) -> TestWindow {
        let mut w: TestWindow = serde_json::from_value(serde_json::json!({
            "apiVersion": "disruption-guard.io/v1alpha1", "kind": "TestWindow",
            "metadata": {"name": "w", "namespace": "shop"}, "spec": {"ttl": "10m"}
        }))
        .unwrap();
        w.status = Some(TestWindowStatus {
            phase,
            protected: ProtectedSummary {
                pods,
                nodes,
                ..Default::default()
            },
            ..Default::default()
        });
        w
    }

    #[test]
    fn the_gauges_count_windows_by_phase_and_sum_what_active_windows_protect() {
        let windows = [
            window(Phase::Active, 2, 1),
            window(Phase::Active, 1, 1),
            window(Phase::Closed, 0, 0),
        ];
        let v = values(windows.iter());
        assert_eq!(v.phases["Active"], 2);
        assert_eq!(v.phases["Closed"], 1);
        assert_eq!(v.phases["Pending"], 0);
        assert_eq!((v.pods, v.nodes), (3, 2));
    }

    #[test]
    fn without_windows_every_phase_is_zero() {
        let v = values(std::iter::empty());
        assert_eq!(v.phases.len(), PHASES.len());
        assert!(v.phases.values().all(|n| *n == 0));
        assert_eq!((v.pods, v.nodes), (0, 0));
    }

    #[test]
    fn an_unattached_collector_exports_zeros_under_the_documented_names() {
        let out = crate::testing::encode_registered(|r| {
            r.register_collector(Box::new(WindowGauges::default()))
        });
        for line in [
            "disruption_guard_windows{phase=\"Active\"} 0",
            "disruption_guard_protected_pods 0",
            "disruption_guard_protected_nodes 0",
        ] {
            assert!(
                out.contains(&format!("{line}\n")),
                "missing {line} in\n{out}"
            );
        }
    }
}
