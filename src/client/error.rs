//! How a client operation fails, and the exit code each failure gives CI.

use std::time::Duration;

use crate::operations::problem::{ApiError, Problem};

/// Exit codes of the client (sysexits), documented in docs/api.md.
pub mod exit {
    /// A request was refused as invalid (400, 409, 413, 415, 422).
    pub const INVALID: u8 = 65;
    /// No such window (404).
    pub const NOT_FOUND: u8 = 66;
    /// The server or the cluster is unreachable or failing (5xx, connection errors).
    pub const UNAVAILABLE: u8 = 69;
    /// Timed out waiting, or rate limited: try again (429, 504).
    pub const TEMPFAIL: u8 = 75;
    /// Missing or refused credentials (401, 403).
    pub const NOPERM: u8 = 77;
    /// Bad usage or configuration of the client itself.
    pub const CONFIG: u8 = 78;
}

/// A failed client operation.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with a problem document.
    #[error("{} {}: {}", .problem.status, .problem.title, .problem.detail)]
    Api {
        /// The problem it sent.
        problem: Box<Problem>,
        /// How long its `Retry-After` header asked to wait.
        retry_after: Option<Duration>,
    },
    /// The server could not be reached, or the connection broke before the answer was read.
    #[error("{0}")]
    Unreachable(String),
    /// The server sent something that is not the API.
    #[error("{0}")]
    Transport(String),
    /// The client is misconfigured.
    #[error("{0}")]
    Config(String),
    /// A signal stopped the client before it was done.
    #[error("interrupted by {name}")]
    Interrupted {
        /// SIGTERM or SIGINT.
        name: &'static str,
        /// 128 + the signal number.
        code: u8,
    },
}

impl ClientError {
    /// The exit code that tells CI what kind of failure this was.
    pub fn exit_code(&self) -> u8 {
        match self {
            ClientError::Api { problem, .. } => match problem.status {
                401 | 403 => exit::NOPERM,
                404 => exit::NOT_FOUND,
                429 | 504 => exit::TEMPFAIL,
                400..=499 => exit::INVALID,
                _ => exit::UNAVAILABLE,
            },
            ClientError::Unreachable(_) | ClientError::Transport(_) => exit::UNAVAILABLE,
            ClientError::Config(_) => exit::CONFIG,
            ClientError::Interrupted { code, .. } => *code,
        }
    }
}

impl From<ApiError> for ClientError {
    fn from(err: ApiError) -> Self {
        ClientError::Api {
            problem: Box::new(err.to_problem(None)),
            retry_after: None,
        }
    }
}
