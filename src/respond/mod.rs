//! The EvictionRequest responder `disruption-guard.io/rollout` (Kubernetes 1.38,
//! `lifecycle.k8s.io/v1alpha1`, alpha, off unless `--respond-evictions`): when the
//! `evictionrequest-controller` makes the guard the Active responder of a pod's Eviction, it
//! rolls the pod's Deployment out through the same guarded write as the drain watcher and the
//! webhook ([`crate::rollout::restart`]), reports progress, and completes once the new pod is
//! Ready; what a rollout cannot save it hands over at once to the next responder (in the end
//! the imperative evictor).
//!
//! - [`eviction`]: the Eviction type, as far as the responder reads it;
//! - [`decide`]: the next step for one Eviction (pure);
//! - [`act`]: the writes — the rollout, `evictions/status` by server-side apply, Events;
//! - `args`, `metrics`, `run` (the watch and the loop; idle when the API is not served).

pub mod act;
mod args;
pub mod decide;
pub mod eviction;
mod metrics;
pub mod run;

pub use args::RespondArgs;
pub use metrics::RespondMetrics;
pub use run::run;
