//! The window controller's flags.

use std::time::Duration;

use clap::Args;
use jiff::SignedDuration;

/// Flags of the window controller.
#[derive(Debug, Clone, Args)]
pub struct WindowArgs {
    /// Longest a window may stay open from when it opened, whatever its ttl or renewals ask;
    /// the API also refuses a longer ttl.
    #[arg(long, env = "DISRUPTION_GUARD_MAX_TTL", default_value = "24h", value_parser = crate::resources::duration::parse)]
    pub max_ttl: Duration,

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

    /// `--retention` as a signed duration.
    pub fn retention_signed(&self) -> SignedDuration {
        signed(self.retention)
    }
}
