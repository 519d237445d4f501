//! One shutdown signal for the whole process: SIGINT or SIGTERM cancels a token every task
//! watches.

use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;
use tracing::info;

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
