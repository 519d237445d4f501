//! The error responses several routes answer alike, each described once for the OpenAPI
//! document (`#[utoipa::path(responses(...))]` takes these types beside a route's own
//! responses). Every one is a problem+json [`Problem`]; a route whose answer to a status says
//! something of its own (a 403 naming a CI trust's bounds, a 409 of its own) keeps it inline.

use utoipa::IntoResponses;

use crate::operations::problem::Problem;

/// What every route may answer, whatever it does: the caller is not known, or the Kubernetes
/// API server cannot be reached.
#[derive(IntoResponses)]
pub enum Refused {
    #[response(
        status = 401,
        description = "No or invalid credentials",
        content_type = "application/problem+json"
    )]
    Unauthenticated(Problem),
    #[response(
        status = 503,
        description = "Kubernetes API server unreachable",
        content_type = "application/problem+json"
    )]
    Unavailable(Problem),
}

/// The 429 of a route that never waits.
#[derive(IntoResponses)]
#[response(status = 429, description = "Rate limited", content_type = "application/problem+json")]
pub struct RateLimited(pub Problem);

/// The 429 of a route that can wait (`?wait=true`): rate limited, or over the identity's waits.
#[derive(IntoResponses)]
#[response(
    status = 429,
    description = "Rate limited; or, with `wait`, the identity already has `--max-waits-per-identity` waits in progress (type `…/too-many-waits`, nothing applied); `Retry-After` says when to retry",
    content_type = "application/problem+json"
)]
pub struct RateLimitedOrTooManyWaits(pub Problem);

/// The 404 of a route that names a window.
#[derive(IntoResponses)]
#[response(status = 404, description = "No such window", content_type = "application/problem+json")]
pub struct NoSuchWindow(pub Problem);

/// What a route that reads a JSON body answers to a body it cannot read.
#[derive(IntoResponses)]
pub enum BodyRefused {
    #[response(
        status = 413,
        description = "Body too large",
        content_type = "application/problem+json"
    )]
    TooLarge(Problem),
    #[response(
        status = 415,
        description = "Body is not JSON",
        content_type = "application/problem+json"
    )]
    NotJson(Problem),
}

/// The 400 of a route that lists by label.
#[derive(IntoResponses)]
#[response(
    status = 400,
    description = "Malformed label selector",
    content_type = "application/problem+json"
)]
pub struct MalformedLabelSelector(pub Problem);
