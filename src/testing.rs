//! Helpers the unit tests of several layers share (compiled for tests only): the metrics a
//! component registers, encoded as Prometheus scrapes them, and the API server's answers as
//! kube returns them.

use prometheus_client::registry::Registry;

/// `registry` in the OpenMetrics text format.
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, registry).expect("writing to a String");
    out
}

/// What `register` adds to a fresh registry with the operator's prefix (`disruption_guard`),
/// encoded.
pub fn encode_registered(register: impl FnOnce(&mut Registry)) -> String {
    let mut registry = Registry::with_prefix("disruption_guard");
    register(&mut registry);
    encode(&registry)
}

/// An answer of the API server with HTTP `code`, as kube returns it.
pub fn api_error(code: u16) -> kube::Error {
    let status: kube::core::Status = serde_json::from_value(serde_json::json!({
        "status": "Failure", "reason": "Refused", "code": code, "message": "refused"
    }))
    .unwrap();
    kube::Error::Api(Box::new(status))
}
