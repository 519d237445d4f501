//! How long a rollout may take to replace a lone replica before the guard stops waiting for it
//! (fail open): `--intercept-timeout` when set, else the Deployment's own
//! `progressDeadlineSeconds`, at most [`MAX_TIMEOUT`]. The eviction interception lets a held
//! eviction through after it; the EvictionRequest responder steps aside after it. Pure.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;

/// A Deployment's `progressDeadlineSeconds` when it sets none (the API default).
pub const DEFAULT_PROGRESS_DEADLINE: Duration = Duration::from_secs(600);
/// The longest an eviction is held back: the cap of `--intercept-timeout` and of a
/// Deployment's own deadline. A drainer that waits longer would rather not be held at all
/// (Cluster Autoscaler gives up after 2 minutes, a NodeClaim's terminationGracePeriod forces).
pub const MAX_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// How long the guard waits on a rollout of `deployment`: `flag` (`--intercept-timeout`) when
/// set, else the Deployment's `progressDeadlineSeconds` (how long it says a rollout may take);
/// at most [`MAX_TIMEOUT`] either way.
pub fn timeout(flag: Option<Duration>, deployment: &Deployment) -> Duration {
    flag.unwrap_or_else(|| {
        deployment
            .spec
            .as_ref()
            .and_then(|s| s.progress_deadline_seconds)
            .and_then(|s| u64::try_from(s).ok())
            .map_or(DEFAULT_PROGRESS_DEADLINE, Duration::from_secs)
    })
    .min(MAX_TIMEOUT)
}
