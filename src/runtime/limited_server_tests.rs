//! The limits of a port on real sockets: the per-address share, the idle timeout of an HTTP/2
//! connection and of one that never sends a byte.

use super::*;

use std::sync::Mutex;
use std::time::Instant;

use axum::routing::get;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// What the test port counted.
#[derive(Default)]
struct Counted {
    counts: ConnectionCounts,
    timeouts: Mutex<Vec<Timeout>>,
}

impl Counted {
    fn timed_out(&self, which: Timeout) -> usize {
        let timeouts = self.timeouts.lock().unwrap();
        timeouts.iter().filter(|t| **t == which).count()
    }
}

impl ConnectionEvents for Counted {
    fn counts(&self) -> &ConnectionCounts {
        &self.counts
    }
    fn timed_out(&self, ended: Timeout) {
        self.timeouts.lock().unwrap().push(ended);
    }
}

const IDLE: Duration = Duration::from_millis(400);

/// A plain-TCP port speaking HTTP/1 and HTTP/2 with `per_address` and [`IDLE`].
async fn start(per_address: usize) -> (SocketAddr, Arc<Counted>, CancellationToken) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let events = Arc::new(Counted::default());
    let shutdown = CancellationToken::new();
    let port = Port {
        name: "test",
        limits: ConnectionLimits {
            max_connections: 100,
            per_address,
            header_read_timeout: Duration::from_secs(30),
            idle_timeout: Some(IDLE),
        },
        protocols: Protocols::Http1And2,
        refusal: Some(Arc::from(&b"refused\n"[..])),
        events: events.clone(),
    };
    let router = Router::new().route("/", get(|| async { "ok" }));
    let stop = shutdown.clone();
    tokio::spawn(serve(
        listener,
        router,
        port,
        shutdown.clone(),
        |tcp, _| async move { Some(tcp) },
        move || stop.clone().cancelled_owned(),
    ));
    (addr, events, shutdown)
}

/// Reads until the server closes the connection; the bytes and how long it took.
async fn until_closed(tcp: &mut TcpStream, limit: Duration) -> (Vec<u8>, Duration) {
    let started = Instant::now();
    let mut out = Vec::new();
    tokio::time::timeout(limit, tcp.read_to_end(&mut out))
        .await
        .expect("the server closes the connection")
        .unwrap();
    (out, started.elapsed())
}

/// Waits (at most 5 s) until the port counted a connection closed by `which` timeout.
async fn until_timed_out(events: &Counted, which: Timeout) {
    tokio::time::timeout(Duration::from_secs(5), async {
        while events.timed_out(which) == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{which:?} timeout counted"));
}

#[tokio::test]
async fn one_address_over_its_share_is_refused_at_once_while_its_first_connection_is_served() {
    let (addr, events, shutdown) = start(1).await;
    let mut first = TcpStream::connect(addr).await.unwrap();
    first
        .write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut answer = [0u8; 12];
    first.read_exact(&mut answer).await.unwrap();
    assert_eq!(&answer, b"HTTP/1.1 200");
    let mut second = TcpStream::connect(addr).await.unwrap();
    let (refused, _) = until_closed(&mut second, Duration::from_secs(5)).await;
    assert_eq!(refused, b"refused\n");
    assert_eq!(events.counts.refused_per_address.get(), 1);
    assert_eq!(events.counts.open.get(), 1, "the first is still served");
    shutdown.cancel();
}

#[tokio::test]
async fn a_connection_that_sends_nothing_is_closed_after_the_idle_timeout() {
    let (addr, events, shutdown) = start(10).await;
    let mut silent = TcpStream::connect(addr).await.unwrap();
    let (bytes, took) = until_closed(&mut silent, Duration::from_secs(5)).await;
    assert!(bytes.is_empty(), "{bytes:?}");
    assert!(took >= IDLE - Duration::from_millis(50), "{took:?}");
    until_timed_out(&events, Timeout::Idle).await;
    shutdown.cancel();
}

#[tokio::test]
async fn an_idle_http2_connection_gets_a_goaway_after_the_idle_timeout() {
    let (addr, events, shutdown) = start(10).await;
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
    let started = Instant::now();
    let conn = tokio::spawn(conn);
    let request = http::Request::get(format!("http://{addr}/"))
        .body(String::new())
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    drop(response);
    tokio::time::timeout(Duration::from_secs(5), conn)
        .await
        .expect("the server closes an idle HTTP/2 connection")
        .unwrap()
        .unwrap();
    assert!(started.elapsed() >= IDLE, "{:?}", started.elapsed());
    until_timed_out(&events, Timeout::Idle).await;
    shutdown.cancel();
}
