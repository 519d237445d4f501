//! The API's HTTP/1 server, with the limits that keep a flood of connections from taking the
//! process down: at most `--max-connections` open at once (further clients wait in the
//! listen queue of the kernel, as Go's `netutil.LimitListener` makes them), and a connection
//! whose request headers are not complete `--header-read-timeout` after it opened, or after
//! its previous answer, is closed (a slowloris client, or one that connects and sends nothing).
//! One client address holds at most `--max-connections-per-address` of them
//! ([`AddressSlots`]); a connection beyond that is answered 429 at once and closed.
//!
//! The accept loop and the connections are the operator's one HTTP server
//! ([`crate::runtime::http_server`]), shared with the eviction webhook.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::ApiMetrics;
use super::address_slots::AddressSlots;
use crate::runtime::http_server::{self, Accepted};

/// The connection limits of the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Connections served at once; further ones wait to be accepted.
    pub max_connections: usize,
    /// Time a client has to send a request's headers, from when the connection opened or
    /// answered its previous request.
    pub header_read_timeout: Duration,
    /// Connections one client address may have open at once.
    pub per_address: usize,
}

/// The problem body a connection over its address's share is answered with.
const TOO_MANY_FROM_ADDRESS: &str = r#"{"type":"https://disruption-guard.io/problems/too-many-connections","title":"Too many connections","status":429,"detail":"this client address has --max-connections-per-address connections open already; close some, or raise the limit"}"#;

/// The whole HTTP response with [`TOO_MANY_FROM_ADDRESS`].
fn too_many_from_address() -> String {
    format!(
        "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/problem+json\r\n\
         connection: close\r\nretry-after: 1\r\ncontent-length: {}\r\n\r\n{TOO_MANY_FROM_ADDRESS}",
        TOO_MANY_FROM_ADDRESS.len()
    )
}

/// Serves `router` on `listener` within `limits` until `shutdown`; requests in flight then get
/// [`CONNECTION_DRAIN`](crate::runtime::shutdown::CONNECTION_DRAIN) to finish.
pub async fn serve_on(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    metrics: Arc<ApiMetrics>,
    shutdown: CancellationToken,
) {
    let addresses = AddressSlots::new(limits.per_address);
    metrics.connection_limit.set(limits.max_connections as i64);
    let mut builder = auto::Builder::new(TokioExecutor::new()).http1_only();
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let builder = Arc::new(builder);
    let cap = Some(limits.max_connections);
    http_server::accept(listener, cap, shutdown.clone(), "API", move |accepted| {
        let address_slot = addresses.try_acquire(accepted.peer.ip());
        let (router, builder, metrics) = (router.clone(), builder.clone(), metrics.clone());
        let shutdown = shutdown.clone();
        async move {
            let Accepted { tcp, peer, slot } = accepted;
            let Some(address_slot) = address_slot else {
                metrics.connections_refused_per_address.inc();
                debug!(%peer, "API connection refused: its address holds its share of connections");
                refuse(tcp).await;
                drop(slot);
                return;
            };
            metrics.connections.inc();
            let served = http_server::serve_connection(
                &builder,
                tcp,
                peer,
                router,
                shutdown.cancelled_owned(),
            )
            .await;
            if let Err(err) = served {
                if is_header_timeout(err.as_ref()) {
                    metrics.header_read_timeouts.inc();
                    debug!(%peer, "API connection closed: request headers not received in time");
                } else {
                    debug!(%peer, error = %err, "API connection ended with an error");
                }
            }
            metrics.connections.dec();
            drop((address_slot, slot));
        }
    })
    .await;
}

/// Answers a connection over its address's share with a 429 problem, within a second, and
/// closes it.
async fn refuse(mut tcp: tokio::net::TcpStream) {
    use tokio::io::AsyncWriteExt as _;
    let write = async {
        tcp.write_all(too_many_from_address().as_bytes()).await?;
        tcp.shutdown().await
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), write).await;
}

/// Whether hyper closed the connection because the request headers came too late.
fn is_header_timeout(err: &(dyn std::error::Error + 'static)) -> bool {
    err.downcast_ref::<hyper::Error>()
        .is_some_and(hyper::Error::is_timeout)
}

#[cfg(test)]
mod tests {
    use super::too_many_from_address;

    #[test]
    fn the_refusal_is_a_whole_http_response_with_a_problem_body() {
        let response = too_many_from_address();
        let (head, body) = response.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 429 "), "{head}");
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(length, body.len());
        let problem: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(problem["status"], 429);
    }
}
