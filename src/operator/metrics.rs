//! Prometheus metrics of the operator, all prefixed `disruption_guard_`.
//!
//! Label values come from fixed vocabularies (phases, reasons, error categories), never from
//! object names, so cardinality stays bounded.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

/// The operator's metric registry and handles.
pub struct Metrics {
    registry: Registry,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("disruption_guard");
        registry.register(
            "build",
            "Version of the running binary",
            Info::new(vec![("version", env!("CARGO_PKG_VERSION"))]),
        );
        Self { registry }
    }
}

impl Metrics {
    /// The registry in OpenMetrics text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}
