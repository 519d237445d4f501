//! A port served within connection limits, the one way the API and the eviction webhook serve:
//! at most [`ConnectionLimits::max_connections`] open at once (further clients wait in the
//! kernel's listen queue, as Go's `netutil.LimitListener` makes them), at most
//! [`ConnectionLimits::per_address`] of them from one client address ([`AddressSlots`]; one
//! more is answered with the port's refusal, if any, and closed before anything else is read
//! from it), HTTP/1 request headers within [`ConnectionLimits::header_read_timeout`] of the
//! connection opening or of its previous answer (a slowloris client, or one that connects and
//! sends nothing), and, when the port speaks HTTP/2, keep-alive pings and a connection with no
//! request in flight for [`ConnectionLimits::idle_timeout`] closed with a GOAWAY.
//!
//! What differs between the ports is handed in: the transport of a connection (plain TCP, or a
//! TLS handshake), when open connections should close (shutdown, a new certificate), the
//! refusal, and where the events are counted ([`ConnectionEvents`]: each port's own metrics).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::address_slots::AddressSlots;
use super::http_server::{self, Accepted, Ended};

/// Interval of the HTTP/2 keep-alive pings, and how long a ping may go unanswered before the
/// connection is closed: a peer that vanished without a FIN does not hold a slot for long.
pub const KEEP_ALIVE: Duration = Duration::from_secs(20);

/// The connection limits of a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Connections served at once; further ones wait to be accepted.
    pub max_connections: usize,
    /// Connections one client address may have open at once.
    pub per_address: usize,
    /// Time a client has to send an HTTP/1 request's headers, from when the connection opened
    /// or answered its previous request.
    pub header_read_timeout: Duration,
    /// A connection with no request in flight for this long is closed (`None`: only the
    /// header-read timeout bounds an idle HTTP/1 connection).
    pub idle_timeout: Option<Duration>,
}

/// Which HTTP versions a port speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocols {
    Http1,
    Http1And2,
}

/// What every port counts of its connections, in its own metrics' names.
#[derive(Debug, Default, Clone)]
pub struct ConnectionCounts {
    /// Connections served now (each after its address's share was checked).
    pub open: Gauge,
    /// Connections refused: their address held its share.
    pub refused_per_address: Counter,
}

/// What a port counts of its connections.
pub trait ConnectionEvents: Send + Sync + 'static {
    /// The counts every port keeps.
    fn counts(&self) -> &ConnectionCounts;
    /// A connection was closed because its request headers did not arrive in time, or it had
    /// no request in flight for the idle timeout.
    fn timed_out(&self, ended: Timeout);
}

/// Which timeout closed a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timeout {
    HeaderRead,
    Idle,
}

/// A port: its name in logs, its limits and protocols, what a connection over its address's
/// share is answered before it is closed (nothing: closed at once), and its counters.
pub struct Port<E: ConnectionEvents> {
    pub name: &'static str,
    pub limits: ConnectionLimits,
    pub protocols: Protocols,
    pub refusal: Option<Arc<[u8]>>,
    pub events: Arc<E>,
}

/// The HTTP server of a connection, configured with `limits` for `protocols`.
pub fn builder(limits: &ConnectionLimits, protocols: Protocols) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    match protocols {
        Protocols::Http1 => builder.http1_only(),
        Protocols::Http1And2 => {
            builder
                .http2()
                .timer(TokioTimer::new())
                .keep_alive_interval(KEEP_ALIVE)
                .keep_alive_timeout(KEEP_ALIVE);
            builder
        }
    }
}

/// Serves `router` on `listener` within `port`'s limits until `shutdown`; requests in flight
/// then get [`CONNECTION_DRAIN`](super::shutdown::CONNECTION_DRAIN) to finish. Each connection
/// is carried by `transport` (`None`: it failed, closed), and closes gracefully when the
/// future `close` made for it when it was accepted resolves.
pub async fn serve<E, T, TF, IO, C, CF>(
    listener: TcpListener,
    router: Router,
    port: Port<E>,
    shutdown: CancellationToken,
    transport: T,
    close: C,
) where
    E: ConnectionEvents,
    T: Fn(TcpStream, SocketAddr) -> TF + Clone + Send + 'static,
    TF: Future<Output = Option<IO>> + Send,
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    C: Fn() -> CF,
    CF: Future<Output = ()> + Send + 'static,
{
    let Port {
        name,
        limits,
        protocols,
        refusal,
        events,
    } = port;
    let addresses = AddressSlots::new(limits.per_address);
    let builder = Arc::new(builder(&limits, protocols));
    let cap = Some(limits.max_connections);
    http_server::accept(listener, cap, shutdown, name, move |accepted| {
        let address_slot = addresses.try_acquire(accepted.peer.ip());
        let (router, builder, events) = (router.clone(), builder.clone(), events.clone());
        let (transport, refusal, close) = (transport.clone(), refusal.clone(), close());
        async move {
            let Accepted { tcp, peer, slot } = accepted;
            let Some(address_slot) = address_slot else {
                events.counts().refused_per_address.inc();
                debug!(server = name, %peer, "connection refused: its address holds its share of connections");
                refuse(tcp, refusal.as_deref()).await;
                drop(slot);
                return;
            };
            if let Some(io) = transport(tcp, peer).await {
                events.counts().open.inc();
                let served = http_server::serve_connection(
                    &builder,
                    io,
                    peer,
                    router,
                    close,
                    limits.idle_timeout,
                )
                .await;
                match served {
                    Ok(Ended::Idle) => {
                        events.timed_out(Timeout::Idle);
                        debug!(server = name, %peer, "connection closed: idle");
                    }
                    Ok(_) => {}
                    Err(err) if is_header_timeout(err.as_ref()) => {
                        events.timed_out(Timeout::HeaderRead);
                        debug!(server = name, %peer, "connection closed: request headers not received in time");
                    }
                    Err(err) => {
                        debug!(server = name, %peer, error = %err, "connection ended with an error");
                    }
                }
                events.counts().open.dec();
            }
            drop((address_slot, slot));
        }
    })
    .await;
}

/// Writes `refusal` (within a second) to a connection over its address's share, and closes it.
async fn refuse(mut tcp: TcpStream, refusal: Option<&[u8]>) {
    use tokio::io::AsyncWriteExt as _;
    let write = async {
        if let Some(refusal) = refusal {
            tcp.write_all(refusal).await?;
        }
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
#[path = "limited_server_tests.rs"]
mod tests;
