//! Rolling a Deployment out so a lone replica moves without downtime: the one home of what the
//! drain watcher and the eviction interception share to do it.
//!
//! Pure:
//! - [`deadline`]: how long a rollout may take before the guard stops waiting for it;
//! - [`strategy`]: how a Deployment rolls, resolved as the deployment controller resolves it;
//! - [`workload`]: what a rollout can save — a pod's owner chain and whether its Deployment
//!   surges a new pod before the old one goes;
//! - [`target`]: what a rollout is for — the Deployment, the pod and the disrupted node;
//! - [`records`]: the records a rollout and a held eviction leave on the Deployment, the
//!   patches that write them, and when they end.
//!
//! I/O:
//! - [`restart`]: the rollout write — fresh re-check, the `restartedAt` patch once per
//!   (Deployment, node), conflict retries, its Events;
//! - [`record_writes`]: the hold record's write and the end of both records once the node's
//!   disruption is over.
//!
//! Layering: depends on [`crate::runtime`], [`crate::k8s`] and [`crate::resources`]; the
//! components (`drain`, `intercept`) use it. Nothing here imports a component.

pub mod deadline;
pub mod record_writes;
pub mod records;
pub mod restart;
pub mod strategy;
pub mod target;
pub mod workload;
