//! The EvictionRequest responder's flags, and what it shares with the other components'.

use std::time::Duration;

use clap::Args;

/// Flags of the EvictionRequest responder.
#[derive(Debug, Clone, Args)]
pub struct RespondArgs {
    /// Answer EvictionRequests (Kubernetes 1.38+, lifecycle.k8s.io/v1alpha1, alpha) as the
    /// responder disruption-guard.io/rollout: roll a lone replica's Deployment out, then hand
    /// over. Idle when the cluster does not serve the API.
    #[arg(long, env = "DISRUPTION_GUARD_RESPOND_EVICTIONS")]
    pub respond_evictions: bool,

    /// How often an Active response is looked at again (fresh reads of the pod and its
    /// Deployment); progress is reported at most every 20s whatever this is.
    #[arg(long, env = "DISRUPTION_GUARD_RESPOND_INTERVAL", default_value = "1s", value_parser = crate::resources::duration::parse)]
    pub respond_interval: Duration,
}

/// What the responder shares with the other components' flags: which Deployments count as
/// lone replicas (`--max-replicas`) and how long a rollout may take (`--intercept-timeout`).
#[derive(Debug, Clone, Copy)]
pub struct Shared {
    pub max_replicas: i32,
    pub timeout: Option<Duration>,
}
