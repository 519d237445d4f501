//! The window controller: protects the pods an open `TestWindow` selects and releases the
//! protection when the window closes, expires or is deleted.
//!
//! Layout: [`timing`] decides phases and times, [`plan`] (with [`pdbs`]) decides the writes
//! (all pure, with [`selector`], [`report`] and the shared [`crate::k8s`] helpers);
//! [`triggers`] maps watched changes to the windows they concern;
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

#[cfg(test)]
mod plan_tests;

pub use metrics::WindowMetrics;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::Args;
use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt, future};
use jiff::SignedDuration;
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::controller::{Config as ControllerConfig, Controller};
use kube::runtime::events::Recorder;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tracing::{info, warn};

use crate::k8s::fields::{keep_own_entries, window_uids};
use crate::k8s::trim;
use crate::resources::TestWindow;
use crate::runtime::Runtime;
use crate::runtime::caches::{Caches, ChangeFeed};
use context::{Context, WindowStores};
use triggers::{NodeChanges, PdbTriggers, windows_for, windows_of_pods};

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

/// An Api over the operator's scope: one namespace when scoped to one, else cluster-wide
/// (reconciles filter by scope).
fn scoped<K>(client: &Client, namespaces: &[String]) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match namespaces {
        [one] => Api::namespaced(client.clone(), one),
        _ => Api::all(client.clone()),
    }
}

/// A cache that is only read (never triggers a reconcile), driven by its own task.
fn cache<K>(api: Api<K>, strip: fn(&mut K)) -> (Store<K>, tokio::task::JoinHandle<()>)
where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let task = tokio::spawn(
        watcher(api, watcher::Config::default())
            .default_backoff()
            .modify(strip)
            .reflect(writer)
            .for_each(|event| {
                if let Err(err) = event {
                    warn!(error = %err, kind = K::kind(&()).as_ref(), "watch failed, retrying");
                }
                future::ready(())
            }),
    );
    (reader, task)
}

async fn discover_node_claims(client: &Client) -> Option<ApiResource> {
    let gvk = GroupVersionKind::gvk("karpenter.sh", "v1", "NodeClaim");
    match kube::discovery::pinned_kind(client, &gvk).await {
        Ok((ar, _)) => {
            info!("Karpenter NodeClaims found: their nodes' claims are protected too");
            Some(ar)
        }
        Err(_) => None,
    }
}

