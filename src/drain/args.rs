//! The drain watcher's flags.

use crate::k8s::signals::{self, Signal};
use crate::operations::types::SelectorInput;
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

    /// Only act on pods in namespaces matching this label selector (kubectl's `-l` syntax, e.g.
    /// `kubernetes.io/metadata.name=shop`; all when unset); applies on top of --namespaces.
    #[arg(long, env = "DISRUPTION_GUARD_DRAIN_NAMESPACE_SELECTOR", value_parser = namespace_selector)]
    pub drain_namespace_selector: Option<String>,

    /// Look at every disrupted node this often, besides reacting to changes.
    #[arg(long, env = "DISRUPTION_GUARD_DRAIN_RESYNC", default_value = "10s", value_parser = crate::resources::duration::parse)]
    pub drain_resync: std::time::Duration,
}

/// Checks `--drain-namespace-selector` at start-up (the watch would otherwise fail on it
/// later); the error names the rule the text breaks.
fn namespace_selector(text: &str) -> Result<String, String> {
    crate::operations::selector::parse(&SelectorInput::Text(text.to_string()))?;
    Ok(text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_selector_is_checked_and_kept_as_written() {
        let text = "kubernetes.io/metadata.name=shop";
        assert_eq!(namespace_selector(text).unwrap(), text);
        let err = namespace_selector("tier in ci").unwrap_err();
        assert!(err.contains("tier in ci"), "{err}");
    }
}
