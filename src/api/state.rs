//! What the HTTP API's handlers and middleware share.

use std::sync::Arc;

use super::{ApiMetrics, auth, ratelimit, waits};
use crate::operations::windows;
use crate::runtime::Runtime;

/// What the handlers share.
#[derive(Clone)]
pub struct ApiState {
    /// The runtime (client, scope, shutdown).
    pub runtime: Runtime,
    /// Largest accepted request body, in bytes (`--max-body-bytes`).
    pub max_body_bytes: usize,
    /// Time a client has to send a request's whole body (`--body-read-timeout`).
    pub body_read_timeout: std::time::Duration,
    /// Window operations.
    pub windows: windows::Windows,
    /// Authentication and authorization.
    pub auth: Arc<auth::Authenticator>,
    /// Per-client rate limit.
    pub limiter: Arc<ratelimit::RateLimiter>,
    /// Proxies whose `X-Forwarded-For` is believed (`--trusted-proxies`).
    pub trusted_proxies: Arc<Vec<ipnet::IpNet>>,
    /// The API's metrics.
    pub metrics: Arc<ApiMetrics>,
    /// `?wait` requests in progress per identity (`--max-waits-per-identity`).
    pub waits: Arc<waits::WaitLimiter>,
}
