//! The eviction interception: a validating admission webhook on `pods/eviction` that answers
//! 429 `TooManyRequests` (what a blocking PodDisruptionBudget answers, so every drainer
//! retries) to an eviction of a lone replica on a node being disrupted, and rolls its
//! Deployment out meanwhile, so the new pod starts elsewhere before the old one goes. No PDB,
//! no test window and no wasted node needed.
//!
//! - [`decide`]: allow (and why), deny, or allow after the timeout, for one eviction (pure);
//! - [`review`]: the AdmissionReview wire format, in and out;
//! - [`handler`]: `POST /evictions`, answered from the caches ([`handler::router`]);
//! - [`denials`]: what this replica remembers of the evictions it held back;
//! - [`limit`]: the rate limit per client address (over it: allowed untouched);
//! - [`act`]: what a deny sets going beside the answer — the shared rollout, Events, the wait
//!   for the old pod;
//! - [`certs`]: the serving certificate and its CA, kept in a Secret all replicas share;
//! - [`tls`]: the HTTPS server, whose certificate is swapped without a restart;
//! - [`registration`]: the `ValidatingWebhookConfiguration` that sends evictions here;
//! - [`health`]: whether that registration would have the API server call this webhook, and
//!   when the served certificate expires (gauges computed at scrape time);
//! - [`serve`]: the three together, as the operator starts them.

pub mod act;
pub mod certs;
pub mod decide;
pub mod denials;
pub mod handler;
pub mod health;
pub mod limit;
mod metrics;
pub mod registration;
pub mod review;
pub mod serve;
pub mod tls;

pub use handler::{InterceptState, router};
pub use metrics::InterceptMetrics;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use clap::Args;
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::core::PartialObjectMeta;
use tracing::info;

use crate::k8s::signals::Signal;
use crate::runtime::rollout::Rollouts;
use crate::runtime::{Caches, Runtime, caches};

/// Flags of the eviction interception.
#[derive(Debug, Clone, Args)]
pub struct InterceptArgs {
    /// Hold back evictions of lone replicas on nodes being disrupted while their Deployment
    /// rolls out (a validating webhook on pods/eviction). `--intercept=false` turns it off.
    #[arg(
        long = "intercept",
        env = "DISRUPTION_GUARD_INTERCEPT",
        default_value_t = true,
        action = clap::ArgAction::Set
    )]
    pub enabled: bool,

    /// HTTPS port of the webhook.
    #[arg(long, env = "DISRUPTION_GUARD_INTERCEPT_PORT", default_value_t = 9443)]
    pub intercept_port: u16,

    /// Let a held eviction through after this long, counted from the first deny of any
    /// replica (recorded on the Deployment); 1s to 15m (default: the Deployment's
    /// progressDeadlineSeconds, at most 15m).
    #[arg(long, env = "DISRUPTION_GUARD_INTERCEPT_TIMEOUT", value_parser = decide::parse_timeout)]
    pub intercept_timeout: Option<Duration>,

    /// Namespace of the operator: its webhook Service and certificate Secret live there.
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub intercept_namespace: String,

    /// Service through which the API server reaches the webhook (in a cluster).
    #[arg(
        long,
        env = "DISRUPTION_GUARD_INTERCEPT_SERVICE",
        default_value = "disruption-guard"
    )]
    pub intercept_service: String,

    /// Port of that Service.
    #[arg(
        long,
        env = "DISRUPTION_GUARD_INTERCEPT_SERVICE_PORT",
        default_value_t = 443
    )]
    pub intercept_service_port: u16,

    /// Reviews per second each client address may send on average; over the limit a review
    /// is allowed without being looked at (fail open, counted). 0 turns the limit off.
    #[arg(
        long,
        env = "DISRUPTION_GUARD_INTERCEPT_RATE_LIMIT",
        default_value_t = 200
    )]
    pub intercept_rate_limit: u32,

    /// Reviews each client address may send in a burst.
    #[arg(
        long,
        env = "DISRUPTION_GUARD_INTERCEPT_RATE_BURST",
        default_value_t = 1000
    )]
    pub intercept_rate_burst: u32,

    /// Secret holding the webhook's serving certificate and CA (created and renewed here).
    #[arg(
        long,
        env = "DISRUPTION_GUARD_INTERCEPT_SECRET",
        default_value = certs::SECRET_NAME
    )]
    pub intercept_secret: String,

    /// That Secret is kept by someone else (cert-manager: `tls.crt`, `tls.key`, `ca.crt`): read
    /// it (again every 5 minutes), never write it.
    #[arg(long, env = "DISRUPTION_GUARD_INTERCEPT_EXTERNAL_CERTIFICATE")]
    pub intercept_external_certificate: bool,

    /// Create the whole ValidatingWebhookConfiguration (server-side apply) instead of only
    /// patching the caBundle of the one the chart installs. For local runs with an admin
    /// kubeconfig (`make run`); the chart's RBAC does not allow it.
    #[arg(long, env = "DISRUPTION_GUARD_INTERCEPT_CREATE_WEBHOOK")]
    pub intercept_create_webhook: bool,

    /// Name of the ValidatingWebhookConfiguration the operator keeps.
    #[arg(
        long,
        env = "DISRUPTION_GUARD_INTERCEPT_WEBHOOK",
        default_value = registration::NAME
    )]
    pub intercept_webhook: String,
}

/// What the interception shares with the drain watcher's flags: which node states mean a
/// drain (`--drain-signals`) and which Deployments count as lone replicas (`--max-replicas`).
#[derive(Debug, Clone)]
pub struct DrainLimits {
    pub signals: Vec<Signal>,
    pub max_replicas: i32,
}

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
        Api::<PartialObjectMeta<Namespace>>::all(runtime.client.clone()),
        &runtime.ready,
        |ns| {
            ns.metadata.managed_fields = None;
            ns.metadata.annotations = None;
        },
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
