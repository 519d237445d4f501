//! The drain watcher: rolls out lone-replica Deployments whose pod sits on a node that is being
//! drained, so the replacement starts elsewhere before the old pod goes.
//!
//! - [`decide`]: roll out, skip (and why) or ignore, for one pod on one node (pure; what a
//!   rollout can save is [`crate::k8s::workload`], shared with the eviction interception);
//! - [`stores`]: the narrow watches and reflector stores the decisions read;
//! - [`watcher`]: the loop from triggers to decisions;
//! - [`act`]: the only writer — the shared rollout action ([`crate::runtime::rollout`]) with
//!   this watcher's re-check, Events;
//! - [`ledger`]: what was already done, per (Deployment, node).

pub mod act;
pub mod decide;
pub mod ledger;
mod metrics;
pub mod stores;
pub mod watcher;

use crate::k8s::signals;
pub use crate::k8s::signals::Signal;
pub use crate::runtime::rollout::Error;
pub use metrics::DrainMetrics;

use clap::Args;
use tracing::info;

use std::sync::Arc;

use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

use crate::runtime::{Caches, NodeTrigger, Runtime};

pub use crate::resources::names::ROLLED_OUT_FOR_NODE;

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
    #[arg(long, env = "DISRUPTION_GUARD_DRAIN_RESYNC", default_value = "10s", value_parser = crate::k8s::duration::parse)]
    pub drain_resync: std::time::Duration,
}

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
