//! Metrics of the drain watcher.

use prometheus_client::registry::Registry;

/// Metric families of the drain watcher.
#[derive(Debug, Default)]
pub struct DrainMetrics {}

impl DrainMetrics {
    /// Registers every family with the operator's registry.
    pub fn register(&self, _registry: &mut Registry) {}
}
