//! The eviction webhook: the API server sends every Eviction to the operator, which may
//! answer 429 like a PodDisruptionBudget does.
//!
//! - [`certs`]: the serving certificate and its CA, kept in a Secret all replicas share.
//! - [`registration`]: the `ValidatingWebhookConfiguration` that sends evictions here.

pub mod certs;
pub mod registration;
