//! The HTTP API's routes and the layers around them: body limit, panics as problems, the body
//! read, request ids, rate limit, metrics.

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use tower_http::catch_panic::CatchPanicLayer;

use super::openapi::serve_openapi;
use super::{ApiState, handlers, middleware};
use crate::operations::problem::ApiError;

/// The API's routes, with every middleware.
pub fn router(state: ApiState) -> Router {
    let limit = state.max_body_bytes;
    Router::new()
        .route(
            "/v1/namespaces/{namespace}/windows",
            post(handlers::open).get(handlers::list),
        )
        .route("/v1/windows", get(handlers::list_all))
        .route(
            "/v1/namespaces/{namespace}/windows/{name}",
            get(handlers::get).delete(handlers::close),
        )
        .route(
            "/v1/namespaces/{namespace}/windows/{name}/renew",
            post(handlers::renew),
        )
        .route("/v1/openapi.json", get(serve_openapi))
        .fallback(handlers::not_found)
        .layer(DefaultBodyLimit::max(limit))
        .layer(CatchPanicLayer::custom(|_| {
            // A bug, never the client's input: say so honestly, as a problem.
            ApiError::Internal("the server failed while answering; see its log".into())
                .into_response()
        }))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            middleware::read_body,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            middleware::observe,
        ))
        .with_state(state)
}
