//! The eviction webhook: the API server sends every Eviction to the operator, which may
//! answer 429 like a PodDisruptionBudget does.
//!
//! - [`certs`]: the serving certificate and its CA, kept in a Secret all replicas share.

pub mod certs;
