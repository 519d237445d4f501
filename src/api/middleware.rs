//! What every API request goes through: a request id (`x-request-id`, taken from the client
//! or made up) in a log span and the response, the per-client rate limit, metrics by route
//! template, and a guarantee that every error body is `application/problem+json`, even the
//! ones axum's own extractors produce.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use axum::body::Body;
use axum::extract::{ConnectInfo, MatchedPath, Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tracing::{Instrument, info, info_span, warn};

use super::ApiState;
use super::ratelimit::{RateKey, client_address};
use crate::operations::problem::{ApiError, PROBLEM_JSON};

/// Header carrying the request id.
pub const REQUEST_ID: &str = "x-request-id";

/// A request id for a request that brought none: process-unique and hard to guess.
fn new_request_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or_default();
    format!(
        "{:016x}{:08x}",
        nanos ^ (u64::from(std::process::id()) << 40),
        n
    )
}

fn method_label(method: &axum::http::Method) -> &'static str {
    match method.as_str() {
        "GET" => "GET",
        "POST" => "POST",
        "DELETE" => "DELETE",
        "PUT" => "PUT",
        "PATCH" => "PATCH",
        "HEAD" => "HEAD",
        "OPTIONS" => "OPTIONS",
        _ => "other",
    }
}

/// Request id, rate limit, log line, metrics and problem+json for every request.
pub async fn observe(State(state): State<ApiState>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let id = req
        .headers()
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 128 && v.bytes().all(|b| b.is_ascii_graphic()))
        .map(str::to_string)
        .unwrap_or_else(new_request_id);
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "unmatched".to_string());
    let method = method_label(req.method());
    let path = req.uri().path().to_string();
    let client = rate_key(&state, &req);
    let span = info_span!("request", request_id = %id, method, route = %route);

    let limited = client.as_ref().is_some_and(|key| !state.limiter.allow(key));
    let mut resp = if limited {
        ApiError::RateLimited("rate limit: too many requests from this client, retry later".into())
            .into_response()
    } else {
        next.run(req).instrument(span.clone()).await
    };
    if resp.status().is_client_error() || resp.status().is_server_error() {
        resp = as_problem(resp, &path).await;
    }
    if let Ok(value) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert(REQUEST_ID, value);
    }
    let code = resp.status().as_u16();
    let seconds = started.elapsed().as_secs_f64();
    state.metrics.observe(method, &route, code, seconds);
    span.in_scope(|| {
        if code >= 500 {
            warn!(code, path = %path, latency_ms = seconds * 1000.0, "request failed");
        } else {
            info!(code, path = %path, latency_ms = seconds * 1000.0, "request");
        }
    });
    resp
}

/// Whose bucket the request takes from: its identity when its credential is already known,
/// else its client address (see [`super::ratelimit`]).
fn rate_key(state: &ApiState, req: &Request) -> Option<RateKey> {
    if let Some(identity) = state.auth.known_identity(req.headers()) {
        return Some(RateKey::Identity(identity.name));
    }
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip())?;
    let forwarded: Vec<&str> = req
        .headers()
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    Some(RateKey::Address(client_address(
        peer,
        &forwarded,
        &state.trusted_proxies,
    )))
}

/// Reads the request's whole body, at most `--max-body-bytes`, within `--body-read-timeout`,
/// before anything else looks at the request: a client trickling its body is a 408 and its
/// connection is closed (hyper closes a connection whose body was not read to its end), so
/// it cannot hold a connection, nor a handler, for longer than that.
pub async fn read_body(State(state): State<ApiState>, req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    let limit = state.max_body_bytes;
    let read = axum::body::to_bytes(body, limit);
    match tokio::time::timeout(state.body_read_timeout, read).await {
        Ok(Ok(bytes)) => {
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
        Ok(Err(err)) if is_length_limit(&err) => {
            ApiError::PayloadTooLarge(format!("body: larger than {limit} bytes")).into_response()
        }
        Ok(Err(err)) => ApiError::BadRequest(format!("body: {err}")).into_response(),
        Err(_) => ApiError::BodyTimeout(format!(
            "body: not received within {}s (--body-read-timeout)",
            state.body_read_timeout.as_secs_f64()
        ))
        .into_response(),
    }
}

/// Whether reading a body failed because it passed the limit.
fn is_length_limit(err: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        if e.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = e.source();
    }
    false
}

/// Rewrites an error response that is not problem+json yet (axum's rejections: bad path,
/// bad query, wrong method, body too large) into one, keeping its status and its text.
async fn as_problem(resp: Response, path: &str) -> Response {
    let is_problem = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(PROBLEM_JSON.as_bytes()));
    let (parts, body) = resp.into_parts();
    let bytes = axum::body::to_bytes(body, 64 * 1024)
        .await
        .unwrap_or_default();
    if is_problem {
        let mut problem: serde_json::Value =
            serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
        if let Some(obj) = problem.as_object_mut() {
            obj.entry("instance")
                .or_insert_with(|| serde_json::Value::String(path.to_string()));
            let mut resp = Response::from_parts(parts, Body::from(problem.to_string()));
            resp.headers_mut().remove(header::CONTENT_LENGTH);
            return resp;
        }
        return Response::from_parts(parts, Body::from(bytes));
    }
    let text = String::from_utf8_lossy(&bytes).trim().to_string();
    let mut problem = ApiError::from_status(parts.status, text, path).to_problem(Some(path.into()));
    // The status axum chose stays, also where it maps to a generic problem (a 408 or a 500).
    problem.status = parts.status.as_u16();
    let mut out = Response::from_parts(
        parts,
        Body::from(serde_json::to_vec(&problem).unwrap_or_default()),
    );
    out.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
    out.headers_mut().remove(header::CONTENT_LENGTH);
    out
}
