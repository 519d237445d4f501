//! Admin endpoints on their own port: `/metrics` (Prometheus text), `/healthz` (alive) and
//! `/readyz` (every watch synced, the API server answering, not shutting down).

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use axum::Router;
use axum::extract::State as AxumState;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tracing::info;

use super::Metrics as Registry;
use crate::runtime::Runtime;

/// What the admin endpoints read.
#[derive(Clone)]
struct Admin {
    runtime: Runtime,
    metrics: Arc<Registry>,
}

/// Serves the admin endpoints until shutdown.
pub async fn serve(
    addr: SocketAddr,
    runtime: Runtime,
    registry: Arc<Registry>,
) -> anyhow::Result<()> {
    let shutdown = runtime.shutdown.clone();
    let state = Admin {
        runtime,
        metrics: registry,
    };
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

async fn readyz(AxumState(state): AxumState<Admin>) -> impl IntoResponse {
    if state.runtime.shutdown.is_cancelled() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting down\n".to_string(),
        );
    }
    let pending = state.runtime.ready.pending(std::time::Instant::now());
    if pending.is_empty() {
        (StatusCode::OK, "ok\n".to_string())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{}\n", pending.join("; ")),
        )
    }
}

async fn metrics(AxumState(state): AxumState<Admin>) -> impl IntoResponse {
    state
        .metrics
        .leader
        .set(i64::from(state.runtime.leader.is_leader()));
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.encode(),
    )
}
