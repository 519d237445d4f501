//! Wiring of `disruption-guard operator`: one shared [`State`], the window controller, the
//! drain watcher, the HTTP API and the admin endpoints started together, one shutdown signal
//! for all.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use clap::Args;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;
use tracing::info;

pub mod admin;
pub mod caches;
pub mod client;
pub mod leader;
pub mod memory;
pub mod metrics;
pub mod shutdown;

pub use metrics::Metrics;

/// Flags of `disruption-guard operator`; each has a `DISRUPTION_GUARD_*` environment twin.
#[derive(Debug, Clone, Args)]
pub struct OperatorArgs {
    /// Address of the admin endpoints: /metrics, /healthz, /readyz.
    #[arg(
        long,
        env = "DISRUPTION_GUARD_ADMIN_ADDR",
        default_value = "0.0.0.0:9090"
    )]
    pub admin_addr: SocketAddr,

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
    #[arg(
        long,
        env = "DISRUPTION_GUARD_LEASE_DURATION_SECONDS",
        default_value_t = 15
    )]
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
}

/// Everything the controllers and servers share; cheap to clone.
#[derive(Clone)]
pub struct State {
    /// Client for the cluster the operator runs against.
    pub client: Client,
    /// The operator's flags.
    pub args: Arc<OperatorArgs>,
    /// Prometheus metrics.
    pub metrics: Arc<Metrics>,
    /// Whether this replica may write (leader election).
    pub leader: leader::Leadership,
    /// Readiness: true once every watch has synced.
    pub ready: Arc<admin::Readiness>,
    /// Cancelled when the process is asked to stop.
    pub shutdown: CancellationToken,
}

impl State {
    /// The one namespace namespaced watches are limited to, when `--namespaces` names exactly
    /// one; otherwise they watch every namespace and decisions filter with [`Self::in_scope`].
    pub fn watch_scope(&self) -> Option<&str> {
        match self.args.namespaces.as_slice() {
            [only] => Some(only.as_str()),
            _ => None,
        }
    }

    /// Whether the operator acts in `namespace` (the `--namespaces` scope).
    pub fn in_scope(&self, namespace: &str) -> bool {
        self.args.namespaces.is_empty() || self.args.namespaces.iter().any(|n| n == namespace)
    }
}

/// Runs the operator until SIGINT or SIGTERM.
pub async fn run(args: OperatorArgs) -> anyhow::Result<()> {
    let config = kube::Config::infer()
        .await
        .context("reading the Kubernetes configuration (in-cluster or KUBECONFIG)")?;
    let client = client::build(config, args.http2).context("setting up the Kubernetes client")?;
    let protocol = client::protocol(&client)
        .await
        .context("connecting to Kubernetes (in-cluster config or KUBECONFIG)")?;
    info!(?protocol, "connected to the API server");
    check_crd_installed(&client).await?;

    let shutdown = shutdown::on_signal();
    let (elector, leader) = if args.leader_election {
        let identity = args
            .leader_election_identity
            .clone()
            .unwrap_or_else(hostname);
        let config = leader::ElectionConfig {
            namespace: args.leader_election_namespace.clone(),
            name: args.leader_election_lease.clone(),
            identity,
            lease_duration: std::time::Duration::from_secs(args.lease_duration_seconds),
            retry_period: std::time::Duration::from_secs(args.lease_duration_seconds.div_ceil(3)),
        };
        let (elector, leader) = leader::Elector::new(client.clone(), config);
        (Some(elector), leader)
    } else {
        (None, leader::Leadership::Always)
    };
    let state = State {
        client,
        leader,
        args: Arc::new(args),
        metrics: Arc::new(Metrics::default()),
        ready: Arc::new(admin::Readiness::default()),
        shutdown,
    };
    info!(
        admin_addr = %state.args.admin_addr,
        api_addr = %state.args.api.api_addr,
        namespaces = ?state.args.namespaces,
        "starting operator"
    );

    let election = async {
        match elector {
            Some(elector) => {
                // A replica without the Lease exports no stale window gauges.
                let metrics = state.metrics.clone();
                elector
                    .on_follow(move || metrics.window.clear_gauges())
                    .run(state.shutdown.clone())
                    .await
            }
            None => Ok(()),
        }
    };
    let (drain_tx, drain_rx) = tokio::sync::mpsc::unbounded_channel();
    let (caches, window_feed, _watches) =
        caches::Caches::start(&state.client, state.watch_scope(), drain_tx.clone());
    tokio::try_join!(
        election,
        admin::serve(state.args.admin_addr, state.clone()),
        crate::api::serve(state.clone()),
        crate::window::run(state.clone(), caches.clone(), window_feed),
        crate::drain::run(state.clone(), caches, drain_tx, drain_rx),
    )?;
    info!("operator stopped");
    Ok(())
}

/// The host name, the default identity outside a pod.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| format!("disruption-guard-{}", std::process::id()))
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
