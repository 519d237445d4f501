//! Whether the API server will call the eviction webhook, as far as the operator can tell,
//! and when the certificate it serves expires. The webhook fails open (`failurePolicy:
//! Ignore`): a missing or stale registration, or a certificate the API server no longer
//! trusts, turns the interception off without an error anywhere. These two gauges make that
//! visible:
//!
//! - `intercept_registered`: 1 when the `ValidatingWebhookConfiguration` exists, its eviction
//!   webhook sends `pods/eviction` CREATE to this operator's Service (or loopback URL), and its
//!   `caBundle` verifies the certificate served right now, for the name the API server dials,
//!   at the time of the scrape — the same check the API server's TLS client makes. Else 0. Only
//!   exported while the interception is on.
//! - `intercept_certificate_expiration_timestamp_seconds`: the served certificate's
//!   `notAfter` (as cert-manager's `certmanager_certificate_expiration_timestamp_seconds`), once
//!   a certificate is served.
//!
//! Both are computed when Prometheus scrapes (a [`Collector`]) from the certificate served
//! now and the registration as last read ([`WebhookHealth::watch`], a GET of that one object
//! every [`CHECK_EVERY`]), so an expiry shows the second it happens. The decision,
//! [`assess`], is pure.
//!
//! What no gauge can see — a Service without endpoints, a NetworkPolicy, an API server that
//! cannot route to the pod — shows as evictions on draining nodes with no review arriving
//! (`drain_pods_evicted_total` against `intercept_reviews_total`, an alert in the chart).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingWebhook, ValidatingWebhookConfiguration,
};
use kube::{Api, Client};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier as _;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::registration::{Endpoint, PATH, WEBHOOK};
use super::tls::CertResolver;

/// How often the registration is read back from the API server.
pub const CHECK_EVERY: Duration = Duration::from_secs(15);

/// Why the API server would, or would not, call the webhook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Registered for this endpoint, trusting the certificate served now.
    Registered,
    /// The registration has not been read yet.
    NotReadYet,
    /// Reading the registration failed (RBAC, API server away): nothing can be vouched for.
    Unreadable,
    /// No `ValidatingWebhookConfiguration` of that name.
    Missing,
    /// The configuration has no webhook named [`WEBHOOK`].
    NoWebhook,
    /// The webhook is not sent `pods/eviction` CREATE.
    NoEvictionRule,
    /// The webhook is sent elsewhere (another Service, port, path or URL).
    OtherEndpoint,
    /// Its `caBundle` does not verify the served certificate now: another CA, an expired
    /// certificate or CA, or a certificate without the name the API server dials.
    Untrusted,
}

impl Verdict {
    /// What the log says.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Registered => "registered",
            Verdict::NotReadYet => "the registration has not been read yet",
            Verdict::Unreadable => "the registration cannot be read",
            Verdict::Missing => "the ValidatingWebhookConfiguration does not exist",
            Verdict::NoWebhook => "the configuration lacks the eviction webhook",
            Verdict::NoEvictionRule => "the webhook is not sent pods/eviction CREATE",
            Verdict::OtherEndpoint => "the webhook is sent to another Service or URL",
            Verdict::Untrusted => {
                "its caBundle does not verify the served certificate (other CA, expired, wrong name)"
            }
        }
    }
}

/// The registration as last read.
#[derive(Debug, Clone, Default)]
pub enum Seen {
    /// Not read yet.
    #[default]
    NotYet,
    /// The read failed.
    Unreadable,
    /// Read: absent (`None`) or as stored.
    Read(Option<Box<ValidatingWebhookConfiguration>>),
}

