//! The drain watcher's flags.

use crate::k8s::signals::{self, Signal};
use clap::Args;

/// Flags of the drain watcher.
#[derive(Debug, Clone, Args)]
pub struct DrainArgs {
    /// Node states that mean the node is being drained (comma-separated): karpenter-disrupted,
    /// cluster-autoscaler, unschedulable, deleting, or taint:<key> for any other taint.
    #[arg(
        long = "drain-signals",
        env = "DISRUPTION_GUARD_DRAIN_SIGNALS",
        value_delimiter = ',',
        default_value = signals::DEFAULT_SIGNALS
    )]
    pub signals: Vec<Signal>,

    /// Roll out Deployments running at most this many replicas.
    #[arg(long, env = "DISRUPTION_GUARD_MAX_REPLICAS", default_value_t = 1)]
    pub max_replicas: i32,

    /// Only act on pods in namespaces matching this label selector (all when unset); applies
    /// on top of --namespaces.
    #[arg(long, env = "DISRUPTION_GUARD_DRAIN_NAMESPACE_SELECTOR")]
    pub drain_namespace_selector: Option<String>,

    /// Look at every disrupted node this often, besides reacting to changes.
    #[arg(long, env = "DISRUPTION_GUARD_DRAIN_RESYNC", default_value = "10s", value_parser = crate::resources::duration::parse)]
    pub drain_resync: std::time::Duration,
}
