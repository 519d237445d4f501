//! The API's HTTP/1 server, with the limits that keep a flood of connections from taking the
//! process down: at most `--max-connections` open at once (further clients wait in the
//! listen queue of the kernel, as Go's `netutil.LimitListener` makes them), and a connection
//! whose request headers are not complete `--header-read-timeout` after it opened, or after
//! its previous answer, is closed (a slowloris client, or one that connects and sends nothing).
//! One client address holds at most `--max-connections-per-address` of them
//! ([`AddressSlots`]); a connection beyond that is answered 429 at once and closed.
//!
//! Hand-written on hyper rather than `axum::serve`, which sets neither: its connections wait for
//! their first bytes without a deadline.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;
use tracing::{debug, warn};

use super::ApiMetrics;
use super::address_slots::AddressSlots;

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
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let addresses = AddressSlots::new(limits.per_address);
    metrics.connection_limit.set(limits.max_connections as i64);
    let mut builder = auto::Builder::new(TokioExecutor::new()).http1_only();
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let builder = Arc::new(builder);
    let mut connections = JoinSet::new();
    loop {
        // A slot first: at the limit, clients stay in the listen queue instead of being
        // accepted and costing a file descriptor and a task each.
        let slot = tokio::select! {
            () = shutdown.cancelled() => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
        };
        let accepted = loop {
            tokio::select! {
                () = shutdown.cancelled() => break None,
                Some(_) = connections.join_next(), if !connections.is_empty() => continue,
                accepted = listener.accept() => match accepted {
                    Ok(pair) => break Some(pair),
                    Err(err) => {
                        // Out of file descriptors and the like: back off instead of spinning.
                        warn!(error = %err, "accepting an API connection");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
            }
        };
        let Some((tcp, peer)) = accepted else {
            break;
        };
        let _ = tcp.set_nodelay(true);
        let Some(address_slot) = addresses.try_acquire(peer.ip()) else {
            metrics.connections_refused_per_address.inc();
            debug!(%peer, "API connection refused: its address holds its share of connections");
            connections.spawn(async move {
                refuse(tcp).await;
                drop(slot);
            });
            continue;
        };
        let (router, builder, metrics) = (router.clone(), builder.clone(), metrics.clone());
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            metrics.connections.inc();
            connection(&builder, tcp, peer, router, &metrics, shutdown).await;
            metrics.connections.dec();
            drop((address_slot, slot));
        });
    }
    drop(listener);
    crate::runtime::shutdown::drain_connections(connections, "API").await;
}

/// One client connection: HTTP/1 until the client leaves, its headers are late, or the process
/// stops (then it closes after the request in flight).
async fn connection(
    builder: &auto::Builder<TokioExecutor>,
    tcp: tokio::net::TcpStream,
    peer: SocketAddr,
    router: Router,
    metrics: &ApiMetrics,
    shutdown: CancellationToken,
) {
    let service = router.map_request(move |mut request: axum::extract::Request<_>| {
        request.extensions_mut().insert(ConnectInfo(peer));
        request
    });
    let conn = builder.serve_connection(TokioIo::new(tcp), TowerToHyperService::new(service));
    let mut conn = std::pin::pin!(conn);
    let mut closing = false;
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(err) = result {
                    if is_header_timeout(err.as_ref()) {
                        metrics.header_read_timeouts.inc();
                        debug!(%peer, "API connection closed: request headers not received in time");
                    } else {
                        debug!(%peer, error = %err, "API connection ended with an error");
                    }
                }
                return;
            }
            () = shutdown.cancelled(), if !closing => {
                closing = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
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