/// Whether the API server would call this webhook: `seen` is the registration, `endpoint`
/// where this operator is reached, `served` the certificate chain it serves (leaf first),
/// `now` the time the API server's TLS client would check validity at.
pub fn assess(
    seen: &Seen,
    endpoint: &Endpoint,
    served: &[CertificateDer<'_>],
    now: Timestamp,
) -> Verdict {
    let config = match seen {
        Seen::NotYet => return Verdict::NotReadYet,
        Seen::Unreadable => return Verdict::Unreadable,
        Seen::Read(None) => return Verdict::Missing,
        Seen::Read(Some(config)) => config,
    };
    let Some(webhook) = config.webhooks.iter().flatten().find(|w| w.name == WEBHOOK) else {
        return Verdict::NoWebhook;
    };
    if !sends_evictions(webhook) {
        return Verdict::NoEvictionRule;
    }
    if !reaches(webhook, endpoint) {
        return Verdict::OtherEndpoint;
    }
    let ca_bundle = webhook
        .client_config
        .ca_bundle
        .as_ref()
        .map(|b| b.0.as_slice())
        .unwrap_or_default();
    if trusts(ca_bundle, served, &dialled_name(endpoint), now) {
        Verdict::Registered
    } else {
        Verdict::Untrusted
    }
}

/// A rule sending CREATE of `pods/eviction` (or every resource or operation).
fn sends_evictions(webhook: &ValidatingWebhook) -> bool {
    webhook.rules.iter().flatten().any(|rule| {
        let has = |list: &Option<Vec<String>>, wanted: &str| {
            list.iter().flatten().any(|v| v == wanted || v == "*")
        };
        has(&rule.operations, "CREATE")
            && (has(&rule.resources, "pods/eviction") || has(&rule.resources, "*/*"))
    })
}

/// The webhook's client config names this endpoint.
fn reaches(webhook: &ValidatingWebhook, endpoint: &Endpoint) -> bool {
    let client = &webhook.client_config;
    match endpoint {
        Endpoint::Service {
            namespace,
            name,
            port,
        } => client.service.as_ref().is_some_and(|s| {
            &s.namespace == namespace
                && &s.name == name
                && s.port.unwrap_or(443) == i32::from(*port)
                && s.path.as_deref() == Some(PATH)
        }),
        Endpoint::Loopback { port } => {
            client.url.as_deref() == Some(format!("https://127.0.0.1:{port}{PATH}").as_str())
        }
    }
}

/// The name the API server's TLS client checks the certificate against.
fn dialled_name(endpoint: &Endpoint) -> String {
    match endpoint {
        Endpoint::Service {
            namespace, name, ..
        } => format!("{name}.{namespace}.svc"),
        Endpoint::Loopback { .. } => "127.0.0.1".to_string(),
    }
}

/// Whether a TLS client trusting exactly `ca_bundle` (PEM) accepts `served` for `name` at
/// `now`. webpki makes the check (chain, validity of every certificate, key usage, name)
/// rather than code of our own, as the API server's Go TLS client makes it.
fn trusts(ca_bundle: &[u8], served: &[CertificateDer<'_>], name: &str, now: Timestamp) -> bool {
    let Some((leaf, intermediates)) = served.split_first() else {
        return false;
    };
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(ca_bundle).flatten() {
        let _ = roots.add(ca);
    }
    if roots.is_empty() {
        return false;
    }
    let Ok(verifier) = WebPkiServerVerifier::builder_with_provider(
        Arc::new(roots),
        Arc::new(rustls::crypto::ring::default_provider()),
    )
    .build() else {
        return false;
    };
    let Ok(name) = ServerName::try_from(name.to_string()) else {
        return false;
    };
    let Ok(seconds) = u64::try_from(now.as_second()) else {
        return false;
    };
    let at = UnixTime::since_unix_epoch(Duration::from_secs(seconds));
    verifier
        .verify_server_cert(leaf, intermediates, &name, &[], at)
        .is_ok()
}

/// The `notAfter` of `cert`, in seconds since the Unix epoch.
pub fn not_after(cert: &CertificateDer<'_>) -> Option<i64> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert).ok()?;
    Some(parsed.validity().not_after.timestamp())
}

/// What the gauges are computed from once the webhook serves.
struct Source {
    resolver: Arc<CertResolver>,
    endpoint: Endpoint,
    name: String,
    seen: RwLock<Seen>,
}

/// The collector of both gauges; registered with the operator's registry at start-up, turned
/// on by [`WebhookHealth::enable`] and fed by [`WebhookHealth::attach`].
#[derive(Default)]
pub struct WebhookHealth {
    enabled: AtomicBool,
    source: OnceLock<Source>,
}

impl std::fmt::Debug for WebhookHealth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookHealth")
            .field("enabled", &self.enabled.load(Ordering::Relaxed))
            .field("attached", &self.source.get().is_some())
            .finish()
    }
}

