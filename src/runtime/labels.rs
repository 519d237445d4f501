//! Metric label sets more than one component counts by: a `reason` and a `result`, each value
//! one of the fixed vocabulary the counting component lists beside its metric.

use prometheus_client::encoding::EncodeLabelSet;

/// A `reason` label (why something was skipped or allowed).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    /// One of the component's reasons.
    pub reason: &'static str,
}

/// A `result` label (how an action ended).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    /// One of the component's results.
    pub result: &'static str,
}
