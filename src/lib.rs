//! disruption-guard: keeps node autoscalers from killing lone-replica pods while CI tests run.
//!
//! The crate is laid out in layers; each depends only on the ones above it in this list:
//! - [`resources`]: the `TestWindow` custom resource and the fixed names (annotations, labels).
//! - [`k8s`]: pure Kubernetes helpers several parts share (managedFields, trimming).
//! - [`runtime`]: what the components run on — client, shared caches, leader status,
//!   readiness, shutdown, identity.
//! - [`operations`]: the window operations (open, renew, close, …), their wire types and
//!   problems, shared by the HTTP API and the CI client.
//! - [`rollout`]: rolling a lone replica's Deployment out — the write, its re-check and the
//!   records it leaves — shared by the drain watcher and the eviction interception.
//! - [`window`]: the window controller — decides and applies protection for open windows.
//! - [`drain`]: the drain watcher — rolls out lone-replica Deployments on draining nodes.
//! - [`intercept`]: the eviction interception — a webhook that holds back evictions of lone
//!   replicas on draining nodes while their Deployment rolls out.
//! - [`api`]: the HTTP API CI calls to open, renew and close windows.
//! - [`operator`]: wiring — flags, the metrics registry, admin endpoints, start-up.
//! - [`client`]: the CI client (`open`, `close`, `run`, …) over the API or the cluster.
//! - [`cli`]: the command line (operator, CI client, `crd`, `openapi`).

pub mod api;
pub mod cli;
pub mod client;
pub mod drain;
pub mod intercept;
pub mod k8s;
pub mod operations;
pub mod operator;
pub mod resources;
pub mod respond;
pub mod rollout;
pub mod runtime;
pub mod telemetry;
#[cfg(test)]
mod testing;
pub mod window;
