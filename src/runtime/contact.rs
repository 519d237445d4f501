//! Contact with the API server: a probe (`GET /version`) every [`EVERY`], bounded by as long,
//! tells [`Readiness`] whether the API server answers. Every watch rides the one connection the
//! probe uses, so an API server that does not answer means stale caches: the replica says it
//! is not ready until it answers again, and needs no restart for that.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::Client;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::Readiness;

/// Interval of the probe, and the longest it waits for an answer.
pub const EVERY: Duration = Duration::from_secs(5);

/// Probes the API server until shutdown.
pub async fn watch(client: Client, ready: Arc<Readiness>, shutdown: CancellationToken) {
    let mut answering = true;
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let answered = matches!(
            tokio::time::timeout(EVERY, client.apiserver_version()).await,
            Ok(Ok(_))
        );
        ready.api_server_answered(answered, Instant::now());
        match (answering, answered) {
            (true, false) => warn!("the API server does not answer; caches may be stale"),
            (false, true) => info!("the API server answers again"),
            _ => {}
        }
        answering = answered;
    }
}
