//! The window controller: protects the pods an open `TestWindow` selects and releases the
//! protection when the window closes, expires or is deleted.
//!
//! Layout: [`timing`] decides phases and times, [`plan`] (with [`pdbs`]) decides the writes
//! (all pure, with [`selector`], [`report`] and the shared [`crate::k8s`] helpers);
//! [`triggers`] decides which windows a watched change concerns, [`wakeups`] turns the watches
//! into the streams that wake the controller;
//! [`apply`] makes the writes;
//! [`reconcile`] runs gather → decide → apply → status for one window; [`sweep`] removes
//! leftovers at start-up and then periodically while this replica leads; this file wires the
//! watches and the controller.

pub mod apply;
pub mod context;
pub mod error;
pub mod gauges;
mod metrics;
pub mod model;
pub mod pdbs;
pub mod plan;
pub mod reconcile;
pub mod report;
pub mod selector;
pub mod status;
pub mod status_write;
pub mod sweep;
pub mod timing;
pub mod triggers;
pub mod wakeups;

#[cfg(test)]
mod plan_tests;

pub use metrics::WindowMetrics;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::Args;
use futures::{FutureExt, StreamExt, future};
use jiff::SignedDuration;
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::runtime::controller::{Config as ControllerConfig, Controller};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tracing::{info, warn};

use crate::k8s::signals::Signal;
use crate::k8s::trim;
use crate::resources::TestWindow;
use crate::runtime::caches::{Caches, ChangeFeed};
use crate::runtime::events::Events;
use crate::runtime::{Pods, Runtime, Scope};
use context::{Context, WindowStores};

/// Flags of the window controller.
#[derive(Debug, Clone, Args)]
pub struct WindowArgs {
    /// Longest a window may stay open from when it opened, whatever its ttl or renewals ask;
    /// the API also refuses a longer ttl.
    #[arg(long, env = "DISRUPTION_GUARD_MAX_TTL", default_value = "24h", value_parser = crate::k8s::duration::parse)]
    pub max_ttl: Duration,

