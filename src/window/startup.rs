//! Before the window controller runs: wait for every cache it reads; then, while it runs,
//! sweep for leftovers whenever this replica leads.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::watch;
use tracing::{info, warn};

use super::context::Context;
use super::sweep;
use crate::runtime::caches::Caches;

/// The window controller's readiness gate: registered at its start, open once synced.
pub(super) const GATE: &str = "window-controller";

/// Waits until every cache the controller reads has its first list (`windows_listed`: the
/// windows'), warning every 5 s of those still syncing; false if a watch stopped first.
pub(super) async fn synced(
    ctx: &Context,
    caches: &Caches,
    mut windows_listed: watch::Receiver<bool>,
) -> bool {
    let s = &ctx.stores;
    let listed = windows_listed.clone();
    let waits = async {
        caches.wait_until_ready().await
            && windows_listed.wait_for(|listed| *listed).await.is_ok()
            && s.stateful_sets.wait_until_ready().await.is_ok()
            && match &s.node_claims {
                Some(claims) => claims.wait_until_ready().await.is_ok(),
                None => true,
            }
    };
    tokio::pin!(waits);
    loop {
        tokio::select! {
            synced = &mut waits => return synced,
            () = tokio::time::sleep(Duration::from_secs(5)) => {
                let pending: Vec<&str> = [
                    ("windows", *listed.borrow()),
                    ("pods, nodes, workloads and PDBs", caches.is_ready()),
                    ("statefulsets", s.stateful_sets.wait_until_ready().now_or_never().is_some()),
                ]
                .into_iter()
                .filter(|(_, ready)| !ready)
                .map(|(name, _)| name)
                .collect();
                warn!(?pending, "window controller caches still syncing");
            }
        }
    }
}

/// Runs the sweep while this replica leads until shutdown: once at once (retried briefly if
/// listing windows fails), then every [`sweep::SWEEP_INTERVAL`]. The sweep writes, so only the
/// leader runs it: a follower sweeps as soon as it takes over.
pub(super) async fn sweeps(ctx: Arc<Context>) {
    let mut leader = ctx.runtime.leader.clone();
    let shutdown = ctx.runtime.shutdown.clone();
    let mut runs: u64 = 0;
    loop {
        tokio::select! {
            () = leader.acquired() => {}
            () = shutdown.cancelled() => return,
        }
        let all_pods = runs.is_multiple_of(sweep::FULL_SWEEP_EVERY);
        let pods = if all_pods { "all" } else { "cached" };
        let pause = match sweep::sweep(&ctx, all_pods).await {
            Ok(found) => {
                if runs == 0 || found > 0 {
                    info!(found, first = runs == 0, pods, "sweep done");
                }
                runs += 1;
                sweep::SWEEP_INTERVAL
            }
            Err(err) => {
                warn!(error = %err, "sweep failed");
                if runs == 0 {
                    Duration::from_secs(1)
                } else {
                    sweep::SWEEP_INTERVAL
                }
            }
        };
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = shutdown.cancelled() => return,
        }
    }
}
