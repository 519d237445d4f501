//! What every handler checks of a request before it acts: who asks and for which verb, the
//! namespace and the window name from the path ([`Authorized`], an extractor), the JSON body,
//! the `?wait` query and a slot among the identity's waits.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tracing::info;
use utoipa::IntoParams;

use super::ApiState;
use super::auth::Identity;
use super::oidc::bounds::OutOfBounds;
use super::verb::Verb;
use super::waits::WaitSlot;
use crate::operations::problem::ApiError;

/// What a route does to `testwindows`: the RBAC verb it needs in the namespace.
pub trait Action {
    const VERB: Verb;
}

macro_rules! actions {
    ($($(#[$doc:meta])* $name:ident => $verb:ident,)*) => {$(
        $(#[$doc])*
        pub struct $name;
        impl Action for $name {
            const VERB: Verb = Verb::$verb;
        }
    )*};
}

actions! {
    /// Open a window (`create`).
    Open => Create,
    /// Read one window (`get`).
    Read => Get,
    /// List a namespace's windows (`list`).
    List => List,
    /// Renew a window (`patch`).
    Renew => Patch,
    /// Close a window (`delete`).
    Close => Delete,
}

/// A request whose caller may do `A` in the namespace of its path, a namespace this operator
/// serves, on a window name that can exist (when the path names one). Checked in that order,
/// before the handler runs: authentication first, so a caller without credentials learns
/// nothing of the namespaces or names.
pub struct Authorized<A> {
    /// The namespace from the path.
    pub ns: String,
    /// The window name from the path; empty on a route without one.
    pub name: String,
    /// Who asks.
    pub who: Identity,
    action: PhantomData<A>,
}

impl<A: Action> FromRequestParts<ApiState> for Authorized<A> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, Response> {
        let Path(mut path) = Path::<HashMap<String, String>>::from_request_parts(parts, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let ns = path.remove("namespace").unwrap_or_default();
        let name = path.remove("name").unwrap_or_default();
        let checked = async {
            let who = state.auth.authorize(&parts.headers, &ns, A::VERB).await?;
            check_scope(state, &ns)?;
            if !name.is_empty() {
                check_name(&ns, &name)?;
            }
            Ok::<_, ApiError>(who)
        };
        let who = checked.await.map_err(IntoResponse::into_response)?;
        Ok(Authorized {
            ns,
            name,
            who,
            action: PhantomData,
        })
    }
}

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
        Ok(slot) => Ok(Some(slot)),
        Err(retry_after) => {
            state.metrics.waits_refused.inc();
            Err(ApiError::TooManyWaits {
                identity: who.name.clone(),
                limit: state.waits.max_per_identity(),
                retry_after,
            })
        }
    }
}

/// The 403 for a CI token's window outside the bounds of every trust granting it: the caller
/// hears the field and its own request; the trust and its bound go to the log, and the
/// refusal is counted by field.
pub fn out_of_bounds(
    state: &ApiState,
    ns: &str,
    who: &Identity,
    doing: &str,
    refused: OutOfBounds,
) -> ApiError {
    info!(namespace = %ns, identity = %who.name, doing, why = %refused.why, "CI token refused: outside its trusts' bounds");
    state.metrics.ci_refusal(refused.field);
    ApiError::Forbidden(refused.detail)
}

/// The namespace from the path: a valid name this operator serves (`--namespaces`).
fn check_scope(state: &ApiState, ns: &str) -> Result<(), ApiError> {
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
fn check_name(ns: &str, name: &str) -> Result<(), ApiError> {
    if crate::operations::selector::is_dns_subdomain(name) {
        Ok(())
    } else {
        Err(ApiError::NotFound(format!(
            "window {name:?} does not exist in namespace {ns} (not a valid object name)"
        )))
    }
}
