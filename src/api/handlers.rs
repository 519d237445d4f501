//! The HTTP handlers: each takes its request [`Authorized`] for its verb (permission, scope,
//! name: [`super::request`]), parses the body, calls [`Windows`], answers.
//!
//! Each route needs one RBAC verb on `testwindows` in the namespace: open `create`, get
//! `get`, list `list`, renew `patch`, close `delete`; the list of every namespace needs `list`
//! cluster-wide.
//!
//! [`Windows`]: crate::operations::windows::Windows

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tracing::info;
use utoipa::IntoParams;

use super::ApiState;
use super::auth::Verb;
use super::oidc::{bound_close, bound_open, bound_renew};
use super::request::{
    Authorized, Close, IDEMPOTENCY_KEY, List, Open, Read, Renew, WaitQuery, out_of_bounds,
    parse_body, wait_slot,
};
use super::responses::{
    BodyRefused, MalformedLabelSelector, NoSuchWindow, RateLimited, RateLimitedOrTooManyWaits,
    Refused,
};
use crate::operations::problem::{ApiError, Problem};
use crate::operations::types::{OpenRequest, RenewRequest, WindowList, WindowView};
use crate::operations::windows::is_released;

fn view(status: StatusCode, tw: &crate::resources::TestWindow) -> Response {
    (status, Json(WindowView::from_window(tw))).into_response()
}

/// Open a window.
#[utoipa::path(
    post, path = "/v1/namespaces/{namespace}/windows", tag = "windows",
    params(
        ("namespace" = String, Path, description = "Namespace of the pods to protect"),
        ("Idempotency-Key" = Option<String>, Header, description = "A retried open with the same key and the same request returns the same window; the key reused with another request is a 422"),
        WaitQuery,
    ),
    request_body = OpenRequest,
    responses(
        (status = 201, description = "Opened", body = WindowView),
        (status = 200, description = "Already opened with this idempotency key and this request", body = WindowView),
        (status = 400, description = "Malformed JSON or selector", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Not allowed in this namespace, or refused by its ResourceQuota; or, with a CI token, the ttl, selector or `protect.daemonSets` is outside the bounds of every CITrust granting it `open` (the detail names the field)", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Name taken, or the namespace is being deleted, or (with `wait`) the window ended before its protection was in effect", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid ttl, name or reason; or the Idempotency-Key was already used with another request (type `…/idempotency-key-reused`, the detail names the key); or `requirePods` without `wait`; or, with `requirePods` and `wait`, the window is Ready over no pod (type `…/no-pods-selected`, the detail names `requirePods` and the selector, `window` holds its state): it was closed again", body = Problem, content_type = "application/problem+json"),
        (status = 504, description = "Not Ready within the timeout; `window` holds its state", body = Problem, content_type = "application/problem+json"),
        Refused, RateLimitedOrTooManyWaits, BodyRefused,
    ),
    security(("bearer" = []))
)]
pub async fn open(
    State(state): State<ApiState>,
    Query(query): Query<WaitQuery>,
    Authorized { ns, who, .. }: Authorized<Open>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let wait = query.timeout()?;
    let mut req: OpenRequest = parse_body(&headers, &body)?;
    if req.require_pods && wait.is_none() {
        return Err(ApiError::Unprocessable(
            "requirePods: needs ?wait=true: whether the window selects a pod is known once it \
             is Ready"
                .into(),
        ));
    }
    if let Some(ci) = &who.ci {
        let limits = state.windows.limits();
        let default = limits.default.min(limits.max);
        if let Some(ttl) = bound_open(
            &ci.granted,
            req.ttl.as_deref(),
            default,
            req.selector.as_ref(),
            req.protect.as_ref().is_some_and(|p| p.daemon_sets),
        )
        .map_err(|refused| out_of_bounds(&state, &ns, &who, "open", refused))?
        {
            req.ttl = Some(ttl);
        }
    }
    let _slot = wait_slot(&state, &who, wait)?;
    let header_key = match headers.get(IDEMPOTENCY_KEY) {
        Some(v) => Some(v.to_str().map_err(|_| {
            ApiError::BadRequest("Idempotency-Key: must be printable ASCII".into())
        })?),
        None => None,
    };
    let key = header_key.or(req.idempotency_key.as_deref());
    let (tw, created) = state
        .windows
        .open(&ns, &req, key, Some(who.opened_by()))
        .await?;
    let name = kube::ResourceExt::name_any(&tw);
    info!(namespace = %ns, window = %name, created, identity = %who.name, "window opened");
    let tw = match wait {
        // Ended while the client waited (e.g. a short ttl ran out first) is a 409 at once.
        Some(timeout) => {
            let require_pods = req.require_pods;
            (state.windows)
                .wait_ready(&ns, &name, timeout, tw, require_pods)
                .await?
        }
        None => tw,
    };
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let mut resp = view(status, &tw);
    if let Ok(loc) = format!("/v1/namespaces/{ns}/windows/{name}").parse() {
        resp.headers_mut().insert(header::LOCATION, loc);
    }
    Ok(resp)
}