impl WebhookHealth {
    /// The interception is on: `intercept_registered` is exported from now on (0 until the
    /// webhook serves and its registration is read).
    pub fn enable(&self) {
        self.enabled.store(true, Ordering::Release);
    }

    /// The webhook serves `resolver`'s certificate at `endpoint`, registered as the
    /// `ValidatingWebhookConfiguration` `name`.
    pub fn attach(&self, resolver: Arc<CertResolver>, endpoint: Endpoint, name: String) {
        self.enable();
        let _ = self.source.set(Source {
            resolver,
            endpoint,
            name,
            seen: RwLock::default(),
        });
    }

    /// The verdict now, from the registration as last read.
    pub fn verdict(&self, now: Timestamp) -> Verdict {
        match self.source.get() {
            None => Verdict::NotReadYet,
            Some(source) => {
                let served = source.resolver.current();
                let seen = source.seen.read().expect("registration lock");
                assess(&seen, &source.endpoint, &served.cert, now)
            }
        }
    }

    /// Reads the registration now and every [`CHECK_EVERY`] until `shutdown`, logging each
    /// change of the verdict. Does nothing before [`WebhookHealth::attach`].
    pub async fn watch(&self, client: Client, shutdown: CancellationToken) {
        let Some(source) = self.source.get() else {
            return;
        };
        let api: Api<ValidatingWebhookConfiguration> = Api::all(client);
        let mut last = None;
        let mut last_error = None;
        loop {
            let seen = match api.get_opt(&source.name).await {
                Ok(config) => {
                    last_error = None;
                    Seen::Read(config.map(Box::new))
                }
                Err(err) => {
                    // Once per distinct error, not every 15 s.
                    let text = err.to_string();
                    if last_error.as_ref() != Some(&text) {
                        warn!(webhook = %source.name, error = %text, "reading the eviction webhook registration");
                        last_error = Some(text);
                    }
                    Seen::Unreadable
                }
            };
            *source.seen.write().expect("registration lock") = seen;
            let verdict = self.verdict(Timestamp::now());
            if last != Some(verdict) {
                if verdict == Verdict::Registered {
                    info!(webhook = %source.name, "the API server can call the eviction webhook");
                } else {
                    warn!(webhook = %source.name, why = verdict.as_str(), "eviction webhook not registered: evictions go through unseen");
                }
                last = Some(verdict);
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(CHECK_EVERY) => {}
            }
        }
    }
}

impl Collector for WebhookHealth {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        if !self.enabled.load(Ordering::Acquire) {
            return Ok(());
        }
        let now = Timestamp::now();
        let registered = ConstGauge::new(i64::from(self.verdict(now) == Verdict::Registered));
        registered.encode(encoder.encode_descriptor(
            "intercept_registered",
            "1 when the webhook registration sends evictions here and trusts the served certificate",
            None,
            registered.metric_type(),
        )?)?;
        let expiry = self
            .source
            .get()
            .and_then(|s| s.resolver.current().cert.first().and_then(not_after));
        if let Some(expiry) = expiry {
            let gauge = ConstGauge::new(expiry);
            gauge.encode(encoder.encode_descriptor(
                "intercept_certificate_expiration_timestamp_seconds",
                "Expiry (notAfter) of the webhook's serving certificate, in seconds since the Unix epoch",
                None,
                gauge.metric_type(),
            )?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "health_tests.rs"]
mod tests;
