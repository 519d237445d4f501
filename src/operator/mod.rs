//! Wiring of `disruption-guard operator`: one shared [`State`], the controllers and servers
//! started together, one shutdown signal for all.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use clap::Args;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

pub mod admin;
pub mod metrics;
pub mod shutdown;

pub use metrics::Metrics;

/// Flags of `disruption-guard operator`; each has a `DISRUPTION_GUARD_*` environment twin.
#[derive(Debug, Clone, Args)]
pub struct OperatorArgs {
    /// Address of the HTTP API for CI.
    #[arg(
        long,
        env = "DISRUPTION_GUARD_API_ADDR",
        default_value = "0.0.0.0:8080"
    )]
    pub api_addr: SocketAddr,

    /// Address of the admin endpoints: /metrics, /healthz, /readyz.
    #[arg(
        long,
        env = "DISRUPTION_GUARD_ADMIN_ADDR",
        default_value = "0.0.0.0:9090"
    )]
    pub admin_addr: SocketAddr,

    /// Audience ServiceAccount tokens must carry to be accepted by the API.
    #[arg(
        long,
        env = "DISRUPTION_GUARD_TOKEN_AUDIENCE",
        default_value = "disruption-guard"
    )]
    pub token_audience: String,

    /// Serve the API without authentication. For local runs only.
    #[arg(long, env = "DISRUPTION_GUARD_INSECURE_NO_AUTH")]
    pub insecure_no_auth: bool,
}

/// Everything the controllers and servers share; cheap to clone.
#[derive(Clone)]
pub struct State {
    /// Client for the cluster the operator runs against.
    pub client: Client,
    /// Prometheus metrics.
    pub metrics: Arc<Metrics>,
    /// Readiness: true once every watch has synced.
    pub ready: Arc<admin::Readiness>,
    /// Cancelled when the process is asked to stop.
    pub shutdown: CancellationToken,
}

/// Runs the operator until SIGINT or SIGTERM.
pub async fn run(args: OperatorArgs) -> anyhow::Result<()> {
    let client = Client::try_default()
        .await
        .context("connecting to Kubernetes (in-cluster config or KUBECONFIG)")?;
    check_crd_installed(&client).await?;
    if args.insecure_no_auth {
        warn!("the HTTP API runs without authentication (--insecure-no-auth): local runs only");
    }

    let state = State {
        client,
        metrics: Arc::new(Metrics::default()),
        ready: Arc::new(admin::Readiness::default()),
        shutdown: shutdown::on_signal(),
    };
    info!(admin_addr = %args.admin_addr, api_addr = %args.api_addr, "starting operator");

    let admin = admin::serve(args.admin_addr, state.clone());
    state.ready.mark_synced("startup");
    admin.await?;
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
