//! Errors of the HTTP API as `application/problem+json` (RFC 9457).
//!
//! Every failure a handler can meet is an [`ApiError`]; its status, `type` and `title` come
//! from the variant, its `detail` names the field and the rule that was broken. Nothing that
//! a client sends can turn into a 500: only a failure of the API server itself becomes a 5xx.

use std::time::Duration;

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::types::WindowView;

/// Media type of every error body.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// An RFC 9457 problem document.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct Problem {
    /// URI naming the kind of problem.
    #[serde(rename = "type")]
    pub type_: String,
    /// Short summary of the kind of problem.
    pub title: String,
    /// HTTP status code.
    pub status: u16,
    /// What went wrong with this request: the field and the rule.
    pub detail: String,
    /// The request path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// The window's state, when the problem is about a window that exists (a 504 wait, a 422
    /// `requirePods`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<Box<WindowView>>,
}

/// Everything that can go wrong while serving a request.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Malformed JSON or a malformed label selector.
    #[error("{0}")]
    BadRequest(String),
    /// No credentials, or credentials that are not valid.
    #[error("{0}")]
    Unauthenticated(String),
    /// The identity may not do this in this namespace.
    #[error("{0}")]
    Forbidden(String),
    /// No such window or route.
    #[error("{0}")]
    NotFound(String),
    /// Method not allowed on this route.
    #[error("{0}")]
    MethodNotAllowed(String),
    /// The request conflicts with the window's state.
    #[error("{0}")]
    Conflict(String),
    /// The body is larger than the limit.
    #[error("{0}")]
    PayloadTooLarge(String),
    /// The body did not arrive within `--body-read-timeout`.
    #[error("{0}")]
    BodyTimeout(String),
    /// The body is not JSON.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// A field is well-formed but not acceptable (e.g. the ttl).
    #[error("{0}")]
    Unprocessable(String),
    /// An `Idempotency-Key` already used with another request (IETF Idempotency-Key draft).
    #[error(
        "Idempotency-Key: {key:?} was already used with another request (window {window}); a \
         retry must send the same request, a new request needs a new key"
    )]
    KeyReused {
        /// The key.
        key: String,
        /// The window opened with it.
        window: String,
    },
    /// Too many requests from this client.
    #[error("{0}")]
    RateLimited(String),
    /// The identity already has the most `?wait` requests in progress it may have.
    #[error(
        "wait: {identity} already has {limit} waits in progress, the most one identity may \
         have (--max-waits-per-identity={limit}); retry once one ends, or ask without ?wait"
    )]
    TooManyWaits {
        /// Who asked.
        identity: String,
        /// The limit.
        limit: usize,
        /// When to ask again (`Retry-After`, whole seconds): when one of its waits is expected
        /// to end.
        retry_after: Duration,
    },
    /// The Kubernetes API server cannot be reached or failed.
    #[error("{0}")]
    Unavailable(String),
    /// A bug of the server, never the client's input (a handler panicked).
    #[error("{0}")]
    Internal(String),
    /// An open that asked `requirePods` made a window that selects no pod (closed again).
    #[error("{detail}")]
    NoPodsSelected {
        /// The field, the window and what became of it.
        detail: String,
        /// The window's state, closed.
        window: Box<WindowView>,
    },
    /// A wait ended before the window reached the awaited state.
    #[error("{detail}")]
    Timeout {
        /// What was awaited.
        detail: String,
        /// The window's state when the wait ended.
        window: Box<WindowView>,
    },
}

