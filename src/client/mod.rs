//! The CI client: talks to the operator's HTTP API (`--server`, bearer token) or, with
//! `--kubeconfig`, straight to the cluster's `TestWindow` objects. Both speak the same
//! operations and return the same [`WindowView`](crate::operations::types::WindowView).
//!
//! - `backend`: [`Backend`], the operations over either; `http`: [`HttpBackend`], the API's
//!   requests; `waited`: how a wait ended;
//! - `error`: [`ClientError`] and the [`exit`] codes it maps to;
//! - [`credentials`]: the bearer token, from a file, a variable or the CI's id-token;
//! - [`retry`]: retries while the guard hiccups;
//! - [`run`]: `disruption-guard run -- <command>`; [`wait`]: waiting for Ready or released;
//! - [`output`]: what the commands print.

mod backend;
pub mod credentials;
mod error;
mod http;
pub mod output;
pub mod retry;
pub mod run;
pub mod wait;
mod waited;

pub use backend::{Backend, generated_key};
pub use error::{ClientError, exit};
pub use http::{HttpBackend, REQUEST_TIMEOUT};
