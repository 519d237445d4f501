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
    /// Readiness: true once every watch has synced.
    pub ready: Arc<admin::Readiness>,
    /// Cancelled when the process is asked to stop.
    pub shutdown: CancellationToken,
}

impl State {
    /// Whether the operator acts in `namespace` (the `--namespaces` scope).
    pub fn in_scope(&self, namespace: &str) -> bool {
        self.args.namespaces.is_empty() || self.args.namespaces.iter().any(|n| n == namespace)
    }
}

/// Runs the operator until SIGINT or SIGTERM.
pub async fn run(args: OperatorArgs) -> anyhow::Result<()> {
    let client = Client::try_default()
        .await
        .context("connecting to Kubernetes (in-cluster config or KUBECONFIG)")?;
    check_crd_installed(&client).await?;

    let state = State {
        client,
        args: Arc::new(args),
        metrics: Arc::new(Metrics::default()),
        ready: Arc::new(admin::Readiness::default()),
        shutdown: shutdown::on_signal(),
    };
    info!(
        admin_addr = %state.args.admin_addr,
        api_addr = %state.args.api.api_addr,
        namespaces = ?state.args.namespaces,
        "starting operator"
    );

    tokio::try_join!(
        admin::serve(state.args.admin_addr, state.clone()),
        crate::api::serve(state.clone()),
        crate::window::run(state.clone()),
        crate::drain::run(state.clone()),
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
