//! Starting the window controller: the window watch, the stores and wake-ups it reads, the
//! controller itself (one pass per namespace at a time, [`super::namespaces`]), started once
//! every cache it reads is synced ([`super::startup`]).

use std::sync::Arc;

use futures::{StreamExt, future};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector;
use kube::runtime::watcher;
use tracing::{info, warn};

use super::context::{Context, WindowStores};
use super::namespaces::NamespaceQueue;
use super::startup::{self, GATE};
use super::{WindowArgs, WindowMetrics, apply, reconcile, wakeups};
use crate::k8s::decoded::Decoded;
use crate::k8s::signals::Signal;
use crate::resources::TestWindow;
use crate::runtime::caches::reflect;
use crate::runtime::caches::{Caches, ChangeFeed};
use crate::runtime::controller_runtime::result_of;
use crate::runtime::events::Events;
use crate::runtime::{Runtime, Scope};

/// How many namespaces are reconciled at once. A pass mostly waits on the API server (its
/// writes run in parallel, then the statuses): under a burst of openings in many namespaces, a
/// few passes in flight must not leave the others queued behind them. At most this many times
/// `WRITE_CONCURRENCY` writes are in flight; the API server's priority and fairness queues what
/// exceeds the operator's share, and the client retries a 429.
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
    let (queue, woken) = NamespaceQueue::new();
    let queue = Arc::new(queue);

    let (windows, windows_writer) = reflector::store::<TestWindow>();
    // Start-up learns from the stream when the windows are listed.
    let (windows_listed, windows_listed_rx) = tokio::sync::watch::channel(false);
    // Windows are read one at a time (one a tenant stored out of range is reported and left
    // out: crate::runtime::refusals), by a watch supervised as every cache's is. Each change
    // wakes its namespace. The pods of each namespace in scope that has a window are cached,
    // from its first window until its last one is gone (the events come after the store took
    // them).
    let (pods, window_queue, store) = (caches.pods.clone(), queue.clone(), windows.clone());
    let has_windows = move |ns: &str| {
        let state = store.state();
        state
            .iter()
            .any(|w| w.metadata.namespace.as_deref() == Some(ns))
    };
    let in_scope = {
        let runtime = runtime.clone();
        move |ns: &str| runtime.in_scope(ns)
    };
    let window_task = reflect(
        "testwindows",
        runtime.api::<Decoded<TestWindow>>(),
        watcher::Config::default(),
        windows_writer,
        runtime.ready.clone(),
        move |event| match event {
            watcher::Event::Apply(w) | watcher::Event::InitApply(w) => {
                let ns = w.namespace().unwrap_or_default();
                if in_scope(&ns) {
                    pods.want(Scope::Namespace(ns.clone()));
                }
                window_queue.wake(&ns);
            }
            watcher::Event::Delete(w) => {
                let ns = w.namespace().unwrap_or_default();
                if !has_windows(&ns) {
                    pods.release(&Scope::Namespace(ns.clone()));
                }
                window_queue.wake_known(&ns);
            }
            watcher::Event::InitDone => {
                pods.retain(|scope| match scope {
                    Scope::Namespace(ns) => has_windows(ns),
                    Scope::Node(_) | Scope::Pod(..) => true,
                });
                windows_listed.send_replace(true);
            }
            watcher::Event::Init => {}
        },
    );

    let (stateful_sets, sts_task) = crate::runtime::caches::read_only(
        "statefulsets",
        runtime.api::<Decoded<StatefulSet>>(),
        &runtime.ready,
    );
    let claim_resource = wakeups::discover_node_claims(&client).await;
    let (node_claims, claims_task) = (claim_resource.as_ref())
        .map(|ar| {
            wakeups::node_claims(
                &client,
                &runtime.ready,
                ar,
                queue.clone(),
                caches.pods.clone(),
            )
        })
        .unzip();
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
        queue: queue.clone(),
        events: Events::new(&runtime),
        written: Default::default(),
        swept: Default::default(),
    });

    let feeds = [
        wakeups::pods(feed.pods, ctx.clone()),
        wakeups::nodes(feed.nodes, ctx.clone()),
        wakeups::pdbs(feed.pdbs, ctx.clone()),
    ];
    info!(namespaces = ?namespaces, "window controller starting");
    // No decision is taken on a partial view: the controller runs once every cache is synced
    // (the namespaces woken meanwhile wait in the queue).
    let synced = tokio::select! {
        synced = startup::synced(&ctx, &caches, windows_listed_rx) => synced,
        () = runtime.shutdown.cancelled() => false,
    };
    if synced {
        runtime.ready.mark_synced(GATE);
        info!("window controller synced");
        tokio::spawn(startup::sweeps(ctx.clone()));
        let queued = ctx.metrics.queue.clone();
        let never = futures::stream::pending::<Result<Namespace, watcher::Error>>();
        Controller::for_stream(never, queue.store())
            .reconcile_on(woken.inspect(move |key| queued.added(&key.name)))
            .with_config(ControllerConfig::default().concurrency(RECONCILE_CONCURRENCY))
            .graceful_shutdown_on(runtime.shutdown.clone().cancelled_owned())
            .run(counted_reconcile, reconcile::error_policy, ctx)
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
    }
    sts_task.abort();
    window_task.abort();
    for task in feeds.into_iter().chain(claims_task) {
        task.abort();
    }
    info!("window controller stopped");
    Ok(())
}

/// A reconcile, counted in controller-runtime's series: taken from the queue, and its result.
async fn counted_reconcile(
    key: Arc<Namespace>,
    ctx: Arc<Context>,
) -> Result<Action, super::error::Error> {
    ctx.metrics.queue.taken(&key.name_any());
    let result = reconcile::reconcile(key, ctx.clone()).await;
    ctx.metrics.controller.reconciled(result_of(&result));
    result
}
