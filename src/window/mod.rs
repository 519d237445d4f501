//! The window controller: protects the pods an open `TestWindow` selects and releases the
//! protection when the window closes, expires or is deleted.

mod metrics;

pub use metrics::WindowMetrics;

use clap::Args;

use crate::operator::State;

/// Flags of the window controller.
#[derive(Debug, Clone, Args)]
pub struct WindowArgs {}

/// Runs the window controller until shutdown.
pub async fn run(state: State) -> anyhow::Result<()> {
    state.shutdown.cancelled().await;
    Ok(())
}
