//! Wiring of `disruption-guard operator`, the top layer: the flags, the metrics registry, the
//! admin endpoints, and start-up — one [`Runtime`] built, the window controller, the drain
//! watcher, the HTTP API, the eviction interception and the EvictionRequest responder each started from it with their own
//! flags and metrics, one shutdown signal for all.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use clap::Args;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{Api, Client};
use tracing::info;

pub mod admin;
pub mod metrics;
pub mod process;

pub use metrics::Metrics;

use crate::runtime::refusals::Refusals;
use crate::runtime::{Caches, Leadership, Readiness, Runtime, connection, leader, shutdown};

/// Flags of `disruption-guard operator`; each has a `DISRUPTION_GUARD_*` environment twin.
#[derive(Debug, Clone, Args)]
pub struct OperatorArgs {
    /// Address of the admin endpoints: /metrics, /healthz, /readyz.
    #[arg(long, env = "DISRUPTION_GUARD_ADMIN_ADDR", default_value = "0.0.0.0:9090")]
    pub admin_addr: SocketAddr,

    /// Check the flags (each one, and what they say together) and exit: 0 when they are valid,
    /// else 1 with the reason. Nothing connects to the cluster.
    #[arg(long)]
    pub check_config: bool,

    /// Only act in these namespaces (comma-separated); all namespaces when empty.
    #[arg(long, env = "DISRUPTION_GUARD_NAMESPACES", value_delimiter = ',')]
    pub namespaces: Vec<String>,

    /// Elect one writer among replicas over a coordination.k8s.io Lease.
    #[arg(long, env = "DISRUPTION_GUARD_LEADER_ELECTION")]
    pub leader_election: bool,

    /// Namespace of the leader-election Lease (default: the pod's namespace).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub leader_election_namespace: String,

    /// Name of the leader-election Lease.
    #[arg(
        long,
        env = "DISRUPTION_GUARD_LEADER_ELECTION_LEASE",
        default_value = "disruption-guard"
    )]
    pub leader_election_lease: String,

    /// This replica's identity in the election (default: the pod name, else the host name).
    #[arg(long, env = "POD_NAME")]
    pub leader_election_identity: Option<String>,

    /// Seconds a Lease stays valid without renewal; renewals happen every third of it.
    #[arg(long, env = "DISRUPTION_GUARD_LEASE_DURATION_SECONDS", default_value_t = 15)]
    pub lease_duration_seconds: u64,

    /// Offer HTTP/2 to the API server: one connection carries every watch and request.
    /// `--http2=false` keeps to HTTP/1.1 (a connection per concurrent request), e.g. behind a
    /// proxy that mishandles long HTTP/2 streams.
    #[arg(
        long,
        env = "DISRUPTION_GUARD_HTTP2",
        default_value_t = true,
        action = clap::ArgAction::Set
    )]
    pub http2: bool,

    #[command(flatten)]
    pub api: crate::api::ApiArgs,

    #[command(flatten)]
    pub window: crate::window::WindowArgs,

    #[command(flatten)]
    pub drain: crate::drain::DrainArgs,

    #[command(flatten)]
    pub intercept: crate::intercept::InterceptArgs,

    #[command(flatten)]
    pub respond: crate::respond::RespondArgs,
}

