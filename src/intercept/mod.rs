//! The eviction webhook: the API server sends every Eviction to the operator, which may
//! answer 429 like a PodDisruptionBudget does.
//!
//! - [`certs`]: the serving certificate and its CA, kept in a Secret all replicas share.
//! - [`tls`]: the HTTPS server, whose certificate is swapped without a restart.
//! - [`registration`]: the `ValidatingWebhookConfiguration` that sends evictions here.

pub mod certs;
pub mod registration;
pub mod tls;
