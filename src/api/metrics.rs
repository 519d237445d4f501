//! Metrics of the HTTP API.

use prometheus_client::registry::Registry;

/// Metric families of the HTTP API.
#[derive(Debug, Default)]
pub struct ApiMetrics {}

impl ApiMetrics {
    /// Registers every family with the operator's registry.
    pub fn register(&self, _registry: &mut Registry) {}
}
