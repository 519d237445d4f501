//! The one way the operator serves HTTP, for the API and the eviction webhook alike: an accept
//! loop with an optional cap on open connections, each connection an axum router served by
//! hyper (the client's address as `ConnectInfo<SocketAddr>`), optional TLS with a bounded
//! handshake, and a graceful drain at shutdown.
//!
//! - [`accept`]: accepts until shutdown (holding a slot of the cap first, so that at the cap
//!   clients wait in the kernel's listen queue, as Go's `netutil.LimitListener` makes them),
//!   hands each connection to the caller, then drains them for
//!   [`CONNECTION_DRAIN`](super::shutdown::CONNECTION_DRAIN);
//! - [`handshake`]: the TLS handshake of a connection, bounded in time;
//! - [`serve_connection`]: HTTP on one connection until the client leaves, or until `close`
//!   resolves or no request has been in flight for the idle timeout: then it closes after the
//!   request in flight (HTTP/1.1 `Connection: close`, HTTP/2 GOAWAY), within
//!   [`CONNECTION_DRAIN`](super::shutdown::CONNECTION_DRAIN).
//!
//! The limits a port is served within (the cap, the per-address share, the timeouts) are put
//! together in [`limited_server`](super::limited_server). Hand-written on hyper rather than
//! `axum::serve`, which has neither a connection cap nor a header-read timeout: its connections
//! wait for their first bytes without a deadline.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;
use tracing::{debug, warn};

/// One accepted connection, with the slot of the cap it holds (dropped when it is).
pub struct Accepted {
    pub tcp: TcpStream,
    pub peer: SocketAddr,
    pub slot: Option<OwnedSemaphorePermit>,
}

/// Accepts connections on `listener` until `shutdown`, at most `max_connections` open at once
/// (`None`: no cap), and runs `handle` for each on a task of its own; then stops accepting
/// and lets the connections finish their requests. `server` names it in logs.
pub async fn accept<F, Fut>(
    listener: TcpListener,
    max_connections: Option<usize>,
    shutdown: CancellationToken,
    server: &'static str,
    mut handle: F,
) where
    F: FnMut(Accepted) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let slots = max_connections.map(|n| Arc::new(Semaphore::new(n)));
    let mut connections = JoinSet::new();
    loop {
        // A slot first: at the cap, clients stay in the listen queue instead of being
        // accepted and costing a file descriptor and a task each.
        let slot = match &slots {
            Some(slots) => tokio::select! {
                () = shutdown.cancelled() => break,
                Some(_) = connections.join_next(), if !connections.is_empty() => continue,
                slot = slots.clone().acquire_owned() => Some(slot.expect("the semaphore is never closed")),
            },
            None => None,
        };
        let accepted = loop {
            tokio::select! {
                () = shutdown.cancelled() => break None,
                Some(_) = connections.join_next(), if !connections.is_empty() => continue,
                accepted = listener.accept() => match accepted {
                    Ok(pair) => break Some(pair),
                    Err(err) => {
                        // Out of file descriptors and the like: back off instead of spinning.
                        warn!(server, error = %err, "accepting a connection");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
            }
        };
        let Some((tcp, peer)) = accepted else {
            break;
        };
        let _ = tcp.set_nodelay(true);
        connections.spawn(handle(Accepted { tcp, peer, slot }));
    }
    drop(listener);
    super::shutdown::drain_connections(connections, server).await;
}

/// The TLS handshake of `tcp` with `acceptor`, within `timeout`; `None` (logged at debug)
/// when it fails or takes longer.
pub async fn handshake(
    acceptor: &TlsAcceptor,
    tcp: TcpStream,
    peer: SocketAddr,
    timeout: Duration,
) -> Option<TlsStream<TcpStream>> {
    match tokio::time::timeout(timeout, acceptor.accept(tcp)).await {
        Ok(Ok(tls)) => Some(tls),
        Ok(Err(err)) => {
            debug!(%peer, error = %err, "TLS handshake failed");
            None
        }
        Err(_) => {
            debug!(%peer, "TLS handshake timed out");
            None
        }
    }
}

/// Why [`serve_connection`] ended without an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The client closed it, or hyper did (a request that asked to close, a timeout).
    Left,
    /// It was asked to close (`close` resolved).
    Closed,
    /// No request was in flight for the idle timeout.
    Idle,
}