/// Runs the window controller until shutdown.
pub async fn run(
    runtime: Runtime,
    args: WindowArgs,
    metrics: Arc<WindowMetrics>,
    caches: Caches,
    feed: ChangeFeed,
) -> anyhow::Result<()> {
    runtime.ready.register(GATE);
    let client = runtime.client.clone();
    let namespaces = runtime.namespaces.clone();
    let cfg = watcher::Config::default();

    let (windows, windows_writer) = reflector::store();
    // The controller itself waits for this store's readiness, and a store wakes only one
    // waiter: start-up learns it from the stream instead.
    let (windows_listed, windows_listed_rx) = tokio::sync::watch::channel(false);
    let window_stream = watcher(scoped::<TestWindow>(&client, &namespaces), cfg.clone())
        .default_backoff()
        .reflect(windows_writer)
        .inspect(move |event| {
            if matches!(event, Ok(watcher::Event::InitDone)) {
                windows_listed.send_replace(true);
            }
        })
        .applied_objects();

    let (pods, nodes) = (caches.pods.clone(), caches.nodes.clone());
    let pod_windows = windows.clone();
    let pod_triggers = receive(feed.pods).flat_map(move |pod| {
        futures::stream::iter(windows_for(
            &pod_windows,
            pod.metadata.namespace.as_deref(),
            pod.labels(),
            &window_uids(&pod.metadata),
        ))
    });
    let node_windows = windows.clone();
    let (node_pods, node_store) = (pods.clone(), nodes.clone());
    let node_index = caches.pod_index.clone();
    let mut node_changes = NodeChanges::default();
    let node_triggers = receive(feed.nodes).flat_map(move |node| {
        let name = node.metadata.name.clone().unwrap_or_default();
        let stored = node_store.get(&ObjectRef::new(&name)).is_some();
        let mut refs = vec![];
        if node_changes.changed(&node, stored) {
            refs = windows_for(
                &node_windows,
                None,
                &BTreeMap::new(),
                &window_uids(&node.metadata),
            );
            refs.extend(windows_of_pods(
                &node_windows,
                &node_index.on_node(&node_pods, &name),
            ));
        }
        futures::stream::iter(refs)
    });

    let (pdb_windows, pdb_pods) = (windows.clone(), pods.clone());
    let mut pdb_triggers = PdbTriggers::default();
    let pdb_stream = receive(feed.pdbs)
        .filter_map(move |event| {
            let refs = pdb_triggers
                .on(&event)
                .map(|concerns| PdbTriggers::refs(concerns, &pdb_windows, &pdb_pods));
            future::ready(refs)
        })
        .flat_map(futures::stream::iter);

    let (stateful_sets, sts_task) = cache(
        scoped::<StatefulSet>(&client, &namespaces),
        trim::stateful_set,
    );

    let claim_resource = discover_node_claims(&client).await;
    let mut claim_store = None;
    let claim_triggers: BoxStream<'static, ObjectRef<TestWindow>> = match &claim_resource {
        Some(ar) => {
            let writer = reflector::store::Writer::new(ar.clone());
            let reader = writer.as_reader();
            claim_store = Some(reader);
            let windows = windows.clone();
            let pods = pods.clone();
            let index = caches.pod_index.clone();
            watcher(
                Api::<DynamicObject>::all_with(client.clone(), ar),
                cfg.clone(),
            )
            .default_backoff()
            .modify(|c: &mut DynamicObject| keep_own_entries(&mut c.metadata))
            .reflect(writer)
            .touched_objects()
            .filter_map(|r| future::ready(r.ok()))
            .flat_map(move |claim: DynamicObject| {
                let node = claim
                    .data
                    .pointer("/status/nodeName")
                    .and_then(|v| v.as_str())
                    .map(str::to_string);
                let mut refs = windows_for(
                    &windows,
                    None,
                    &BTreeMap::new(),
                    &window_uids(&claim.metadata),
                );
                if let Some(node) = node {
                    refs.extend(windows_of_pods(&windows, &index.on_node(&pods, &node)));
                }
                futures::stream::iter(refs)
            })
            .boxed()
        }
        None => futures::stream::pending().boxed(),
    };

    let stores = WindowStores {
        windows: windows.clone(),
        pods: pods.clone(),
        pod_index: caches.pod_index.clone(),
        nodes: nodes.clone(),
        pdbs: caches.pdbs.clone(),
        replica_sets: caches.replica_sets.clone(),
        deployments: caches.deployments.clone(),
        stateful_sets,
        node_claims: claim_store,
    };
    metrics.gauges.attach(windows.clone(), runtime.clone());
    let ctx = Arc::new(Context {
        runtime: runtime.clone(),
        args,
        metrics,
        stores: stores.clone(),
        writer: apply::Writer {
            client: client.clone(),
            node_claims: claim_resource,
        },
        recorder: Recorder::new(client.clone(), runtime.reporter()),
        synced: AtomicBool::new(false),
        written: Default::default(),
    });

    tokio::spawn(startup(ctx.clone(), caches, windows_listed_rx));

    info!(namespaces = ?namespaces, "window controller starting");
    Controller::for_stream(window_stream, windows)
        .reconcile_on(pod_triggers)
        .reconcile_on(node_triggers)
        .reconcile_on(pdb_stream)
        .reconcile_on(claim_triggers)
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

/// The items of a channel as a stream.
fn receive<T>(mut rx: tokio::sync::mpsc::UnboundedReceiver<T>) -> impl futures::Stream<Item = T> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
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
        let pause = match sweep::sweep(ctx).await {
            Ok(removed) => {
                if runs == 0 || removed > 0 {
                    info!(removed, first = runs == 0, "sweep done");
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
