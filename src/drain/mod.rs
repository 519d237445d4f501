//! The drain watcher: rolls out lone-replica Deployments whose pod sits on a node that is being
//! drained, so the replacement starts elsewhere before the old pod goes.

mod metrics;

pub use metrics::DrainMetrics;

use clap::Args;

use crate::operator::State;

/// Flags of the drain watcher.
#[derive(Debug, Clone, Args)]
pub struct DrainArgs {}

/// Runs the drain watcher until shutdown.
pub async fn run(state: State) -> anyhow::Result<()> {
    state.shutdown.cancelled().await;
    Ok(())
}
