//! `disruption_guard_held_node_seconds_total{workload_namespace, reason}`: what protection cost, in
//! node-seconds during which a node Karpenter could disrupt was kept by the guard. Counted by
//! the window controller (`reason` `annotation` or `pdb`, from each window's report, when a hold
//! ends) and by the interception (`eviction`: from the first held eviction of a pod to the pod
//! gone). One family, shared by both; registered by the operator's metrics.
//!
//! `workload_namespace` is a label though it is an object name: a namespace holds many windows and
//! Deployments, the operator serves a bounded set of them (`--namespaces`, or the cluster's),
//! and "which team's tests cost what" is the question the metric answers.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use crate::resources::window_status::HeldBy;

/// Held by the `karpenter.sh/do-not-disrupt` annotation of a window.
pub const ANNOTATION: &str = HeldBy::Annotation.as_str();
/// Held by a window's PodDisruptionBudget.
pub const PDB: &str = HeldBy::Pdb.as_str();
/// Held by the eviction webhook while the Deployment rolled out.
pub const EVICTION: &str = "eviction";
/// Every `reason`.
pub const REASONS: [&str; 3] = [ANNOTATION, PDB, EVICTION];

/// The label set.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HeldLabels {
    /// The namespace of the window, or of the held pod (not `namespace`, which Prometheus
    /// sets to the scraped target's own).
    pub workload_namespace: String,
    /// One of [`REASONS`].
    pub reason: &'static str,
}

/// The shared counter family (cheap to clone: clones count into the same series).
#[derive(Clone, Debug, Default)]
pub struct HeldNodeSeconds(Family<HeldLabels, Counter<f64, std::sync::atomic::AtomicU64>>);

impl HeldNodeSeconds {
    /// Adds `seconds` held in `namespace` by `reason`.
    pub fn add(&self, namespace: &str, reason: &'static str, seconds: f64) {
        if seconds > 0.0 {
            self.0
                .get_or_create(&HeldLabels {
                    workload_namespace: namespace.to_string(),
                    reason,
                })
                .inc_by(seconds);
        }
    }

    /// Registers the family in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "held_node_seconds",
            "Node-seconds a node Karpenter could disrupt was kept by the guard, by namespace and what held it (annotation, pdb, eviction)",
            self.0.clone(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_add_up_by_namespace_and_reason() {
        let held = HeldNodeSeconds::default();
        let shared = held.clone();
        held.add("ci", ANNOTATION, 30.0);
        shared.add("ci", ANNOTATION, 12.5);
        held.add("ci", EVICTION, 4.0);
        held.add("other", PDB, 0.0);
        let out = crate::testing::encode_registered(|r| held.register(r));
        assert!(
            out.contains(
                "held_node_seconds_total{workload_namespace=\"ci\",reason=\"annotation\"} 42.5\n"
            ),
            "{out}"
        );
        assert!(out.contains(
            "held_node_seconds_total{workload_namespace=\"ci\",reason=\"eviction\"} 4.0\n"
        ));
        assert!(!out.contains("other"), "nothing held, no series: {out}");
    }
}