impl ApiError {
    /// HTTP status of the error.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::Unprocessable(_)
            | ApiError::KeyReused { .. }
            | ApiError::NoPodsSelected { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::RateLimited(_) | ApiError::TooManyWaits { .. } => {
                StatusCode::TOO_MANY_REQUESTS
            }
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::Timeout { .. } => StatusCode::GATEWAY_TIMEOUT,
        }
    }

    /// Fixed label for logs and metrics.
    pub fn category(&self) -> &'static str {
        match self {
            ApiError::BadRequest(_) => "bad-request",
            ApiError::Unauthenticated(_) => "unauthenticated",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::NotFound(_) => "not-found",
            ApiError::MethodNotAllowed(_) => "method-not-allowed",
            ApiError::Conflict(_) => "conflict",
            ApiError::PayloadTooLarge(_) => "payload-too-large",
            ApiError::BodyTimeout(_) => "body-timeout",
            ApiError::UnsupportedMediaType(_) => "unsupported-media-type",
            ApiError::Unprocessable(_) => "unprocessable",
            ApiError::KeyReused { .. } => "idempotency-key-reused",
            ApiError::NoPodsSelected { .. } => "no-pods-selected",
            ApiError::RateLimited(_) => "rate-limited",
            ApiError::TooManyWaits { .. } => "too-many-waits",
            ApiError::Unavailable(_) => "unavailable",
            ApiError::Internal(_) => "internal",
            ApiError::Timeout { .. } => "timeout",
        }
    }

    /// Maps a failure of a call to the Kubernetes API server.
    pub fn from_kube(err: kube::Error, what: &str) -> ApiError {
        match &err {
            kube::Error::Api(status) => match status.code {
                404 => ApiError::NotFound(format!("{what}: not found")),
                409 => ApiError::Conflict(format!("{what}: {}", status.message)),
                422 | 400 => ApiError::Unprocessable(format!("{what}: {}", status.message)),
                // The API server says 403 for three different things; only a missing RBAC
                // rule is the operator's fault.
                403 if status.message.contains("exceeded quota") => ApiError::Forbidden(format!(
                    "{what}: the namespace's ResourceQuota refuses it: {}",
                    status.message
                )),
                403 if status.message.contains("status unknown for quota") => {
                    ApiError::Unavailable(format!(
                        "{what}: the namespace's ResourceQuota has not counted windows yet, retry: {}",
                        status.message
                    ))
                }
                403 if status.message.contains("being terminated") => ApiError::Conflict(format!(
                    "{what}: the namespace is being deleted: {}",
                    status.message
                )),
                403 => ApiError::Unavailable(format!(
                    "{what}: the operator's own permissions do not allow this: {}",
                    status.message
                )),
                429 => ApiError::RateLimited(format!("{what}: the API server is busy, retry")),
                _ => ApiError::Unavailable(format!(
                    "{what}: the Kubernetes API server answered {}: {}",
                    status.code, status.message
                )),
            },
            // A request that cannot even be built comes from input that slipped through
            // validation: the client's fault, not the server's.
            kube::Error::BuildRequest(_) | kube::Error::HttpError(_) => {
                ApiError::BadRequest(format!("{what}: the request cannot be made: {err}"))
            }
            _ => ApiError::Unavailable(format!(
                "{what}: the Kubernetes API server is unreachable: {err}"
            )),
        }
    }

    /// The error an answer with `status` and body `text` stands for, when something other
    /// than a handler made it (axum's rejections: bad path, bad query, wrong method, body too
    /// large); `path` is the request's.
    pub fn from_status(status: StatusCode, text: String, path: &str) -> ApiError {
        let or = |text: String, default: String| if text.is_empty() { default } else { text };
        match status.as_u16() {
            400 => ApiError::BadRequest(text),
            401 => ApiError::Unauthenticated(text),
            403 => ApiError::Forbidden(text),
            404 => ApiError::NotFound(or(text, format!("no route for {path}"))),
            405 => ApiError::MethodNotAllowed(format!("method not allowed on {path}")),
            409 => ApiError::Conflict(text),
            413 => ApiError::PayloadTooLarge(format!("body: {text}")),
            415 => ApiError::UnsupportedMediaType(text),
            422 => ApiError::Unprocessable(text),
            429 => ApiError::RateLimited(text),
            _ => ApiError::Unavailable(or(text, "the server could not answer".into())),
        }
    }

    /// The problem document for a request to `instance`.
    pub fn to_problem(&self, instance: Option<String>) -> Problem {
        let status = self.status();
        let window = match self {
            ApiError::Timeout { window, .. } | ApiError::NoPodsSelected { window, .. } => {
                Some(window.clone())
            }
            _ => None,
        };
        Problem {
            type_: format!("https://disruption-guard.io/problems/{}", self.category()),
            title: status.canonical_reason().unwrap_or("Error").to_string(),
            status: status.as_u16(),
            detail: self.to_string(),
            instance,
            window,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let problem = self.to_problem(None);
        let mut resp = (self.status(), Json(problem)).into_response();
        let headers = resp.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if matches!(self, ApiError::Unauthenticated(_)) {
            headers.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"disruption-guard\""),
            );
        }
        if matches!(self, ApiError::RateLimited(_)) {
            headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if let ApiError::TooManyWaits { retry_after, .. } = &self {
            // When one of the identity's waits is expected to end, at least a second.
            headers.insert(
                header::RETRY_AFTER,
                HeaderValue::from(retry_after.as_secs().max(1)),
            );
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forbidden(message: &str) -> ApiError {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "reason": "Forbidden", "code": 403, "message": message
        }))
        .unwrap();
        ApiError::from_kube(kube::Error::Api(Box::new(status)), "opening window w")
    }

    #[test]
    fn a_403_of_the_api_server_is_told_apart_by_its_cause() {
        let quota = forbidden(
            "testwindows.disruption-guard.io \"w\" is forbidden: exceeded quota: windows, requested: count/testwindows.disruption-guard.io=1, used: 2, limited: 2",
        );
        assert_eq!(quota.status(), StatusCode::FORBIDDEN);
        assert!(quota.to_string().contains("ResourceQuota"), "{quota}");
        let terminating = forbidden(
            "testwindows.disruption-guard.io \"w\" is forbidden: unable to create new content in namespace shop because it is being terminated",
        );
        assert_eq!(terminating.status(), StatusCode::CONFLICT);
        let uncounted = forbidden(
            "testwindows.disruption-guard.io \"w\" is forbidden: status unknown for quota: windows, resources: count/testwindows.disruption-guard.io",
        );
        assert_eq!(uncounted.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(uncounted.to_string().contains("retry"), "{uncounted}");
        let rbac = forbidden(
            "testwindows.disruption-guard.io is forbidden: User \"system:serviceaccount:guard:dg\" cannot create resource \"testwindows\"",
        );
        assert_eq!(rbac.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            rbac.to_string().contains("operator's own permissions"),
            "{rbac}"
        );
    }

    #[test]
    fn an_unreachable_api_server_is_a_503_not_a_500() {
        let err = ApiError::from_kube(
            kube::Error::Service("connection refused".into()),
            "reading window w",
        );
        assert_eq!(err.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(err.to_string().contains("unreachable"), "{err}");
    }

    #[test]
    fn a_missing_object_is_a_404() {
        let status = kube::core::Status::failure("nope", "NotFound").with_code(404);
        let err = ApiError::from_kube(kube::Error::Api(Box::new(status)), "reading window w");
        assert_eq!(err.status(), StatusCode::NOT_FOUND);
    }

    #[test]
    fn a_reused_idempotency_key_is_a_422_naming_the_key() {
        let problem = ApiError::KeyReused {
            key: "ci-1".into(),
            window: "tw-1".into(),
        }
        .to_problem(None);
        assert_eq!(problem.status, 422);
        assert!(problem.type_.ends_with("/idempotency-key-reused"));
        assert!(problem.detail.contains(r#""ci-1""#), "{}", problem.detail);
    }

    #[test]
    fn a_wait_over_the_limit_is_a_429_with_retry_after_naming_the_limit() {
        let err = ApiError::TooManyWaits {
            identity: "static:ci".into(),
            limit: 50,
            retry_after: std::time::Duration::from_secs(2),
        };
        let problem = err.to_problem(None);
        assert_eq!(problem.status, 429);
        assert!(problem.type_.ends_with("/too-many-waits"));
        assert!(
            problem.detail.contains("--max-waits-per-identity=50")
                && problem.detail.contains("static:ci"),
            "{}",
            problem.detail
        );
        let resp = err.into_response();
        assert_eq!(resp.headers()[header::RETRY_AFTER], "2");
    }

    #[test]
    fn a_problem_names_its_status_and_detail() {
        let problem = ApiError::Unprocessable("ttl: must be at most 2h".into()).to_problem(None);
        assert_eq!(problem.status, 422);
        assert_eq!(problem.detail, "ttl: must be at most 2h");
        assert!(problem.type_.ends_with("/unprocessable"));
    }
}
