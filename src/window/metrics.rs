//! Metrics of the window controller.

use prometheus_client::registry::Registry;

/// Metric families of the window controller.
#[derive(Debug, Default)]
pub struct WindowMetrics {}

impl WindowMetrics {
    /// Registers every family with the operator's registry.
    pub fn register(&self, _registry: &mut Registry) {}
}
