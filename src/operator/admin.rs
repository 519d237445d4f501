//! Admin endpoints on their own port: `/metrics` (Prometheus text), `/healthz` (alive) and
//! `/readyz` (every watch synced and not shutting down).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Mutex;

use anyhow::Context as _;
use axum::Router;
use axum::extract::State as AxumState;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tracing::info;

use super::State;

/// Readiness gates: each component registers a name and marks it synced.
#[derive(Debug, Default)]
pub struct Readiness {
    gates: Mutex<BTreeMap<&'static str, bool>>,
}

impl Readiness {
    /// Registers a gate that is not yet synced.
    pub fn register(&self, name: &'static str) {
        self.gates
            .lock()
            .expect("readiness lock")
            .entry(name)
            .or_insert(false);
    }

    /// Marks a gate synced.
    pub fn mark_synced(&self, name: &'static str) {
        let mut gates = self.gates.lock().expect("readiness lock");
        let was_ready = gates.values().all(|ok| *ok);
        gates.insert(name, true);
        let now_ready = gates.values().all(|ok| *ok);
        drop(gates);
        if !was_ready && now_ready {
            // Every initial list is parsed: their buffers can go back to the system.
            super::memory::release_free_pages();
        }
    }

    /// Names of gates that are not yet synced.
    pub fn pending(&self) -> Vec<&'static str> {
        let gates = self.gates.lock().expect("readiness lock");
        gates
            .iter()
            .filter(|(_, ok)| !**ok)
            .map(|(name, _)| *name)
            .collect()
    }
}

/// Serves the admin endpoints until shutdown.
pub async fn serve(addr: SocketAddr, state: State) -> anyhow::Result<()> {
    let shutdown = state.shutdown.clone();
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the admin address {addr}"))?;
    info!(addr = %listener.local_addr()?, "admin endpoints listening");
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
        .context("serving admin endpoints")
}

async fn readyz(AxumState(state): AxumState<State>) -> impl IntoResponse {
    if state.shutdown.is_cancelled() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting down\n".to_string(),
        );
    }
    let pending = state.ready.pending();
    if pending.is_empty() {
        (StatusCode::OK, "ok\n".to_string())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not synced: {}\n", pending.join(", ")),
        )
    }
}

async fn metrics(AxumState(state): AxumState<State>) -> impl IntoResponse {
    state
        .metrics
        .leader
        .set(i64::from(state.leader.is_leader()));
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.encode(),
    )
}
