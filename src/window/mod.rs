//! The window controller: protects the pods the open `TestWindow`s of a namespace select, as
//! one protection per namespace, and releases what no window wants any more when a window
//! closes, expires or is deleted.
//!
//! Layout: [`timing`] decides phases and times, [`plan`] (with [`pdbs`]) decides the writes
//! (all pure, with [`report`] and the shared [`crate::k8s`] helpers), and
//! [`settling`] holds a new window's `Ready` back while its pods leave a node being disrupted;
//! [`limits`] narrows a window to what the admin's limits let it protect ([`node_cap`]: nodes
//! per namespace; who may protect DaemonSet pods);
//! [`changes`] decides whether a watched change matters, [`wakeups`] turns the watches into the
//! namespaces they wake ([`namespaces`]: the controller's keys);
//! [`apply`] makes the writes, [`unseen`] keeps them from being made twice;
//! [`reconcile`] runs gather → decide → apply for one namespace, and [`events`] each window's
//! status and Events; [`sweep`] feeds the namespaces where leftovers are, at start-up and then
//! periodically while this replica leads ([`startup`]);
//! `run` wires the watches and the controller, `args` holds its flags.

pub mod apply;
mod args;
pub mod changes;
pub mod context;
pub mod error;
mod events;
pub mod gauges;
pub mod held;
pub mod limits;
mod metrics;
pub mod model;
pub mod namespaces;
pub mod node_cap;
pub mod pdbs;
pub mod plan;
pub mod reconcile;
pub mod report;
mod run;
pub mod settling;
pub mod startup;
pub mod status;
pub mod status_write;
pub mod sweep;
pub mod timing;
pub mod unseen;
pub mod wakeups;

#[cfg(test)]
mod model_tests;
#[cfg(test)]
mod plan_tests;

pub use args::WindowArgs;
pub use metrics::WindowMetrics;
pub use run::run;
