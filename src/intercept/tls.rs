//! The eviction webhook's HTTPS server: a rustls configuration whose certificate can be swapped
//! while it serves ([`CertResolver`]), the server that serves an axum router over HTTP/1.1 and
//! HTTP/2 within the port's connection limits ([`serve_on`]), and the task that keeps the certificate and the
//! registration's CA bundle current ([`keep_current`]).
//!
//! When the certificate changes, open connections are closed gracefully (HTTP/2 GOAWAY,
//! HTTP/1.1 `Connection: close` after the request in flight): clients reconnect and check the
//! new certificate at once, not weeks later when the old one expires. A changed CA bundle is
//! published in the registration before the new certificate is served, so the API server
//! trusts it by then (it may briefly fail open in between, which the registration tolerates).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use kube::Client;
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::certs::{self, Bundle};
use super::registration::Upkeep;
use crate::runtime::http_server;
use crate::runtime::limited_server::{self, ConnectionEvents, ConnectionLimits, Port, Protocols};

/// How often [`keep_current`] re-reads the Secret, in production: renewals happen a month
/// before expiry, so minutes are plenty.
pub const DEFAULT_REFRESH: Duration = Duration::from_secs(5 * 60);
/// Longest a client may take to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The serving certificate, swappable while the server runs.
pub struct CertResolver {
    current: watch::Sender<Arc<CertifiedKey>>,
}

impl std::fmt::Debug for CertResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertResolver").finish_non_exhaustive()
    }
}

impl CertResolver {
    /// A resolver serving `bundle`'s certificate.
    pub fn new(bundle: &Bundle) -> Result<Arc<Self>, rustls::Error> {
        let (current, _) = watch::channel(Arc::new(certified_key(bundle)?));
        Ok(Arc::new(CertResolver { current }))
    }

    /// Serves `bundle`'s certificate from now on; open connections close after the request
    /// they are answering.
    pub fn install(&self, bundle: &Bundle) -> Result<(), rustls::Error> {
        self.current.send_replace(Arc::new(certified_key(bundle)?));
        Ok(())
    }

