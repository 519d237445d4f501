//! The OpenAPI 3 document, generated from the handlers' annotations and the wire types.
//! Served at `/v1/openapi.json`, printed by `disruption-guard openapi`, kept in
//! `docs/openapi.json` (a test checks the copy is current).

use axum::http::header;
use axum::response::IntoResponse;
use utoipa::OpenApi;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};

use super::handlers;
use crate::operations::problem::Problem;
use crate::operations::types::{
    CiMeta, ConditionView, OpenRequest, PeakView, ProtectInput, ProtectedView, RenewRequest,
    ReportView, SelectorInput, SelectorObject, SelectorRequirement, WindowList, WindowView,
};
use crate::resources::OpenedBy;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "disruption-guard",
        description = "Open, renew, read and close test windows: while a window is open, the \
                       selected pods are protected from voluntary disruption (Karpenter, \
                       Cluster Autoscaler). Errors are application/problem+json (RFC 9457).",
        license(name = "Apache-2.0"),
    ),
    paths(
        handlers::open, handlers::list, handlers::list_all, handlers::get, handlers::renew, handlers::close,
        serve_openapi
    ),
    components(schemas(
        OpenRequest, RenewRequest, WindowView, WindowList, SelectorInput, SelectorObject,
        SelectorRequirement, CiMeta, OpenedBy, ProtectInput, ProtectedView, PeakView, ReportView, ConditionView, Problem
    )),
    modifiers(&Bearer),
    tags(
        (name = "windows", description = "Test windows"),
        (name = "meta", description = "About the API itself")
    )
)]
struct ApiDoc;

struct Bearer;

impl utoipa::Modify for Bearer {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "A Kubernetes token for audience --token-audience (TokenReview + \
                         SubjectAccessReview on testwindows), or a static token",
                    ))
                    .build(),
            ),
        );
    }
}

/// The document as pretty JSON with a trailing newline, exactly as `docs/openapi.json`.
pub fn json() -> String {
    let mut doc = ApiDoc::openapi();
    doc.info.version = env!("CARGO_PKG_VERSION").to_string();
    let mut out = doc
        .to_pretty_json()
        .expect("the OpenAPI document serializes");
    out.push('\n');
    out
}

/// This document.
#[utoipa::path(
    get, path = "/v1/openapi.json", tag = "meta", security(()),
    responses((status = 200, description = "The OpenAPI document of this API", body = Object, content_type = "application/json"))
)]
pub(crate) async fn serve_openapi() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], json())
}