/// `?labelSelector=team=shop,ci`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only windows whose labels match this selector (Kubernetes text syntax, as `kubectl -l`).
    #[serde(default, rename = "labelSelector")]
    #[param(rename = "labelSelector")]
    pub label_selector: Option<String>,
}

/// List the windows of a namespace.
#[utoipa::path(
    get, path = "/v1/namespaces/{namespace}/windows", tag = "windows",
    params(("namespace" = String, Path, description = "Namespace"), ListQuery),
    responses(
        (status = 200, description = "The windows", body = WindowList),
        (status = 403, description = "Not allowed in this namespace", body = Problem, content_type = "application/problem+json"),
        Refused, RateLimited, MalformedLabelSelector,
    ),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<ApiState>,
    Query(query): Query<ListQuery>,
    Authorized { ns, .. }: Authorized<List>,
) -> Result<Json<WindowList>, ApiError> {
    let labels = query.label_selector.as_deref();
    Ok(Json(state.windows.list(Some(&ns), labels).await?))
}

/// List the windows of every namespace this operator serves (`kubectl get -A`). Needs `list`
/// on `testwindows` in every namespace (a cluster-wide grant), as `kubectl get -A` does.
#[utoipa::path(
    get, path = "/v1/windows", tag = "windows",
    params(ListQuery),
    responses(
        (status = 200, description = "The windows, by namespace and name", body = WindowList),
        (status = 403, description = "Not allowed in every namespace", body = Problem, content_type = "application/problem+json"),
        Refused, RateLimited, MalformedLabelSelector,
    ),
    security(("bearer" = []))
)]
pub async fn list_all(
    State(state): State<ApiState>,
    Query(query): Query<ListQuery>,
    headers: HeaderMap,
) -> Result<Json<WindowList>, ApiError> {
    state.auth.authorize(&headers, "", Verb::List).await?;
    let mut list = state
        .windows
        .list(None, query.label_selector.as_deref())
        .await?;
    list.items.retain(|w| state.runtime.in_scope(&w.namespace));
    Ok(Json(list))
}

/// Read one window: its state and report.
#[utoipa::path(
    get, path = "/v1/namespaces/{namespace}/windows/{name}", tag = "windows",
    params(("namespace" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Window")),
    responses(
        (status = 200, description = "The window", body = WindowView),
        (status = 403, description = "Not allowed in this namespace", body = Problem, content_type = "application/problem+json"),
        Refused, RateLimited, NoSuchWindow,
    ),
    security(("bearer" = []))
)]
pub async fn get(
    State(state): State<ApiState>,
    Authorized { ns, name, .. }: Authorized<Read>,
) -> Result<Response, ApiError> {
    Ok(view(StatusCode::OK, &state.windows.get(&ns, &name).await?))
}