    /// How long a Closed or Expired window is kept, with its report, before it is deleted.
    #[arg(long, env = "DISRUPTION_GUARD_RETENTION", default_value = "1h", value_parser = crate::k8s::duration::parse)]
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

const GATE: &str = "window-controller";

/// Runs the window controller until shutdown; `signals` mark a node as being disrupted in the
/// windows' reports (the drain watcher's `--drain-signals`).
pub async fn run(
    runtime: Runtime,
    args: WindowArgs,
    signals: Vec<Signal>,
    metrics: Arc<WindowMetrics>,
    caches: Caches,
    feed: ChangeFeed,
) -> anyhow::Result<()> {
    runtime.ready.register(GATE);
    let client = runtime.client.clone();
    let namespaces = runtime.namespaces.clone();

    let (windows, windows_writer) = reflector::store();
    // The controller itself waits for this store's readiness, and a store wakes only one
    // waiter: start-up learns it from the stream instead.
    let (windows_listed, windows_listed_rx) = tokio::sync::watch::channel(false);
    let pod_scopes = NamespaceScopes {
        pods: caches.pods.clone(),
        windows: windows.clone(),
        runtime: runtime.clone(),
    };
    let window_stream = watcher(runtime.api::<TestWindow>(), watcher::Config::default())
        .default_backoff()
        .reflect(windows_writer)
        .inspect(move |event| {
            if let Ok(event) = event {
                pod_scopes.on(event);
            }
            if matches!(event, Ok(watcher::Event::InitDone)) {
                windows_listed.send_replace(true);
            }
        })
        .applied_objects();

    let (stateful_sets, sts_task) = crate::runtime::caches::read_only(
        "statefulsets",
        runtime.api::<StatefulSet>(),
        &runtime.ready,
        trim::stateful_set,
    );
    let claim_resource = wakeups::discover_node_claims(&client).await;
    let (node_claims, claim_wakeups) = match &claim_resource {
        Some(ar) => {
            let (store, stream) = wakeups::node_claims(&client, ar, &windows, &caches);
            (Some(store), stream)
        }
        None => (None, futures::stream::pending().boxed()),
    };
    let stores = WindowStores {
        windows: windows.clone(),
        pods: caches.pods.clone(),
        nodes: caches.nodes.clone(),
        pdbs: caches.pdbs.clone(),
        replica_sets: caches.replica_sets.clone(),
        deployments: caches.deployments.clone(),
        stateful_sets,
        node_claims,
    };
    metrics.gauges.attach(windows.clone(), runtime.clone());
    let ctx = Arc::new(Context {
        runtime: runtime.clone(),
        args,
        metrics,
        signals,
        stores,
        writer: apply::Writer {
            client: client.clone(),
            node_claims: claim_resource,
        },
        events: Events::new(&runtime),
        synced: AtomicBool::new(false),
        written: Default::default(),
    });

    let pod_wakeups = wakeups::pods(feed.pods, &windows);
    let node_wakeups = wakeups::nodes(feed.nodes, &windows, &caches);
    let pdb_wakeups = wakeups::pdbs(feed.pdbs, &windows, &caches);
    tokio::spawn(startup(ctx.clone(), caches, windows_listed_rx));

    info!(namespaces = ?namespaces, "window controller starting");
    Controller::for_stream(window_stream, windows)
        .reconcile_on(pod_wakeups)
        .reconcile_on(node_wakeups)
        .reconcile_on(pdb_wakeups)
        .reconcile_on(claim_wakeups)
        .with_config(ControllerConfig::default().concurrency(16))
        .graceful_shutdown_on(runtime.shutdown.clone().cancelled_owned())
        .run(reconcile::reconcile, reconcile::error_policy, ctx)
        .for_each(|result| {
            // Reconcile failures are logged (and made Events) by the reconciler itself.
            if let Err(err) = result
                && !matches!(err, kube::runtime::controller::Error::ReconcilerFailed(..))
            {
                warn!(error = %err, "window controller");
            }
            future::ready(())
        })
        .await;
    sts_task.abort();
    info!("window controller stopped");
    Ok(())
}

/// Waits for every cache, opens the readiness gate, then sweeps leftovers whenever this
/// replica leads: at once, and every [`sweep::SWEEP_INTERVAL`] after.
async fn startup(
    ctx: Arc<Context>,
    caches: Caches,
    mut windows_listed: tokio::sync::watch::Receiver<bool>,
) {
    let s = &ctx.stores;
    let listed = windows_listed.clone();
    let waits = async {
        if !caches.wait_until_ready().await {
            return Err(());
        }
        windows_listed
            .wait_for(|listed| *listed)
            .await
            .map_err(|_| ())?;
        s.stateful_sets.wait_until_ready().await.map_err(|_| ())?;
        if let Some(claims) = &s.node_claims {
            claims.wait_until_ready().await.map_err(|_| ())?;
        }
        Ok(())
    };
    tokio::pin!(waits);
    loop {
        tokio::select! {
            done = &mut waits => match done {
                Ok(()) => break,
                Err(_) => return,
            },
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
    ctx.synced.store(true, Ordering::Release);
    ctx.runtime.ready.mark_synced(GATE);
    info!("window controller synced");
    sweeps(&ctx).await;
}

/// Runs the sweep while this replica leads until shutdown: once at once (retried briefly if
/// listing windows fails), then every [`sweep::SWEEP_INTERVAL`]. The sweep writes, so only the
/// leader runs it: a follower sweeps as soon as it takes over.
async fn sweeps(ctx: &Context) {
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
        let pause = match sweep::sweep(ctx, all_pods).await {
            Ok(removed) => {
                if runs == 0 || removed > 0 {
                    info!(removed, first = runs == 0, pods, "sweep done");
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

/// Keeps the pods of each namespace that has a window cached, from the window watch's events
/// (after the window store took them): a namespace's pods are watched from its first window
/// until its last one is gone. Namespaces out of the operator's scope are never watched.
struct NamespaceScopes {
    pods: Pods,
    windows: Store<TestWindow>,
    runtime: Runtime,
}

impl NamespaceScopes {
    fn on(&self, event: &watcher::Event<TestWindow>) {
        let has_windows = |ns: &str| {
            self.windows
                .state()
                .iter()
                .any(|w| w.metadata.namespace.as_deref() == Some(ns))
        };
        match event {
            watcher::Event::Apply(w) | watcher::Event::InitApply(w) => {
                if let Some(ns) = &w.metadata.namespace
                    && self.runtime.in_scope(ns)
                {
                    self.pods.want(Scope::Namespace(ns.clone()));
                }
            }
            watcher::Event::Delete(w) => {
                if let Some(ns) = &w.metadata.namespace
                    && !has_windows(ns)
                {
                    self.pods.release(&Scope::Namespace(ns.clone()));
                }
            }
            watcher::Event::InitDone => self.pods.retain(|scope| match scope {
                Scope::Namespace(ns) => has_windows(ns),
                Scope::Node(_) => true,
            }),
            watcher::Event::Init => {}
        }
    }
}
