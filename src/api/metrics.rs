//! Metrics of the HTTP API: request count and latency by route template, method and status
//! code. Route templates (`/v1/namespaces/{namespace}/windows/{name}`) keep the label set
//! bounded; unmatched paths are counted under `unmatched`. Also the connection limits (open
//! connections, the cap, header-read time-outs), waits refused by the per-identity cap, and the
//! static tokens' reloads by result.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::runtime::limited_server::ConnectionCounts;

/// Labels of one request.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// HTTP method.
    pub method: String,
    /// Route template.
    pub route: String,
    /// Status code.
    pub code: u16,
}

fn latency_histogram() -> Histogram {
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    ])
}

/// Labels of one reload of the static tokens.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReloadLabels {
    /// `loaded`, `missing` (revoked), `malformed` (revoked), `unreadable` (kept for a while,
    /// then revoked): see [`super::static_tokens::LoadError::category`].
    pub result: &'static str,
}

/// Labels of one refusal of a CI token.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CiRefusalLabels {
    /// Why, from a fixed vocabulary: `ttl`, `selector`, `protect.daemonSets` (a window
    /// outside the bounds of every trust granting the token), `keys_unavailable` (its
    /// issuer's keys could not be fetched).
    pub reason: &'static str,
}

/// Labels of one fetch of an issuer's keys.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KeyFetchLabels {
    /// `fetched`, `failed` (discovery or JWKS unreachable or malformed), `too_many_keys`
    /// (a JWKS over the bound: refused, the previous keys kept).
    pub result: &'static str,
}

/// Metric families of the HTTP API.
#[derive(Debug, Clone)]
pub struct ApiMetrics {
    /// Requests served.
    pub requests: Family<RequestLabels, Counter>,
    /// Time to answer, in seconds.
    pub latency: Family<RequestLabels, Histogram, fn() -> Histogram>,
    /// Connections open now, and those refused: their address held
    /// `--max-connections-per-address` (answered 429 and closed).
    pub connections: ConnectionCounts,
    /// Connections served at once at most (`--max-connections`, or less when the open-files
    /// limit is lower).
    pub connection_limit: Gauge,
    /// Connections closed because their request headers did not arrive in time.
    pub header_read_timeouts: Counter,
    /// `?wait` requests refused by `--max-waits-per-identity`.
    pub waits_refused: Counter,
    /// Reloads of the static tokens, by result.
    pub static_token_reloads: Family<ReloadLabels, Counter>,
    /// Static tokens accepted now.
    pub static_tokens: Gauge,
    /// CI tokens refused for a reason the caller is not told in full, by reason.
    pub ci_refusals: Family<CiRefusalLabels, Counter>,
    /// Fetches of the trusted issuers' keys, by result.
    pub key_fetches: Family<KeyFetchLabels, Counter>,
}

impl Default for ApiMetrics {
    fn default() -> Self {
        Self {
            requests: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
            connections: ConnectionCounts::default(),
            connection_limit: Gauge::default(),
            header_read_timeouts: Counter::default(),
            waits_refused: Counter::default(),
            static_token_reloads: Family::default(),
            static_tokens: Gauge::default(),
            ci_refusals: Family::default(),
            key_fetches: Family::default(),
        }
    }
}

/// The reasons `api_ci_token_refusals_total` counts, exported at zero from the start.
const CI_REFUSAL_REASONS: [&str; 4] = ["ttl", "selector", "protect.daemonSets", "keys_unavailable"];
/// The results `api_oidc_key_fetches_total` counts, exported at zero from the start.
const KEY_FETCH_RESULTS: [&str; 3] = ["fetched", "failed", "too_many_keys"];

impl ApiMetrics {
    /// Registers every family with the operator's registry.
    pub fn register(&self, registry: &mut Registry) {
        for reason in CI_REFUSAL_REASONS {
            let _ = self.ci_refusals.get_or_create(&CiRefusalLabels { reason });
        }
        for result in KEY_FETCH_RESULTS {
            let _ = self.key_fetches.get_or_create(&KeyFetchLabels { result });
        }
        registry.register(
            "api_requests",
            "HTTP API requests by method, route template and status code",
            self.requests.clone(),
        );
        registry.register(
            "api_request_duration_seconds",
            "HTTP API request latency by method, route template and status code",
            self.latency.clone(),
        );
        registry.register(
            "api_connections",
            "HTTP API connections open now",
            self.connections.open.clone(),
        );
        registry.register(
            "api_connection_limit",
            "HTTP API connections served at once at most; further clients wait to be accepted",
            self.connection_limit.clone(),
        );
        registry.register(
            "api_header_read_timeouts",
            "HTTP API connections closed because their request headers did not arrive within --header-read-timeout",
            self.header_read_timeouts.clone(),
        );
        registry.register(
            "api_connections_refused_per_address",
            "HTTP API connections answered 429 and closed because their client address held --max-connections-per-address",
            self.connections.refused_per_address.clone(),
        );
        registry.register(
            "api_waits_refused",
            "HTTP API ?wait requests refused with 429 because their identity had --max-waits-per-identity waits in progress",
            self.waits_refused.clone(),
        );
        registry.register(
            "api_static_token_reloads",
            "Reloads of the static tokens by result: loaded; missing or malformed (every static token revoked); unreadable (kept, revoked when it lasts)",
            self.static_token_reloads.clone(),
        );
        registry.register(
            "api_static_tokens",
            "Static tokens the HTTP API accepts now",
            self.static_tokens.clone(),
        );
        registry.register(
            "api_ci_token_refusals",
            "CI id-tokens refused for a reason the caller is told only in general (the log has the detail): ttl, selector or protect.daemonSets outside the bounds of every CITrust granting the token; keys_unavailable, the issuer's keys could not be fetched",
            self.ci_refusals.clone(),
        );
        registry.register(
            "api_oidc_key_fetches",
            "Fetches of a trusted issuer's discovery document and JWKS by result: fetched; failed (the previous keys kept); too_many_keys (a JWKS over the bound, refused, the previous keys kept)",
            self.key_fetches.clone(),
        );
    }

    /// Counts one CI token refused for `reason`.
    pub fn ci_refusal(&self, reason: &'static str) {
        self.ci_refusals
            .get_or_create(&CiRefusalLabels { reason })
            .inc();
    }

    /// Counts one fetch of an issuer's keys by its result.
    pub fn key_fetch(&self, result: &'static str) {
        self.key_fetches
            .get_or_create(&KeyFetchLabels { result })
            .inc();
    }

    /// Counts one reload of the static tokens by its result.
    pub fn static_token_reload(&self, result: &'static str) {
        self.static_token_reloads
            .get_or_create(&ReloadLabels { result })
            .inc();
    }

    /// Records one answered request.
    pub fn observe(&self, method: &str, route: &str, code: u16, seconds: f64) {
        let labels = RequestLabels {
            method: method.to_string(),
            route: route.to_string(),
            code,
        };
        self.requests.get_or_create(&labels).inc();
        self.latency.get_or_create(&labels).observe(seconds);
    }
}