/// Serves `router` on one connection `io` from `peer` with `builder` until the client leaves
/// or the connection fails (the error is returned). It is closed gracefully once `close`
/// resolves, or once no request has been in flight for `idle` (when given: what bounds an
/// HTTP/2 connection, or one still sending its first bytes, that the HTTP/1 header-read
/// timeout does not); a connection asked to close is dropped if it has not finished within
/// [`CONNECTION_DRAIN`](super::shutdown::CONNECTION_DRAIN).
pub async fn serve_connection<I>(
    builder: &auto::Builder<TokioExecutor>,
    io: I,
    peer: SocketAddr,
    router: Router,
    close: impl Future<Output = ()>,
    idle: Option<Duration>,
) -> Result<Ended, Box<dyn std::error::Error + Send + Sync>>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let activity = Arc::new(Activity::new());
    let tracker = activity.clone();
    let service = tower::service_fn(move |mut request: axum::extract::Request<Incoming>| {
        request.extensions_mut().insert(ConnectInfo(peer));
        let busy = tracker.begin();
        let router = router.clone();
        async move {
            let response = router.oneshot(request).await;
            drop(busy);
            response
        }
    });
    let conn = builder.serve_connection(TokioIo::new(io), TowerToHyperService::new(service));
    let mut conn = std::pin::pin!(conn);
    let mut close = std::pin::pin!(close);
    let idle = async {
        match idle {
            Some(idle) => activity.idle_for(idle).await,
            None => std::future::pending().await,
        }
    };
    let mut idle = std::pin::pin!(idle);
    let grace = tokio::time::sleep(Duration::from_secs(86_400));
    let mut grace = std::pin::pin!(grace);
    let mut ended = Ended::Left;
    loop {
        let why = tokio::select! {
            // An error once it was asked to close (a connection cut before its first request)
            // is the close itself.
            result = conn.as_mut() => return match ended {
                Ended::Left => result.map(|()| ended),
                asked => Ok(asked),
            },
            () = &mut close, if ended == Ended::Left => Ended::Closed,
            () = &mut idle, if ended == Ended::Left => Ended::Idle,
            () = &mut grace, if ended != Ended::Left => {
                debug!(%peer, "connection dropped: it did not finish closing in time");
                return Ok(ended);
            }
        };
        ended = why;
        conn.as_mut().graceful_shutdown();
        grace
            .as_mut()
            .reset(tokio::time::Instant::now() + super::shutdown::CONNECTION_DRAIN);
    }
}

/// The requests in flight on one connection, and when the last one ended.
struct Activity {
    in_flight: AtomicUsize,
    last: Mutex<tokio::time::Instant>,
}

/// One request in flight; ends on drop.
struct Busy(Arc<Activity>);

impl Activity {
    fn new() -> Self {
        Activity {
            in_flight: AtomicUsize::new(0),
            last: Mutex::new(tokio::time::Instant::now()),
        }
    }

    fn begin(self: &Arc<Self>) -> Busy {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        Busy(self.clone())
    }

    fn last(&self) -> tokio::time::Instant {
        *self.last.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Resolves once no request has been in flight for `idle`.
    async fn idle_for(&self, idle: Duration) {
        loop {
            tokio::time::sleep_until(self.last() + idle).await;
            if self.in_flight.load(Ordering::Acquire) > 0 {
                // The end of the request moves `last`; look again an idle time later.
                tokio::time::sleep(idle).await;
            } else if self.last().elapsed() >= idle {
                return;
            }
        }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        *self.0.last.lock().unwrap_or_else(|e| e.into_inner()) = tokio::time::Instant::now();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use axum::routing::get;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    async fn request(addr: SocketAddr) -> String {
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        tcp.write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = String::new();
        tcp.read_to_string(&mut out).await.unwrap();
        out
    }

    /// A server with a cap of one: a second client waits until the first is done, and
    /// shutdown ends the loop after the connections drained.
    #[tokio::test]
    async fn connections_are_served_within_the_cap_and_drained_at_shutdown() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let router = Router::new().route(
            "/",
            get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move { peer.ip().to_string() }),
        );
        let builder = Arc::new(auto::Builder::new(TokioExecutor::new()));
        let stop = shutdown.clone();
        let server = tokio::spawn(accept(
            listener,
            Some(1),
            shutdown.clone(),
            "test",
            move |accepted| {
                let (router, builder, shutdown) = (router.clone(), builder.clone(), stop.clone());
                async move {
                    let _ = serve_connection(
                        &builder,
                        accepted.tcp,
                        accepted.peer,
                        router,
                        shutdown.cancelled_owned(),
                        None,
                    )
                    .await;
                    drop(accepted.slot);
                }
            },
        ));
        let (a, b) = tokio::join!(request(addr), request(addr));
        for answer in [a, b] {
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
            assert!(answer.ends_with("127.0.0.1"), "{answer}");
        }
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("the loop ends at shutdown")
            .unwrap();
    }
}
