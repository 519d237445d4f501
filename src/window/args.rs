//! The window controller's flags.

use std::time::Duration;

use clap::Args;
use jiff::SignedDuration;

use crate::operations::daemon_sets::DaemonSetPolicy;

/// Flags of the window controller.
#[derive(Debug, Clone, Args)]
pub struct WindowArgs {
    /// Longest a window may stay open from when it opened, whatever its ttl or renewals ask;
    /// the API also refuses a longer ttl.
    #[arg(long, env = "DISRUPTION_GUARD_MAX_TTL", default_value = "24h", value_parser = crate::resources::duration::parse)]
    pub max_ttl: Duration,

    /// Who may open windows with `protect.daemonSets`, which hold every node a DaemonSet runs
    /// on: identity names as `spec.openedBy.name` records them (`system:serviceaccount:ns:sa`,
    /// `static:<name>`), comma-separated, or `*` for everyone. Windows opened under a CITrust
    /// follow its `bounds.daemonSets`. Empty: nobody else; the API refuses such an open (403)
    /// and the controller protects nothing of such a window.
    #[arg(long, env = "DISRUPTION_GUARD_ALLOW_DAEMON_SETS_FOR", value_delimiter = ',')]
    pub allow_daemon_sets_for: Vec<String>,

    /// Nodes the windows of one namespace may hold at once (0: no cap). A window that would
    /// hold more protects nothing more and is `Ready=False` (reason `NodeLimit`); what the
    /// namespace's windows hold stays held.
    #[arg(long, env = "DISRUPTION_GUARD_MAX_NODES_PER_NAMESPACE", default_value_t = 20)]
    pub max_nodes_per_namespace: u32,

    /// How long a Closed or Expired window is kept, with its report, before it is deleted.
    #[arg(long, env = "DISRUPTION_GUARD_RETENTION", default_value = "1h", value_parser = crate::resources::duration::parse)]
    pub retention: Duration,
}

fn signed(d: Duration) -> SignedDuration {
    SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX)
}

impl WindowArgs {
    /// `--max-ttl` as a signed duration.
    pub fn max_ttl_signed(&self) -> SignedDuration {
        signed(self.max_ttl)
    }

    /// `--allow-daemon-sets-for` as the policy the API and the controller apply.
    pub fn daemon_set_policy(&self) -> DaemonSetPolicy {
        DaemonSetPolicy::new(&self.allow_daemon_sets_for)
    }

    /// `--retention` as a signed duration.
    pub fn retention_signed(&self) -> SignedDuration {
        signed(self.retention)
    }
}
