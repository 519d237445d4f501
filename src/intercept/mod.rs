//! The eviction interception: a validating admission webhook on `pods/eviction` that answers
//! 429 `TooManyRequests` (what a blocking PodDisruptionBudget answers, so every drainer
//! retries) to an eviction of a lone replica on a node being disrupted, and rolls its
//! Deployment out meanwhile, so the new pod starts elsewhere before the old one goes. No PDB,
//! no test window and no wasted node needed.
//!
//! - [`decide`]: allow (and why), deny, or allow after the timeout, for one eviction (pure);
//! - [`review`]: the AdmissionReview wire format, in and out;
//! - [`handler`]: `POST /evictions`, answered from the caches ([`handler::router`]);
//! - [`denials`]: what this replica remembers of the evictions it held back;
//! - [`limit`]: the rate limit per requester (client address, user, namespace) of the reviews
//!   that could hold an eviction (over it: allowed, nothing set going);
//! - [`act`]: what a deny sets going beside the answer — the shared rollout, Events, the wait
//!   for the old pod;
//! - [`probe`]: the dry-run eviction that proves the API server reaches the webhook, and
//!   the answer it gets;
//! - [`certs`]: the serving certificate and its CA, kept in a Secret all replicas share;
//! - [`tls`]: the HTTPS server, whose certificate is swapped without a restart;
//! - [`registration`]: the `ValidatingWebhookConfiguration` that sends evictions here;
//! - [`health`]: whether that registration would have the API server call this webhook, and
//!   when the served certificate expires (gauges computed at scrape time);
//! - [`serve`]: the three together, as the operator starts them;
//! - `args`: its flags; `run`: the webhook's state and router, until shutdown (both re-exported
//!   here).

pub mod act;
mod args;
pub mod certs;
pub mod decide;
pub mod denials;
pub mod handler;
pub mod health;
pub mod limit;
mod metrics;
pub mod probe;
pub mod registration;
pub mod review;
mod run;
pub mod serve;
pub mod tls;

pub use args::{DrainLimits, InterceptArgs};
pub use handler::{InterceptState, router};
pub use metrics::InterceptMetrics;
pub use run::run;
