//! Starting the eviction interception: its namespace cache, its state and router, handed to the
//! HTTPS server until it returns.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::core::PartialObjectMeta;
use tracing::info;

use super::{
    DrainLimits, InterceptArgs, InterceptMetrics, InterceptState, act, denials, handler, limit,
    router,
};
use crate::k8s::decoded::Decoded;
use crate::rollout::restart::Rollouts;
use crate::runtime::{Caches, Runtime, caches};

/// Readiness gate of the interception's caches.
const READY_GATE: &str = "intercept";

/// Builds the webhook's state and router, hands the router to `serve` (the HTTPS server:
/// `src/intercept/tls.rs`), and runs until `serve` returns. Evictions are allowed until the
/// caches hold their first lists. Does nothing when `--intercept=false`.
pub async fn run<S, F>(
    runtime: Runtime,
    args: InterceptArgs,
    limits: DrainLimits,
    metrics: Arc<InterceptMetrics>,
    caches: Caches,
    serve: S,
) -> anyhow::Result<()>
where
    S: FnOnce(Router) -> F,
    F: Future<Output = anyhow::Result<()>>,
{
    if !args.enabled {
        info!("eviction interception off (--intercept=false)");
        return Ok(());
    }
    runtime.ready.register(READY_GATE);
    metrics.health.enable();
    let (namespaces, namespace_task) = caches::read_only(
        "namespaces",
        Api::<Decoded<PartialObjectMeta<Namespace>>>::all(runtime.client.clone()),
        &runtime.ready,
    );
    let stores = handler::Stores {
        pods: caches.pods.clone(),
        nodes: caches.nodes.clone(),
        replica_sets: caches.replica_sets.clone(),
        deployments: caches.deployments.clone(),
        namespaces: namespaces.clone(),
    };
    let denials = Arc::new(denials::Denials::default());
    let actor = Arc::new(act::Actor {
        rollouts: Rollouts::new(&runtime),
        signals: limits.signals.clone(),
        max_replicas: limits.max_replicas,
        denials: denials.clone(),
        metrics: metrics.clone(),
        pods: caches.pods.clone(),
        shutdown: runtime.shutdown.clone(),
    });
    let synced = Arc::new(AtomicBool::new(false));
    let state = InterceptState {
        stores,
        settings: Arc::new(handler::Settings {
            signals: limits.signals,
            max_replicas: limits.max_replicas,
            timeout: args.intercept_timeout,
            namespaces: runtime.namespaces.clone(),
            namespace_selector: args.intercept_namespace_selector.clone(),
            replica: runtime.identity.clone(),
        }),
        denials,
        skips: Arc::new(denials::Skips::default()),
        metrics,
        actions: Arc::new(actor),
        synced: synced.clone(),
        limiter: Arc::new(limit::ReviewLimiter::new(
            args.intercept_rate_limit,
            args.intercept_rate_burst,
        )),
    };
    let sync = {
        let runtime = runtime.clone();
        tokio::spawn(async move {
            let namespaces_ready = namespaces.wait_until_ready().await.is_ok();
            if caches.wait_until_ready().await && namespaces_ready {
                synced.store(true, Ordering::Release);
                runtime.ready.mark_synced(READY_GATE);
                info!("eviction interception answering from synced caches");
            }
        })
    };
    info!(port = args.intercept_port, "eviction interception started");
    let result = serve(router(state)).await;
    sync.abort();
    namespace_task.abort();
    result
}
