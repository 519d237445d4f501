//! What every handler checks of a request before it acts: the namespace and the window name
//! from the path, the JSON body, the `?wait` query and a slot among the identity's waits.

use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, header};
use serde::Deserialize;
use utoipa::IntoParams;

use super::ApiState;
use super::auth::Identity;
use super::waits::WaitSlot;
use crate::operations::problem::ApiError;

/// Header carrying the idempotency key of an open.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
/// Longest wait a request may ask for.
pub const MAX_WAIT: Duration = Duration::from_secs(600);
const DEFAULT_WAIT: Duration = Duration::from_secs(60);

/// `?wait=true&timeout=60s`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct WaitQuery {
    /// Answer only once the window is Ready (open) or released (close).
    #[serde(default)]
    pub wait: Option<bool>,
    /// How long to wait (Go duration, at most 10m; default 60s).
    #[serde(default)]
    pub timeout: Option<String>,
}

impl WaitQuery {
    /// The wait asked for, checked; `None` when the request does not wait.
    pub fn timeout(&self) -> Result<Option<Duration>, ApiError> {
        if self.wait != Some(true) {
            return Ok(None);
        }
        let timeout = match &self.timeout {
            None => DEFAULT_WAIT,
            Some(t) => crate::resources::duration::parse(t)
                .map_err(|e| ApiError::BadRequest(format!("timeout: {e}")))?,
        };
        if timeout > MAX_WAIT {
            return Err(ApiError::BadRequest("timeout: must be at most 10m".into()));
        }
        Ok(Some(timeout))
    }
}

/// Parses a JSON body: 415 unless it is JSON, 400 when malformed; an empty body is `{}`.
pub fn parse_body<T: serde::de::DeserializeOwned + Default>(
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let essence = content_type.split(';').next().unwrap_or("").trim();
    let json = essence.eq_ignore_ascii_case("application/json")
        || essence.to_ascii_lowercase().ends_with("+json");
    if !json {
        return Err(ApiError::UnsupportedMediaType(format!(
            "Content-Type: must be application/json, got {:?}",
            if content_type.is_empty() {
                "nothing"
            } else {
                content_type
            }
        )));
    }
    serde_json::from_slice(body).map_err(|e| ApiError::BadRequest(format!("body: {e}")))
}

/// A slot among the waits `who` may have in progress, when the request waits; taken before
/// the request changes anything, so a refused wait has applied nothing.
pub fn wait_slot(
    state: &ApiState,
    who: &Identity,
    wait: Option<Duration>,
) -> Result<Option<WaitSlot>, ApiError> {
    if wait.is_none() {
        return Ok(None);
    }
    match state.waits.try_acquire(&who.name) {
        Some(slot) => Ok(Some(slot)),
        None => {
            state.metrics.waits_refused.inc();
            Err(ApiError::TooManyWaits {
                identity: who.name.clone(),
                limit: state.waits.max_per_identity(),
            })
        }
    }
}

/// The namespace from the path: a valid name this operator serves (`--namespaces`).
pub fn check_scope(state: &ApiState, ns: &str) -> Result<(), ApiError> {
    if !crate::operations::selector::is_dns_subdomain(ns) || ns.len() > 63 {
        return Err(ApiError::NotFound(format!(
            "namespace: {ns:?} is not a valid namespace name"
        )));
    }
    if !state.runtime.in_scope(ns) {
        return Err(ApiError::Forbidden(format!(
            "namespace: this operator does not serve namespace {ns} (--namespaces)"
        )));
    }
    Ok(())
}

/// A window name from the path: one that no object can have is a 404 without asking.
pub fn check_name(ns: &str, name: &str) -> Result<(), ApiError> {
    if crate::operations::selector::is_dns_subdomain(name) {
        Ok(())
    } else {
        Err(ApiError::NotFound(format!(
            "window {name:?} does not exist in namespace {ns} (not a valid object name)"
        )))
    }
}
