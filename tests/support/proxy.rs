//! A TCP proxy in front of the API server that a test can stall or reset: an operator whose
//! kubeconfig points at it loses the API server without its process dying. Stalled, it holds
//! every byte both ways (connections stay open, watches go silent, requests get no answer);
//! a reset closes every connection at once (RST), as a dropped load balancer would.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinHandle};

/// A running proxy; stops when dropped.
pub struct Proxy {
    pub port: u16,
    passing: watch::Sender<bool>,
    connections: Arc<Mutex<Vec<AbortHandle>>>,
    task: JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
        self.reset();
    }
}

impl Proxy {
    /// Starts a proxy on a free loopback port to the test cluster's API server.
    pub async fn start() -> Proxy {
        let upstream = format!("127.0.0.1:{}", super::operator::api_server_port());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (passing, rx) = watch::channel(true);
        let connections: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let held = connections.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (upstream, rx) = (upstream.clone(), rx.clone());
                let conn = tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(&upstream).await else {
                        return;
                    };
                    // Dropped with linger 0, a socket sends RST: a reset, not a goodbye. (The
                    // deprecation is about a linger that blocks the drop; zero never does.)
                    #[allow(deprecated)]
                    {
                        let _ = client.set_linger(Some(Duration::ZERO));
                        let _ = server.set_linger(Some(Duration::ZERO));
                    }
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    tokio::select! {
                        _ = pump(cr, sw, rx.clone()) => {}
                        _ = pump(sr, cw, rx) => {}
                    }
                });
                let mut held = held.lock().unwrap();
                held.retain(|c| !c.is_finished());
                held.push(conn.abort_handle());
            }
        });
        Proxy {
            port,
            passing,
            connections,
            task,
        }
    }

    /// Holds every byte both ways until the returned guard is dropped.
    pub fn stall(&self) -> Stalled<'_> {
        self.passing.send_replace(false);
        Stalled { proxy: self }
    }

    /// Closes every open connection now; new ones are accepted.
    pub fn reset(&self) {
        for conn in self.connections.lock().unwrap().drain(..) {
            conn.abort();
        }
    }

    /// A copy of the test kubeconfig whose server is this proxy (the API server's certificate
    /// names 127.0.0.1, so TLS is unchanged).
    pub fn kubeconfig(&self) -> PathBuf {
        let original = std::fs::read_to_string(super::kubeconfig()).unwrap();
        let upstream = format!("127.0.0.1:{}", super::operator::api_server_port());
        let proxied = original.replace(&upstream, &format!("127.0.0.1:{}", self.port));
        assert_ne!(proxied, original, "the kubeconfig names {upstream}");
        let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("kubeconfig-proxy-{}", self.port));
        std::fs::write(&path, proxied).unwrap();
        path
    }
}

/// A stalled proxy; dropping this passes bytes again.
pub struct Stalled<'a> {
    proxy: &'a Proxy,
}

impl Drop for Stalled<'_> {
    fn drop(&mut self) {
        self.proxy.passing.send_replace(true);
    }
}

/// Copies `from` to `to`, holding the bytes while the proxy is stalled.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut passing: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if passing.wait_for(|p| *p).await.is_err() {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