    /// The certificate served now.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.current.borrow().clone()
    }

    fn changes(&self) -> watch::Receiver<Arc<CertifiedKey>> {
        self.current.subscribe()
    }
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// The certificate chain and key of `bundle`, checked to match.
pub fn certified_key(bundle: &Bundle) -> Result<CertifiedKey, rustls::Error> {
    let chain = CertificateDer::pem_slice_iter(bundle.cert.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| rustls::Error::General(format!("reading the serving certificate: {e}")))?;
    if chain.is_empty() {
        return Err(rustls::Error::General(
            "the serving certificate is empty".into(),
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(bundle.key.as_bytes())
        .map_err(|e| rustls::Error::General(format!("reading the serving key: {e}")))?;
    CertifiedKey::from_der(chain, key, &rustls::crypto::ring::default_provider())
}

/// TLS 1.2 and 1.3 with the `ring` provider, no client certificates, ALPN `h2` then
/// `http/1.1`, the certificate from `resolver`.
pub fn server_config(resolver: Arc<CertResolver>) -> Arc<ServerConfig> {
    let mut config =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("the ring provider supports the default protocol versions")
            .with_no_client_auth()
            .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Arc::new(config)
}

/// Serves `router` over HTTPS (HTTP/1.1 and HTTP/2) on `listener` within `limits` (the
/// operator's one limited server, as the API's: [`limited_server`]) until `shutdown`, then
/// lets requests in flight finish (for up to 10 s), counting its connections in `events` (the
/// interception's metrics).
/// Handlers can read the client's address as `ConnectInfo<SocketAddr>`. A connection over its
/// address's share is closed before its TLS handshake; a connection is closed after the
/// request in flight when the certificate changes or the process stops.
pub async fn serve_on<E: ConnectionEvents>(
    listener: TcpListener,
    router: Router,
    resolver: Arc<CertResolver>,
    limits: ConnectionLimits,
    events: Arc<E>,
    shutdown: CancellationToken,
) {
    let acceptor = TlsAcceptor::from(server_config(resolver.clone()));
    let port = Port {
        name: "webhook",
        limits,
        protocols: Protocols::Http1And2,
        refusal: None,
        events,
    };
    let stop = shutdown.clone();
    limited_server::serve(
        listener,
        router,
        port,
        shutdown,
        move |tcp, peer| {
            let acceptor = acceptor.clone();
            async move { http_server::handshake(&acceptor, tcp, peer, HANDSHAKE_TIMEOUT).await }
        },
        move || {
            let (mut changes, shutdown) = (resolver.changes(), stop.clone());
            async move {
                tokio::select! {
                    _ = changes.changed() => {}
                    () = shutdown.cancelled() => {}
                }
            }
        },
    )
    .await;
}

/// Reads the Secret's bundle (creating or renewing it when needed), publishes its CA bundle in
/// `registration` (when given) and returns it with a resolver serving it: what [`serve_on`] and
/// [`keep_current`] start from.
pub async fn load(
    client: &Client,
    secret: &certs::CertSecret,
    registration: Option<&Upkeep>,
) -> anyhow::Result<(Arc<CertResolver>, Bundle)> {
    let bundle = certs::obtain(client, secret).await?;
    if let Some(registration) = registration {
        registration
            .publish(client, &bundle.ca_bundle)
            .await
            .context("registering the eviction webhook")?;
    }
    let resolver = CertResolver::new(&bundle).context("loading the webhook certificate")?;
    Ok((resolver, bundle))
}

/// Every `every` until `shutdown`: [`refresh`]. Errors are logged and retried at the next
/// tick; the certificate served meanwhile stays valid for weeks.
pub async fn keep_current(
    client: Client,
    secret: certs::CertSecret,
    registration: Option<Upkeep>,
    resolver: Arc<CertResolver>,
    mut current: Bundle,
    every: Duration,
    shutdown: CancellationToken,
) {
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
        if let Err(err) = refresh(
            &client,
            &secret,
            registration.as_ref(),
            &resolver,
            &mut current,
        )
        .await
        {
            warn!(
                error = format!("{err:#}"),
                "refreshing the webhook certificate"
            );
        }
    }
}

/// Re-reads the Secret (renewing the bundle when needed), applies the registration with its CA
/// bundle, then serves a changed certificate; `current` follows what is served.
///
/// The registration goes first: the API server must trust a new CA before a certificate signed
/// by it is served. When the registration cannot be written, a certificate from a new CA is
/// not served (the old one stays valid for weeks); one from the same CA is.
pub async fn refresh(
    client: &Client,
    secret: &certs::CertSecret,
    registration: Option<&Upkeep>,
    resolver: &CertResolver,
    current: &mut Bundle,
) -> anyhow::Result<()> {
    let stored = certs::obtain(client, secret).await?;
    let ca_changed = stored.ca_bundle != current.ca_bundle;
    let registered = match registration {
        // Every time, not only on a change: an edited caBundle comes back (and, with
        // `--intercept-create-webhook`, a deleted registration).
        Some(registration) => registration
            .publish(client, &stored.ca_bundle)
            .await
            .context("registering the eviction webhook"),
        None => Ok(()),
    };
    if registered.is_err() && ca_changed {
        return registered;
    }
    if stored.cert != current.cert || stored.key != current.key {
        resolver
            .install(&stored)
            .context("loading the renewed webhook certificate")?;
        info!(ca_changed, "serving the renewed webhook certificate");
    }
    *current = stored;
    registered
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio_rustls::TlsConnector;
    use tokio_rustls::client::TlsStream;

    use super::*;
    use crate::intercept::certs::{Renewal, issue, sans};
    use axum::extract::ConnectInfo;

    fn bundle() -> Bundle {
        issue(
            None,
            Renewal::All,
            &sans("disruption-guard", "guard"),
            jiff::Timestamp::now(),
        )
        .unwrap()
    }

    /// Limits with `per_address` connections from one address.
    fn limits(per_address: usize) -> ConnectionLimits {
        ConnectionLimits {
            max_connections: 100,
            per_address,
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Some(Duration::from_secs(60)),
        }
    }

    /// A server on a free loopback port answering `GET /` with `ok`.
    async fn start(resolver: Arc<CertResolver>) -> (SocketAddr, CancellationToken) {
        start_within(resolver, limits(10)).await
    }

    /// As [`start`], within `limits`.
    async fn start_within(
        resolver: Arc<CertResolver>,
        limits: ConnectionLimits,
    ) -> (SocketAddr, CancellationToken) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = Router::new().route(
            "/",
            axum::routing::get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move {
                format!("ok from {}", peer.ip())
            }),
        );
        let shutdown = CancellationToken::new();
        tokio::spawn(serve_on(
            listener,
            router,
            resolver,
            limits,
            Arc::new(super::super::InterceptMetrics::default()),
            shutdown.clone(),
        ));
        (addr, shutdown)
    }

    /// A TLS connection to `addr` as `localhost`, trusting only the bundle's CAs.
    async fn connect(addr: SocketAddr, ca_bundle: &str) -> TlsStream<tokio::net::TcpStream> {
        let mut roots = rustls::RootCertStore::empty();
        for ca in CertificateDer::pem_slice_iter(ca_bundle.as_bytes()) {
            roots.add(ca.unwrap()).unwrap();
        }
        let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        TlsConnector::from(Arc::new(config))
            .connect("localhost".try_into().unwrap(), tcp)
            .await
            .unwrap()
    }

    fn served_certificate(stream: &TlsStream<tokio::net::TcpStream>) -> CertificateDer<'static> {
        stream.get_ref().1.peer_certificates().unwrap()[0]
            .clone()
            .into_owned()
    }

    fn der(pem: &str) -> CertificateDer<'static> {
        CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()
    }

    #[tokio::test]
    async fn the_router_is_served_over_tls_with_the_managed_certificate() {
        let bundle = bundle();
        let (addr, shutdown) = start(CertResolver::new(&bundle).unwrap()).await;
        let mut stream = connect(addr, &bundle.ca_bundle).await;
        assert_eq!(served_certificate(&stream), der(&bundle.cert));
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.ok();
        assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
        assert!(response.ends_with("ok from 127.0.0.1"), "{response}");
        shutdown.cancel();
    }

    #[tokio::test]
    async fn a_connection_over_its_addresss_share_is_closed_before_its_tls_handshake() {
        let bundle = bundle();
        let (addr, shutdown) = start_within(CertResolver::new(&bundle).unwrap(), limits(1)).await;
        let mut first = connect(addr, &bundle.ca_bundle).await;
        let mut second = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut out = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), second.read_to_end(&mut out))
            .await
            .expect("the second connection is closed at once");
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
        assert!(out.is_empty(), "no handshake: {out:?}");
        first
            .write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut response = String::new();
        first.read_to_string(&mut response).await.ok();
        assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
        shutdown.cancel();
    }

    #[tokio::test]
    async fn a_new_certificate_is_served_without_a_restart_and_open_connections_close() {
        let first = bundle();
        let resolver = CertResolver::new(&first).unwrap();
        let (addr, shutdown) = start(resolver.clone()).await;
        let mut open = connect(addr, &first.ca_bundle).await;

        let renewed = issue(
            Some(&first),
            Renewal::All,
            &sans("disruption-guard", "guard"),
            jiff::Timestamp::now(),
        )
        .unwrap();
        resolver.install(&renewed).unwrap();

        let fresh = connect(addr, &renewed.ca_bundle).await;
        assert_eq!(served_certificate(&fresh), der(&renewed.cert));
        let mut buf = [0u8; 16];
        let read = tokio::time::timeout(Duration::from_secs(5), open.read(&mut buf))
            .await
            .expect("the open connection to close");
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
        shutdown.cancel();
    }

    #[tokio::test]
    async fn the_server_stops_on_shutdown() {
        let bundle = bundle();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let shutdown = CancellationToken::new();
        let server = tokio::spawn(serve_on(
            listener,
            Router::new(),
            CertResolver::new(&bundle).unwrap(),
            limits(10),
            Arc::new(super::super::InterceptMetrics::default()),
            shutdown.clone(),
        ));
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("the server to stop")
            .unwrap();
    }

    #[test]
    fn a_key_that_does_not_match_its_certificate_is_refused() {
        let bundle = bundle();
        let other = self::bundle();
        let mixed = Bundle {
            key: other.key,
            ..bundle
        };
        assert!(certified_key(&mixed).is_err());
    }
}
