//! The HTTP API that CI calls to open, renew, read and close test windows.

mod metrics;

pub use metrics::ApiMetrics;

use clap::Args;

use crate::operator::State;

/// Flags of the HTTP API.
#[derive(Debug, Clone, Args)]
pub struct ApiArgs {
    /// Address of the HTTP API for CI.
    #[arg(
        long,
        env = "DISRUPTION_GUARD_API_ADDR",
        default_value = "0.0.0.0:8080"
    )]
    pub api_addr: std::net::SocketAddr,

    /// Audience ServiceAccount tokens must carry to be accepted by the API.
    #[arg(
        long,
        env = "DISRUPTION_GUARD_TOKEN_AUDIENCE",
        default_value = "disruption-guard"
    )]
    pub token_audience: String,

    /// Serve the API without authentication. For local runs only.
    #[arg(long, env = "DISRUPTION_GUARD_INSECURE_NO_AUTH")]
    pub insecure_no_auth: bool,
}

/// Serves the HTTP API until shutdown.
pub async fn serve(state: State) -> anyhow::Result<()> {
    state.shutdown.cancelled().await;
    Ok(())
}