/// Renew a window: it ends `ttl` from now (capped by the maximum).
#[utoipa::path(
    post, path = "/v1/namespaces/{namespace}/windows/{name}/renew", tag = "windows",
    params(("namespace" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Window")),
    request_body = RenewRequest,
    responses(
        (status = 200, description = "Renewed", body = WindowView),
        (status = 400, description = "Malformed JSON", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Not allowed in this namespace; or, with a CI token, the ttl or the window's stored selector or `protect.daemonSets` is outside the bounds of every CITrust granting it `renew` (the detail names the field)", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The window has ended", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid ttl", body = Problem, content_type = "application/problem+json"),
        Refused, RateLimited, NoSuchWindow, BodyRefused,
    ),
    security(("bearer" = []))
)]
pub async fn renew(
    State(state): State<ApiState>,
    Authorized { ns, name, who, .. }: Authorized<Renew>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let req: RenewRequest = parse_body(&headers, &body)?;
    let default = state.windows.limits().default;
    let tw = state
        .windows
        .renew(&ns, &name, &req, jiff::Timestamp::now(), |window| {
            match &who.ci {
                // The window's own selector is what the trust's bounds must admit.
                Some(ci) => bound_renew(&ci.granted, req.ttl.as_deref(), default, window)
                    .map_err(|refused| out_of_bounds(&state, &ns, &who, "renew", refused)),
                None => Ok(None),
            }
        })
        .await?;
    info!(namespace = %ns, window = %name, identity = %who.name, "window renewed");
    Ok(view(StatusCode::OK, &tw))
}

/// Close a window and return its report; closing a closed window is not an error.
#[utoipa::path(
    delete, path = "/v1/namespaces/{namespace}/windows/{name}", tag = "windows",
    params(("namespace" = String, Path, description = "Namespace"), ("name" = String, Path, description = "Window"), WaitQuery),
    responses(
        (status = 200, description = "Closed; `report` says whether anything was disrupted", body = WindowView),
        (status = 403, description = "Not allowed in this namespace; or, with a CI token, the window's selector is outside the bounds of every CITrust granting it `close`", body = Problem, content_type = "application/problem+json"),
        (status = 504, description = "Protection not released within the timeout", body = Problem, content_type = "application/problem+json"),
        Refused, RateLimitedOrTooManyWaits, NoSuchWindow,
    ),
    security(("bearer" = []))
)]
pub async fn close(
    State(state): State<ApiState>,
    Query(query): Query<WaitQuery>,
    Authorized { ns, name, who, .. }: Authorized<Close>,
) -> Result<Response, ApiError> {
    let wait = query.timeout()?;
    let _slot = wait_slot(&state, &who, wait)?;
    let tw = state
        .windows
        .close(&ns, &name, |window| match &who.ci {
            // A trust bounded to a selector closes only the windows within it.
            Some(ci) => bound_close(&ci.granted, window)
                .map_err(|refused| out_of_bounds(&state, &ns, &who, "close", refused)),
            None => Ok(()),
        })
        .await?;
    info!(namespace = %ns, window = %name, identity = %who.name, "window closed");
    let tw = match wait {
        Some(timeout) => {
            state
                .windows
                .wait(&ns, &name, timeout, "released", is_released, tw)
                .await?
        }
        None => tw,
    };
    Ok(view(StatusCode::OK, &tw))
}

/// Any other path.
pub async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::NotFound(format!("no route for {}", uri.path()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json_headers() -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_TYPE, "application/json".parse().unwrap());
        h
    }

    #[test]
    fn an_empty_body_is_an_empty_request() {
        let req: RenewRequest = parse_body(&HeaderMap::new(), &Bytes::new()).unwrap();
        assert_eq!(req, RenewRequest::default());
    }

    #[test]
    fn a_body_that_is_not_json_is_415_and_malformed_json_is_400() {
        let err = parse_body::<RenewRequest>(&HeaderMap::new(), &Bytes::from("{}")).unwrap_err();
        assert_eq!(err.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
        let err = parse_body::<RenewRequest>(&json_headers(), &Bytes::from("{")).unwrap_err();
        assert_eq!(err.status(), StatusCode::BAD_REQUEST);
        let err = parse_body::<RenewRequest>(&json_headers(), &Bytes::from(r#"{"tll":"5m"}"#))
            .unwrap_err();
        assert!(err.to_string().contains("tll"), "{err}");
    }

    #[test]
    fn a_wait_longer_than_ten_minutes_is_refused() {
        let q = WaitQuery {
            wait: Some(true),
            timeout: Some("11m".into()),
        };
        assert!(q.timeout().is_err());
        let q = WaitQuery {
            wait: None,
            timeout: Some("11m".into()),
        };
        assert_eq!(q.timeout().unwrap(), None);
    }
}