/// Runs the operator until SIGINT or SIGTERM.
pub async fn run(args: OperatorArgs) -> anyhow::Result<()> {
    // Flags that cannot work are refused before anything connects.
    args.api
        .checked(args.window.max_ttl)
        .map_err(anyhow::Error::msg)?;
    args.intercept
        .checked(&args.namespaces)
        .map_err(anyhow::Error::msg)?;
    if args.check_config {
        println!("the flags are valid");
        return Ok(());
    }
    crate::runtime::memory::return_large_buffers_at_once();
    let kube_config = kube::Config::infer()
        .await
        .context("reading the Kubernetes configuration (in-cluster or KUBECONFIG)")?;
    // The registry comes first: the client records its requests from the first one on.
    let metrics = Arc::new(Metrics::default());
    let client = connection::build(kube_config.clone(), args.http2, &metrics.kube_requests)
        .context("setting up the Kubernetes client")?;
    let protocol = connection::protocol(&client)
        .await
        .context("connecting to Kubernetes (in-cluster config or KUBECONFIG)")?;
    info!(?protocol, "connected to the API server");
    check_crd_installed(&client).await?;

    let shutdown = shutdown::on_signal();
    let identity: Arc<str> = args
        .leader_election_identity
        .clone()
        .unwrap_or_else(crate::runtime::host_identity)
        .into();
    let (elector, leader) = if args.leader_election {
        let config = leader::ElectionConfig {
            namespace: args.leader_election_namespace.clone(),
            name: args.leader_election_lease.clone(),
            identity: identity.to_string(),
            lease_duration: std::time::Duration::from_secs(args.lease_duration_seconds),
            retry_period: std::time::Duration::from_secs(args.lease_duration_seconds.div_ceil(3)),
        };
        // A connection of its own: the Lease never waits behind the requests that callers of
        // the HTTP API drive on the shared one (TokenReviews, window writes).
        let lease_client =
            connection::build(kube_config.clone(), args.http2, &metrics.kube_requests)
                .context("setting up the Kubernetes client of the Lease")?;
        let (elector, leader) = leader::Elector::new(lease_client, config);
        (Some(elector), leader)
    } else {
        (None, Leadership::Always)
    };
    let runtime = Runtime {
        client,
        namespaces: args.namespaces.clone().into(),
        leader,
        ready: Arc::new(Readiness::with_refusals(Refusals::counting(
            &metrics.objects_refused,
        ))),
        shutdown,
        identity,
    };
    // An object a watch cannot represent is reported on itself as a Warning Event too.
    runtime
        .ready
        .refusals
        .publish_with(crate::runtime::events::Events::new(&runtime));
    info!(
        admin_addr = %args.admin_addr,
        api_addr = %args.api.api_addr,
        namespaces = ?args.namespaces,
        "starting operator"
    );

    let election = async {
        match elector {
            Some(elector) => elector.run(runtime.shutdown.clone()).await,
            None => Ok(()),
        }
    };
    let (drain_tx, drain_rx) = tokio::sync::mpsc::unbounded_channel();
    let (caches, window_feed, _watches) = Caches::start(
        &runtime.client,
        &runtime.ready,
        runtime.watch_scope(),
        drain_tx.clone(),
        &args.drain.signals,
    );
    // Evictions seen on draining nodes, against which the webhook's reviews are compared.
    caches
        .pods
        .count_evictions(metrics.drain.pods_evicted.clone());
    // One limit for the API and the controller: `--max-ttl` of the window controller.
    let max_ttl = args.window.max_ttl;
    let contact = async {
        crate::runtime::contact::watch(
            runtime.client.clone(),
            runtime.ready.clone(),
            runtime.shutdown.clone(),
        )
        .await;
        Ok(())
    };
    tokio::try_join!(
        election,
        contact,
        admin::serve(args.admin_addr, runtime.clone(), metrics.clone()),
        crate::api::serve(
            runtime.clone(),
            args.api.clone(),
            max_ttl,
            args.window.daemon_set_policy(),
            metrics.api.clone()
        ),
        crate::window::run(
            runtime.clone(),
            args.window.clone(),
            args.drain.signals.clone(),
            metrics.window.clone(),
            caches.clone(),
            window_feed
        ),
        crate::drain::run(
            runtime.clone(),
            args.drain.clone(),
            metrics.drain.clone(),
            caches.clone(),
            drain_tx,
            drain_rx
        ),
        // The interception shares --drain-signals and --max-replicas with the drain watcher.
        crate::intercept::run(
            runtime.clone(),
            args.intercept.clone(),
            crate::intercept::DrainLimits {
                signals: args.drain.signals.clone(),
                max_replicas: args.drain.max_replicas,
            },
            metrics.intercept.clone(),
            caches.clone(),
            |router| crate::intercept::serve::serve(
                runtime.clone(),
                args.intercept.clone(),
                router,
                metrics.intercept.clone(),
            ),
        ),
        // The responder shares --max-replicas with the drain watcher and the webhook, and
        // gives up a rollout after the webhook's hold timeout (--intercept-timeout).
        crate::respond::run(
            runtime.clone(),
            args.respond.clone(),
            crate::respond::run::Shared {
                max_replicas: args.drain.max_replicas,
                timeout: args.intercept.intercept_timeout,
            },
            metrics.respond.clone(),
            caches,
        ),
    )?;
    info!("operator stopped");
    Ok(())
}

/// Fails with a clear message when the TestWindow CRD is not installed.
async fn check_crd_installed(client: &Client) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.get_opt("testwindows.disruption-guard.io")
        .await
        .context("reading CustomResourceDefinitions")?
        .context(
            "the TestWindow CRD is not installed: run `disruption-guard crd | kubectl apply -f -`",
        )?;
    Ok(())
}
