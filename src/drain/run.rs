//! Starting the drain watcher: its watches, then its loop, until shutdown.

use std::sync::Arc;

use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tracing::info;

use super::{DrainArgs, DrainMetrics, stores, watcher};
use crate::runtime::{Caches, NodeTrigger, Runtime};

/// Readiness gate of the drain watcher's watches.
const READY_GATE: &str = "drain";

/// Runs the drain watcher until shutdown.
pub async fn run(
    runtime: Runtime,
    args: DrainArgs,
    metrics: Arc<DrainMetrics>,
    caches: Caches,
    tx: UnboundedSender<NodeTrigger>,
    rx: UnboundedReceiver<NodeTrigger>,
) -> anyhow::Result<()> {
    runtime.ready.register(READY_GATE);
    let (stores, task) = stores::DrainStores::start(
        &runtime.client,
        &runtime.ready,
        &caches,
        args.drain_namespace_selector.as_deref(),
        &tx,
    );
    let result = async {
        tokio::select! {
            _ = runtime.shutdown.cancelled() => return Ok(()),
            ready = stores.wait_until_ready(&caches) => ready?,
        }
        runtime.ready.mark_synced(READY_GATE);
        info!(
            signals = ?args.signals,
            max_replicas = args.max_replicas,
            namespace_selector = ?args.drain_namespace_selector,
            "drain watcher started"
        );
        let resync = args.drain_resync;
        watcher::Watcher::new(runtime.clone(), args.clone(), metrics, stores)
            .run(rx, resync)
            .await;
        anyhow::Ok(())
    }
    .await;
    if let Some(task) = task {
        task.abort();
    }
    result
}
