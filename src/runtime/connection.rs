//! The operator's connection to the API server: HTTP/2 when the server offers it (ALPN), so
//! one TLS connection carries every watch and request. A drain's fresh reads then go out at
//! once on a connection the watches keep alive, instead of each waiting for a pooled HTTP/1.1
//! connection, or for a new one (TCP and TLS set-up) after a quiet spell let the idle ones
//! expire. Servers without HTTP/2, and `--http2=false`, get HTTP/1.1.
//!
//! The stack is kube's default one otherwise: server address, credentials (refreshed tokens,
//! client certificates, exec plugins), extra headers, connect/read/write timeouts, and retries
//! of 429/503/504 unless the configuration turns them off. Below the retries, every attempt is
//! counted and timed by verb and status code ([`super::requests`]). Nothing here upgrades
//! connections (no exec, attach or port forwarding), the one thing HTTP/2 would break.

use std::time::Duration;

use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::retry::RetryPolicy;
use kube::client::{Body, ConfigExt};
use kube::{Client, Config};
use tower::retry::RetryLayer;
use tower::{BoxError, ServiceBuilder};

use super::requests::RequestMetrics;

/// Interval of HTTP/2 PINGs: a connection that stops answering is noticed and replaced
/// within two of them, watches included.
const KEEP_ALIVE: Duration = Duration::from_secs(30);

/// HTTP/2 flow-control windows: how much one response (a page of a LIST) and all of them
/// together may send before the operator has read it. The protocol's 64 KiB default would make
/// the initial lists of a large cluster wait for window updates on the shared connection.
const STREAM_WINDOW: u32 = 4 << 20;
const CONNECTION_WINDOW: u32 = 16 << 20;

/// Builds the client for `config`, offering HTTP/2 unless `http2` is false, recording each
/// request in `requests`; fails only on bad credentials or TLS material.
pub fn build(
    config: Config,
    http2: bool,
    requests: &RequestMetrics,
) -> Result<Client, kube::Error> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let tls = config.rustls_client_config()?;
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    let https = match config.tls_server_name.as_deref() {
        Some(name) => https.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(
            name.to_owned()
                .try_into()
                .map_err(|e| kube::Error::Service(Box::new(e)))?,
        )),
        None => https,
    }
    .enable_http1();
    let https = if http2 {
        https.enable_http2().wrap_connector(http)
    } else {
        https.wrap_connector(http)
    };
    // A stalled connection fails after the configured read timeout; over HTTP/2 the PINGs
    // below are answered well within it, so only a dead connection reaches it.
    let mut timed = hyper_timeout::TimeoutConnector::new(https);
    timed.set_connect_timeout(config.connect_timeout);
    timed.set_read_timeout(config.read_timeout);
    timed.set_write_timeout(config.write_timeout);

    let hyper = HyperClient::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .http2_keep_alive_interval(KEEP_ALIVE)
        .http2_keep_alive_timeout(KEEP_ALIVE)
        .http2_keep_alive_while_idle(true)
        .http2_initial_stream_window_size(STREAM_WINDOW)
        .http2_initial_connection_window_size(CONNECTION_WINDOW)
        .build::<_, Body>(timed);

    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| RetryLayer::new(RetryPolicy::server_retry())),
        )
        .layer(requests.layer(config.cluster_url.path()))
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(hyper);
    Ok(Client::new(service, config.default_namespace))
}

/// The HTTP version the API server answers `GET /version` with: `HTTP/2.0` when the
/// connection negotiated it.
pub async fn protocol(client: &Client) -> Result<http::Version, kube::Error> {
    let request = http::Request::get("/version")
        .body(Body::empty())
        .map_err(kube::Error::HttpError)?;
    Ok(client.send(request).await?.version())
}
