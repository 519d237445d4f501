//! Metrics of the HTTP API: request count and latency by route template, method and status
//! code. Route templates (`/v1/namespaces/{namespace}/windows/{name}`) keep the label set
//! bounded; unmatched paths are counted under `unmatched`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

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

/// Metric families of the HTTP API.
#[derive(Debug, Clone)]
pub struct ApiMetrics {
    /// Requests served.
    pub requests: Family<RequestLabels, Counter>,
    /// Time to answer, in seconds.
    pub latency: Family<RequestLabels, Histogram, fn() -> Histogram>,
}

impl Default for ApiMetrics {
    fn default() -> Self {
        Self {
            requests: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
        }
    }
}

impl ApiMetrics {
    /// Registers every family with the operator's registry.
    pub fn register(&self, registry: &mut Registry) {
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
