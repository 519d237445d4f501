//! Starting the HTTP API: its authentication, limits and state from the flags, then the server
//! until shutdown.

use std::sync::Arc;

use anyhow::Context as _;
use tracing::{info, warn};

use super::{
    ApiArgs, ApiMetrics, ApiState, DEFAULT_TOKEN_AUDIENCE, auth, oidc, ratelimit, router,
    static_tokens, waits,
};
use crate::operations::daemon_sets::DaemonSetPolicy;
use crate::operations::{ttl, windows};
use crate::runtime::Runtime;

/// Serves the HTTP API until shutdown. `max_ttl` is the longest a window may stay open (the
/// window controller's `--max-ttl`: one limit for both); `daemon_sets` says who may open
/// windows with `protect.daemonSets` (the controller's `--allow-daemon-sets-for`).
pub async fn serve(
    runtime: Runtime,
    args: ApiArgs,
    max_ttl: std::time::Duration,
    daemon_sets: DaemonSetPolicy,
    metrics: Arc<ApiMetrics>,
) -> anyhow::Result<()> {
    let state = &runtime;
    let checked = args.checked(max_ttl).map_err(anyhow::Error::msg)?;
    let audience = checked.audience;
    let auth = Arc::new(auth::Authenticator::new(
        state.client.clone(),
        audience.clone(),
        args.insecure_no_auth,
    ));
    if args.insecure_no_auth {
        warn!(
            "--insecure-no-auth: the HTTP API accepts every request without credentials; use it for local runs only"
        );
    }
    // Held until the API stops: dropping them stops the CITrust watches.
    let _trust_watches = if args.oidc_issuers.is_empty() || args.insecure_no_auth {
        None
    } else {
        let issuers = checked.issuers;
        let settings = oidc::Settings {
            issuers,
            audience: audience.clone(),
            max_token_lifetime: args.oidc_max_token_lifetime,
            keys_max_age: args.oidc_keys_max_age,
            metrics: metrics.clone(),
        };
        let (trusts, forbidden, tasks) =
            crate::runtime::caches::ci_trusts(&state.client, &state.ready, state.watch_scope());
        let verifier = Arc::new(oidc::Verifier::new(
            settings,
            oidc::TrustCache {
                trusts,
                forbidden,
                refusals: Arc::new(oidc::refusals::Refusals::new(Some(
                    crate::runtime::events::Events::new(state),
                ))),
            },
        )?);
        verifier.start_refresh(state.shutdown.clone());
        auth.set_oidc(verifier);
        if audience == DEFAULT_TOKEN_AUDIENCE {
            warn!(
                audience = DEFAULT_TOKEN_AUDIENCE,
                "--token-audience names the shared default, the same for every install: an \
                 id-token minted for another install's guard is accepted here too; give this \
                 install an audience of its own (--cluster-name; the chart: clusterName)"
            );
        }
        info!(issuers = ?args.oidc_issuers, %audience, max_token_lifetime = ?args.oidc_max_token_lifetime, "CI id-tokens of these issuers are verified by the API");
        Some(tasks)
    };
    let source = match (&args.static_tokens_secret, &args.static_tokens_file) {
        (Some(s), _) => Some(s.clone()),
        (None, Some(path)) => Some(static_tokens::Source::File(path.clone())),
        (None, None) => None,
    };
    if let Some(source) = source {
        let install = {
            let auth = auth.clone();
            move |tokens| auth.set_static_tokens(tokens)
        };
        static_tokens::start(
            source,
            state.client.clone(),
            install,
            metrics.clone(),
            state.shutdown.clone(),
        )
        .await
        .context("loading static tokens")?;
    }
    let api_state = ApiState {
        windows: windows::Windows::new(
            state.client.clone(),
            ttl::TtlLimits {
                default: args.default_ttl,
                max: max_ttl,
            },
        )
        .with_daemon_sets(daemon_sets),
        auth,
        limiter: Arc::new(ratelimit::RateLimiter::new(
            args.rate_limit,
            args.rate_burst,
        )),
        trusted_proxies: Arc::new(args.trusted_proxies.clone()),
        waits: waits::WaitLimiter::new(args.max_waits_per_identity as usize),
        metrics: metrics.clone(),
        max_body_bytes: args.max_body_bytes,
        body_read_timeout: args.body_read_timeout,
        runtime: runtime.clone(),
    };
    let addr = args.api_addr;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the API address {addr}"))?;
    let open_files = crate::runtime::open_files::raise_soft_limit();
    let limits = super::serve::ConnectionLimits {
        max_connections: crate::runtime::open_files::connections_within(
            args.max_connections as usize,
            open_files,
        ),
        header_read_timeout: args.header_read_timeout,
        per_address: args.max_connections_per_address as usize,
        idle_timeout: None,
    };
    if limits.max_connections < args.max_connections as usize {
        warn!(
            max_connections = limits.max_connections,
            open_files_limit = open_files,
            "--max-connections lowered to what the limit of open files leaves"
        );
    }
    info!(
        addr = %listener.local_addr()?,
        auth = !args.insecure_no_auth,
        max_connections = limits.max_connections,
        header_read_timeout = ?limits.header_read_timeout,
        max_connections_per_address = limits.per_address,
        max_waits_per_identity = args.max_waits_per_identity,
        "HTTP API listening"
    );
    super::serve::serve_on(
        listener,
        router(api_state),
        limits,
        metrics,
        state.shutdown.clone(),
    )
    .await;
    Ok(())
}
