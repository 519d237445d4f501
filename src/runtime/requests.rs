//! Every request the operator sends to the API server, counted and timed: a tower layer on the
//! client's service stack (see [`super::connection`]) records `kube_requests_total{verb, code}`
//! and `kube_request_duration_seconds{verb}`, as client-go's `rest_client_requests_total` and
//! `rest_client_request_duration_seconds` do for controller-runtime operators.
//!
//! The layer sits below kube's retries, so each attempt is counted with its own answer (a 429
//! and the retry that succeeds are two requests). Labels come from fixed vocabularies: `verb`
//! is the Kubernetes verb the method and path make ([`verb`]: `get`, `list`, `watch`, `create`,
//! `update`, `patch`, `delete`, `deletecollection`, else `other`), `code` the HTTP status (or
//! `error` when no answer came); no path, namespace or object name ever becomes a label.
//!
//! The duration runs until the response headers arrive; the body is read after it and not
//! included. A LIST is timed to its first byte, and a watch, which streams for minutes, is
//! timed to the moment the API server accepted it: watches are counted and timed under their
//! own verb `watch`, so they never blur the latency of the short requests.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::{Method, Request, Response};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tower::{Layer, Service};

/// Every value of `verb`.
pub const VERBS: [&str; 9] = [
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
    "other",
];

/// `code` of a request that got no answer (connection refused or lost, TLS, timeout).
pub const TRANSPORT_ERROR: &str = "error";

/// Labels of `kube_requests_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// One of [`VERBS`].
    pub verb: &'static str,
    /// The HTTP status code, or [`TRANSPORT_ERROR`].
    pub code: String,
}

/// Label of `kube_request_duration_seconds`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerbLabel {
    /// One of [`VERBS`].
    pub verb: &'static str,
}

/// Buckets of `kube_request_duration_seconds`: 1 ms × 2ⁿ for n = 0…15 (1 ms … 33 s).
fn histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// The families of the API client; cheap to clone (the clones share the series).
#[derive(Debug, Clone)]
pub struct RequestMetrics {
    requests: Family<RequestLabels, Counter>,
    durations: Family<VerbLabel, Histogram, fn() -> Histogram>,
}

impl Default for RequestMetrics {
    fn default() -> Self {
        let metrics = Self {
            requests: Family::default(),
            durations: Family::new_with_constructor(histogram),
        };
        // The status codes are not known in advance; the verbs are, so every latency series
        // exists from the start. The counter's first series come with the first request, which
        // start-up sends before /metrics is served.
        for verb in VERBS {
            drop(metrics.durations.get_or_create(&VerbLabel { verb }));
        }
        metrics
    }
}

impl RequestMetrics {
    /// Registers both families with the operator's registry.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "kube_requests",
            "Requests to the Kubernetes API server, by verb and HTTP status code (error: no answer)",
            self.requests.clone(),
        );
        registry.register(
            "kube_request_duration_seconds",
            "Seconds from sending a request to the Kubernetes API server to its response headers, by verb",
            self.durations.clone(),
        );
    }

    /// Records one request: its verb, its status code (`None`: no answer) and how long it took.
    pub fn observe(&self, verb: &'static str, status: Option<u16>, elapsed: Duration) {
        let labels = RequestLabels {
            verb,
            code: code(status),
        };
        self.requests.get_or_create(&labels).inc();
        self.durations
            .get_or_create(&VerbLabel { verb })
            .observe(elapsed.as_secs_f64());
    }

    /// The layer that records every request of a client whose server URL has the path
    /// `base_path` (usually empty; a proxy's prefix such as `/k8s/clusters/c-1` otherwise).
    pub fn layer(&self, base_path: &str) -> RecordLayer {
        RecordLayer {
            metrics: self.clone(),
            base_path: base_path.trim_end_matches('/').into(),
        }
    }
}

/// The `code` label: the status as three digits, or [`TRANSPORT_ERROR`]. A status outside
/// 100–599 (none is defined) is `other`, so the label stays bounded whatever the server sends.
pub fn code(status: Option<u16>) -> String {
    match status {
        Some(s @ 100..=599) => s.to_string(),
        Some(_) => "other".into(),
        None => TRANSPORT_ERROR.into(),
    }
}

/// Whether a request path names a collection (`Some(true)`), one object or its subresource
/// (`Some(false)`), or no resource at all (`None`: discovery, `/version`, `/openapi/v2`).
fn names_collection(path: &str) -> Option<bool> {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let rest = match segments.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => return None,
    };
    // The deprecated `/watch/` prefix names the same resources.
    let rest = rest.strip_prefix(&["watch"]).unwrap_or(rest);
    // `namespaces/{ns}/{resource}…` is a namespaced resource; `namespaces` and
    // `namespaces/{name}` are the Namespaces themselves.
    let rest = match rest {
        ["namespaces", _namespace, resource @ ..] if !resource.is_empty() => resource,
        rest => rest,
    };
    match rest.len() {
        0 => None,
        1 => Some(true),
        _ => Some(false),
    }
}

/// Whether the request asks for a watch: `watch=true` or `watch=1` in the query, or the
/// deprecated `/watch/` path.
fn is_watch(path: &str, query: Option<&str>) -> bool {
    let legacy = path
        .split('/')
        .filter(|s| !s.is_empty())
        .nth(if path.starts_with("/apis/") { 3 } else { 2 })
        == Some("watch");
    legacy
        || query.is_some_and(|q| {
            q.split('&')
                .any(|pair| pair == "watch=true" || pair == "watch=1")
        })
}

/// The Kubernetes verb of a request, as the API server's audit log and RBAC name it, from its
/// method, path (without the server URL's own path) and query.
pub fn verb(method: &Method, path: &str, query: Option<&str>) -> &'static str {
    let collection = names_collection(path);
    match *method {
        Method::GET if is_watch(path, query) => "watch",
        Method::GET if collection == Some(true) => "list",
        Method::GET => "get",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if collection == Some(true) => "deletecollection",
        Method::DELETE => "delete",
        _ => "other",
    }
}

/// The tower layer of [`RequestMetrics::layer`].
#[derive(Debug, Clone)]
pub struct RecordLayer {
    metrics: RequestMetrics,
    base_path: Arc<str>,
}

impl<S> Layer<S> for RecordLayer {
    type Service = Record<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Record {
            inner,
            metrics: self.metrics.clone(),
            base_path: self.base_path.clone(),
        }
    }
}

/// A service that records each request it passes on.
#[derive(Debug, Clone)]
pub struct Record<S> {
    inner: S,
    metrics: RequestMetrics,
    base_path: Arc<str>,
}

impl<S, B, RB> Service<Request<B>> for Record<S>
where
    S: Service<Request<B>, Response = Response<RB>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    RB: Send + 'static,
{
    type Response = Response<RB>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<RB>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let uri = request.uri();
        let path = uri.path();
        let path = path.strip_prefix(&*self.base_path).unwrap_or(path);
        let verb = verb(request.method(), path, uri.query());
        let metrics = self.metrics.clone();
        let started = Instant::now();
        let response = self.inner.call(request);
        Box::pin(async move {
            let result = response.await;
            let status = result.as_ref().ok().map(|r| r.status().as_u16());
            metrics.observe(verb, status, started.elapsed());
            result
        })
    }
}

#[cfg(test)]
#[path = "requests_tests.rs"]
mod tests;
