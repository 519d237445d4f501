//! Rolling a Deployment out so a lone replica moves without downtime: the one home of what the
//! drain watcher and the eviction interception share to do it.
//!
//! - [`restart`]: the rollout write — fresh re-check, the `restartedAt` patch once per
//!   (Deployment, node), conflict retries, its Events (I/O);
//! - [`record_writes`]: the hold record's write and the end of both records once the node's
//!   disruption is over (I/O).
//!
//! Layering: depends on [`crate::runtime`], [`crate::k8s`] and [`crate::resources`]; the
//! components (`drain`, `intercept`) use it. Nothing here imports a component.

pub mod record_writes;
pub mod restart;
