//! The HTTP API that CI calls to open, renew, read and close test windows: a thin front over
//! `TestWindow` objects (the operations, their types and problems are in
//! [`crate::operations`]); the window controller does the rest, so any replica can serve it.
//!
//! - [`handlers`]: routes, one RBAC verb each; [`request`]: what each checks first.
//! - [`auth`], [`static_tokens`], [`oidc`] (CI id-tokens, `CITrust`): who may do what;
//!   [`ratelimit`]: per-client limits; [`waits`]: `?wait` requests in progress per identity,
//!   and [`wait_retry`]: when one refused should come back.
//! - [`serve`]: the HTTP server, its connection cap and header-read timeout.
//! - [`middleware`]: request ids, metrics, problem+json for every error; [`openapi`], with
//!   [`responses`]: the error responses routes share.

mod args;
pub mod auth;
pub mod handlers;
mod metrics;
pub mod middleware;
pub mod oidc;
pub mod openapi;
pub mod ratelimit;
pub mod request;
pub mod responses;
mod router;
mod run;
pub mod serve;
mod state;
pub mod static_tokens;
pub mod verb;
pub mod wait_retry;
pub mod waits;

pub use args::{ApiArgs, DEFAULT_TOKEN_AUDIENCE};
pub use metrics::ApiMetrics;
pub use router::router;
pub use run::serve;
pub use state::ApiState;
