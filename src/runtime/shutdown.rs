//! One shutdown signal for the whole process: SIGINT or SIGTERM cancels a token every task
//! watches; and how a server lets the connections it still serves finish.

use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// How long a stopping server waits for the connections it still serves to finish.
pub const CONNECTION_DRAIN: Duration = Duration::from_secs(10);

/// Waits up to [`CONNECTION_DRAIN`] for `connections` to finish (each closes after its request
/// in flight once shutdown is signalled), then closes what is left; `server` names the server
/// in the log (`API`, `webhook`).
pub async fn drain_connections(mut connections: JoinSet<()>, server: &'static str) {
    let drained = tokio::time::timeout(CONNECTION_DRAIN, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        warn!(
            server,
            open = connections.len(),
            "connections still open after the drain timeout; closing them"
        );
        connections.abort_all();
    }
}

/// Returns a token that is cancelled on the first SIGINT or SIGTERM.
pub fn on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let cancel = token.clone();
    tokio::spawn(async move {
        let mut term = signal(SignalKind::terminate()).expect("installing SIGTERM handler");
        let mut int = signal(SignalKind::interrupt()).expect("installing SIGINT handler");
        tokio::select! {
            _ = term.recv() => info!(signal = "SIGTERM", "shutting down"),
            _ = int.recv() => info!(signal = "SIGINT", "shutting down"),
        }
        cancel.cancel();
    });
    token
}
