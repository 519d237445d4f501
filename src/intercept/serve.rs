//! Starting the webhook as the operator runs it: bind the HTTPS port, make sure the serving
//! certificate exists ([`certs`]; or read it from a Secret cert-manager keeps, with
//! `--intercept-external-certificate`), publish its CA in the registration the chart installed
//! (or, with `--intercept-create-webhook`, apply the whole registration: [`registration`]),
//! then serve the router ([`tls`]) and keep the certificate and registration current, and read the
//! registration back for the `intercept_registered` gauge ([`health`](super::health)).
//!
//! In a cluster the API server reaches the webhook through the operator's Service; outside one
//! (`make run` against the local test cluster) through a loopback URL on the port actually
//! bound, so `--intercept-port 0` works for several operators on one host.
//!
//! Nothing here may stop the rest of the operator: when the certificate or the registration
//! cannot be written (RBAC, an API server that is down), it says why and tries again every
//! [`RETRY`]; meanwhile the registration, if any, fails open.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use tokio::net::TcpListener;
use tracing::{info, warn};

use super::certs::CertSecret;
use super::registration::{self, Endpoint, Registration, Upkeep};
use super::tls;
use super::{InterceptArgs, InterceptMetrics};
use crate::runtime::Runtime;

/// Wait between attempts to set the certificate and registration up.
const RETRY: Duration = Duration::from_secs(10);

/// Serves `router` as the eviction webhook until shutdown.
pub async fn serve(
    runtime: Runtime,
    args: InterceptArgs,
    router: Router,
    metrics: std::sync::Arc<InterceptMetrics>,
) -> anyhow::Result<()> {
    let health = metrics.health.clone();
    let in_cluster = registration::in_cluster();
    let ip = if in_cluster {
        Ipv4Addr::UNSPECIFIED
    } else {
        Ipv4Addr::LOCALHOST
    };
    let addr = SocketAddr::from((ip, args.intercept_port));
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the eviction webhook address {addr}"))?;
    let port = listener.local_addr()?.port();
    let endpoint = if in_cluster {
        Endpoint::Service {
            namespace: args.intercept_namespace.clone(),
            name: args.intercept_service.clone(),
            port: args.intercept_service_port,
        }
    } else {
        Endpoint::Loopback { port }
    };
    let mut secret = CertSecret::for_service(
        &args.intercept_namespace,
        &args.intercept_secret,
        &args.intercept_service,
    );
    if args.intercept_external_certificate {
        secret = secret.kept_elsewhere();
    }
    let shutdown = runtime.shutdown.clone();
    let (registration, secret, resolver, bundle) = loop {
        match set_up(&runtime, &args, endpoint.clone(), &secret).await {
            Ok(ready) => break ready,
            Err(err) => {
                warn!(error = format!("{err:#}"), retry_in = ?RETRY, "eviction webhook not set up yet; evictions go through untouched meanwhile");
                tokio::select! {
                    () = shutdown.cancelled() => return Ok(()),
                    () = tokio::time::sleep(RETRY) => {}
                }
            }
        }
    };
    health.attach(
        resolver.clone(),
        endpoint.clone(),
        registration.name().to_string(),
    );
    let limits = args.connection_limits();
    info!(
        port, webhook = %registration.name(), ?endpoint,
        max_connections = limits.max_connections,
        max_connections_per_address = limits.per_address,
        header_read_timeout = ?limits.header_read_timeout,
        idle_timeout = ?limits.idle_timeout,
        "eviction webhook registered and serving"
    );
    tokio::join!(
        health.watch(runtime.client.clone(), shutdown.clone()),
        tls::serve_on(
            listener,
            router,
            resolver.clone(),
            args.connection_limits(),
            metrics.clone(),
            shutdown.clone(),
        ),
        tls::keep_current(
            runtime.client.clone(),
            secret,
            Some(registration),
            resolver,
            bundle,
            tls::DEFAULT_REFRESH,
            shutdown.clone(),
        ),
    );
    Ok(())
}

/// How the registration is kept, the Secret (owned by the registration the chart installed),
/// and the certificate the registration trusts, loaded and published.
async fn set_up(
    runtime: &Runtime,
    args: &InterceptArgs,
    endpoint: Endpoint,
    secret: &CertSecret,
) -> anyhow::Result<(
    Upkeep,
    CertSecret,
    std::sync::Arc<tls::CertResolver>,
    super::certs::Bundle,
)> {
    let upkeep = if args.intercept_create_webhook {
        let me = registration::own_username(&runtime.client)
            .await
            .context("asking the API server who the operator is (SelfSubjectReview)")?;
        let exempt = registration::exempt_user(me.as_deref()).map(str::to_string);
        let mut registration = Registration::new(endpoint, exempt, runtime.namespaces.to_vec());
        registration.name = args.intercept_webhook.clone();
        registration.namespace_selector = args
            .intercept_namespace_selector
            .clone()
            .unwrap_or_default();
        Upkeep::Whole(registration)
    } else {
        Upkeep::CaBundle {
            name: args.intercept_webhook.clone(),
        }
    };
    let secret = match &upkeep {
        // Its own registration is not the chart's: the Secret is left for whoever runs it.
        Upkeep::Whole(_) => secret.clone(),
        Upkeep::CaBundle { name } => {
            let owner = upkeep
                .owner(&runtime.client)
                .await
                .with_context(|| format!("reading the webhook registration {name}"))?;
            anyhow::ensure!(
                owner.is_some(),
                "the webhook registration {name} does not exist: the chart installs it \
                 (or run with --intercept-create-webhook and an admin kubeconfig)"
            );
            secret.clone().owned_by(owner)
        }
    };
    let (resolver, bundle) = tls::load(&runtime.client, &secret, Some(&upkeep)).await?;
    Ok((upkeep, secret, resolver, bundle))
}
