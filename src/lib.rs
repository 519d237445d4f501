//! disruption-guard: keeps node autoscalers from killing lone-replica pods while CI tests run.
//!
//! The crate is laid out by concept:
//! - [`resources`]: the `TestWindow` custom resource and the fixed names (annotations, labels).
//! - [`window`]: the window controller — decides and applies protection for open windows.
//! - [`drain`]: the drain watcher — rolls out lone-replica Deployments on draining nodes.
//! - [`api`]: the HTTP API CI calls to open, renew and close windows.
//! - [`operator`]: wiring — shared state, admin endpoints, metrics, start-up and shutdown.
//! - [`client`]: the CI client (`open`, `close`, `run`, …) over the API or the cluster.
//! - [`cli`]: the command line (operator, CI client, `crd`, `openapi`).

pub mod api;
pub mod cli;
pub mod client;
pub mod drain;
pub mod operator;
pub mod resources;
pub mod telemetry;
pub mod window;
