//! Starting the window controller: the window watch, the stores and wake-ups it reads, the
//! controller itself, and the start-up that opens its readiness gate.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use futures::{StreamExt, future};
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::runtime::controller::{Config as ControllerConfig, Controller};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use tokio::sync::mpsc::unbounded_channel;
use tracing::{info, warn};

use super::context::{Context, WindowStores};
use super::startup::{GATE, startup};
use super::{WindowArgs, WindowMetrics, apply, reconcile, wakeups};
use crate::k8s::decoded::Decoded;
use crate::k8s::signals::Signal;
use crate::resources::TestWindow;
use crate::runtime::caches::reflect;
use crate::runtime::caches::{Caches, ChangeFeed};
use crate::runtime::events::Events;
use crate::runtime::{Pods, Runtime, Scope};

/// How many windows are reconciled at once. A reconcile mostly waits on the API server (its
/// writes run in parallel, then the status): under a burst of openings, when a write takes
/// half a second, sixteen at once left new windows queued for seconds behind the reconciles
/// in flight. At most this many times `WRITE_CONCURRENCY` writes are in flight; the API
/// server's priority and fairness queues what exceeds the operator's share, and the client
/// retries a 429.
const RECONCILE_CONCURRENCY: u16 = 32;

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
    // Windows are read one at a time (one a tenant stored out of range is reported and left
    // out: crate::runtime::refusals), by a watch supervised as every cache's is.
    let (changed, changed_windows) = unbounded_channel();
    let window_task = reflect(
        "testwindows",
        runtime.api::<Decoded<TestWindow>>(),
        watcher::Config::default(),
        windows_writer,
        runtime.ready.clone(),
        move |event| {
            pod_scopes.on(&event);
            match event {
                watcher::Event::Apply(w) | watcher::Event::InitApply(w) => {
                    // A closed receiver means the controller stopped (shutdown).
                    let _ = changed.send(Ok(w));
                }
                watcher::Event::InitDone => {
                    windows_listed.send_replace(true);
                }
                watcher::Event::Delete(_) | watcher::Event::Init => {}
            }
        },
    );
    let window_stream = wakeups::receive(changed_windows);

    let (stateful_sets, sts_task) = crate::runtime::caches::read_only(
        "statefulsets",
        runtime.api::<Decoded<StatefulSet>>(),
        &runtime.ready,
    );
    let claim_resource = wakeups::discover_node_claims(&client).await;
    let (node_claims, claim_wakeups, claims_task) = match &claim_resource {
        Some(ar) => {
            let (store, stream, task) =
                wakeups::node_claims(&client, &runtime.ready, ar, &windows, &caches);
            (Some(store), stream, Some(task))
        }
        None => (None, futures::stream::pending().boxed(), None),
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
        unseen: Default::default(),
    });

    let pod_wakeups = wakeups::pods(feed.pods, &windows, &caches);
    let node_wakeups = wakeups::nodes(feed.nodes, &windows, &caches);
    let pdb_wakeups = wakeups::pdbs(feed.pdbs, &windows, &caches);
    tokio::spawn(startup(ctx.clone(), caches, windows_listed_rx));

    info!(namespaces = ?namespaces, "window controller starting");
    Controller::for_stream(window_stream, windows)
        .reconcile_on(pod_wakeups)
        .reconcile_on(node_wakeups)
        .reconcile_on(pdb_wakeups)
        .reconcile_on(claim_wakeups)
        .with_config(ControllerConfig::default().concurrency(RECONCILE_CONCURRENCY))
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
    window_task.abort();
    if let Some(task) = claims_task {
        task.abort();
    }
    info!("window controller stopped");
    Ok(())
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
