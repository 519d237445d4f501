//! The command line: one binary, the in-cluster operator and the CI client.
//!
//! - `command`: [`Cli`] and its [`Command`]s, and running one;
//! - [`client`]: the CI client's commands; [`connection`]: how they reach the windows;
//! - [`check_webhook`]: proving that the API server calls the eviction webhook;
//! - [`crd`]: printing the CRDs; [`completion`]: shell completion scripts;
//! - [`invocation`]: the name it was invoked under (`kubectl guard` as a kubectl plugin).

pub mod check_webhook;
pub mod client;
mod command;
pub mod completion;
pub mod connection;
pub mod crd;
pub mod invocation;

pub use command::{Cli, Command};
