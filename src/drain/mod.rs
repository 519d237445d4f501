//! The drain watcher: rolls out lone-replica Deployments whose pod sits on a node that is being
//! drained, so the replacement starts elsewhere before the old pod goes.
//!
//! - [`decide`]: roll out, skip (and why) or ignore, for one pod on one node (pure; what a
//!   rollout can save is [`crate::rollout::workload`], shared with the eviction interception);
//! - [`stores`]: the narrow watches and reflector stores the decisions read;
//! - [`watcher`]: the loop from triggers to decisions, and the only writer — the shared
//!   rollout write ([`crate::rollout::restart`]) with this watcher's re-check, Events;
//! - [`ledger`]: what was already done, per (Deployment, node);
//! - `args`: its flags; `run`: starting it (both re-exported here).

mod args;
pub mod decide;
pub mod ledger;
mod metrics;
mod run;
pub mod stores;
pub mod watcher;

pub use crate::k8s::signals::Signal;
pub use crate::resources::names::ROLLED_OUT_FOR_NODE;
pub use crate::rollout::restart::Error;
pub use args::DrainArgs;
pub use metrics::DrainMetrics;
pub use run::run;
