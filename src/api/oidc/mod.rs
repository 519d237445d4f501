//! CI OIDC id-tokens (GitHub Actions, GitLab CI, Buildkite, …) as API credentials: no stored
//! secret, trust declared per namespace in `CITrust` objects.
//!
//! Routing, decided on the token's unverified `iss` ([`token::peek_issuer`]):
//! - `iss` is one of the operator's trusted issuers (`--oidc-issuer`): the token is verified
//!   here, and only here ([`keys`], [`token::check`]); any failure is a 401 naming the reason,
//!   and it is never passed on to TokenReview. Then the namespace's CITrusts decide
//!   ([`trust::decide`]), a 403 naming why when none grants.
//! - anything else (not a JWT, or another issuer: ServiceAccount tokens, or a CI issuer the
//!   cluster itself trusts through structured authentication) falls through to TokenReview and
//!   Kubernetes RBAC, unchanged.
//!
//! Files: [`token`] (header, claims, checks), [`issuers`] (each issuer's settings from the
//! flags), [`fetch`] (HTTPS, hosts, size limit), [`keys`] (discovery, JWKS, cache), [`jwks`]
//! (a JWKS's keys and a token's candidates, bounded), [`trust`] (CITrust matching), [`bounds`]
//! (a trust's bounds on the windows it lets open, renew and close), [`refusals`] (a refusal's
//! reasons, to the log and the trusts' Events), [`verifier`] (wires them to the CITrust
//! cache).

pub mod bounds;
pub mod fetch;
pub mod issuers;
pub mod jwks;
pub mod keys;
pub mod refusals;
pub mod token;
pub mod trust;
pub mod verifier;

pub use issuers::normalize_issuer;
pub use verifier::{
    CiToken, Settings, TRUSTS_SYNC_WAIT, TrustCache, Verifier, bound_close, bound_open,
    bound_renew, forbids,
};
