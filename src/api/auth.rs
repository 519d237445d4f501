//! Authentication and authorization of API requests.
//!
//! Three kinds of bearer token are accepted, looked at in this order:
//! 1. static tokens (from a Secret or a file), each allowed in a list of namespaces, compared
//!    in constant time — for CI systems outside the cluster;
//! 2. CI OIDC id-tokens whose `iss` is a trusted issuer (`--oidc-issuer`), verified by the
//!    operator and authorized by the namespace's `CITrust` objects ([`super::oidc`]); a token of
//!    any other issuer goes on to 3;
//! 3. Kubernetes tokens (ServiceAccount, projected, `kubectl create token --audience …`),
//!    verified with a TokenReview for `--token-audience`, then authorized with a
//!    SubjectAccessReview on `testwindows.disruption-guard.io` in the namespace: Kubernetes
//!    RBAC is the policy. Positive answers are cached for [`CACHE_TTL`].

use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use axum::http::{HeaderMap, header};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};
use subtle::ConstantTimeEq;

use super::oidc::bounds::Granted;
use super::oidc::{CiToken, Verifier};
use super::static_tokens::StaticToken;
pub use super::verb::Verb;
use crate::operations::deadline::bounded;
use crate::operations::problem::ApiError;
use crate::resources::OpenedBy;
use crate::resources::names::GROUP;
use crate::runtime::fresh_cache::FreshCache;

/// How long an allowed (token, namespace, verb) stays cached.
pub const CACHE_TTL: Duration = Duration::from_secs(10);
const CACHE_MAX: usize = 10_000;
/// Most bytes each of the two caches holds, weighed by [`weigh`]: 10,000 entries of a
/// typical token (ServiceAccount and CI tokens are about 1 KiB) fit, while a client sending
/// tokens of hundreds of KiB (as long as the request's headers allow) pushes out entries
/// instead of growing the process by gigabytes.
pub const CACHE_MAX_BYTES: usize = 16 * 1024 * 1024;

/// (token, namespace, verb) of a cached positive answer.
type CacheKey = (String, String, Verb);

/// Who made a request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Identity {
    /// User name (`system:serviceaccount:ns:sa`), static token name (`static:<name>`) or CI
    /// token (`oidc:<iss>#<sub>`).
    pub name: String,
    /// For a CI id-token: the token and the CITrusts that granted this request.
    pub ci: Option<Arc<CiGrant>>,
}

/// A CI id-token and the trusts that let it make the request.
#[derive(Debug, PartialEq)]
pub struct CiGrant {
    /// The verified token.
    pub token: CiToken,
    /// The matching trusts that grant the verb (at least one).
    pub granted: Vec<Granted>,
}

impl Identity {
    /// An identity known by its name only (static and Kubernetes tokens).
    pub fn named(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            ci: None,
        }
    }

    /// What a window opened by this identity records.
    pub fn opened_by(&self) -> OpenedBy {
        match &self.ci {
            Some(ci) => ci
                .token
                .opened_by(ci.granted.first().map(|g| g.trust.as_str())),
            None => OpenedBy {
                name: self.name.clone(),
                ..Default::default()
            },
        }
    }
}

/// Checks credentials and permissions.
pub struct Authenticator {
    client: Client,
    audience: String,
    disabled: bool,
    static_tokens: RwLock<Vec<StaticToken>>,
    /// CI id-tokens of the trusted issuers, when `--oidc-issuer` names any.
    oidc: OnceLock<Arc<Verifier>>,
    cache: FreshCache<CacheKey, Identity>,
    /// Tokens authenticated and authorized lately, with their identity: the rate limit's key.
    reviewed: FreshCache<String, Identity>,
}

/// The bearer token of a request, if it carries one.
pub fn bearer(headers: &HeaderMap) -> Result<&str, ApiError> {
    let value = headers.get(header::AUTHORIZATION).ok_or_else(|| {
        ApiError::Unauthenticated("Authorization: a bearer token is required".into())
    })?;
    let value = value.to_str().map_err(|_| {
        ApiError::Unauthenticated("Authorization: the header is not valid text".into())
    })?;
    let (scheme, token) = value.split_once(' ').ok_or_else(|| {
        ApiError::Unauthenticated("Authorization: must be `Bearer <token>`".into())
    })?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return Err(ApiError::Unauthenticated(
            "Authorization: must be `Bearer <token>`".into(),
        ));
    }
    Ok(token)
}

/// The static token equal to `presented`, looking at every entry (constant time per entry).
pub fn find_static<'a>(tokens: &'a [StaticToken], presented: &str) -> Option<&'a StaticToken> {
    let mut found = None;
    for t in tokens {
        if bool::from(t.token.as_bytes().ct_eq(presented.as_bytes())) {
            found = Some(t);
        }
    }
    found
}

impl Authenticator {
    /// An authenticator for `audience`; `disabled` lets every request through.
    pub fn new(client: Client, audience: String, disabled: bool) -> Self {
        Self {
            client,
            audience,
            disabled,
            static_tokens: RwLock::new(Vec::new()),
            oidc: OnceLock::new(),
            cache: FreshCache::new(CACHE_MAX, CACHE_TTL)
                .with_max_bytes(CACHE_MAX_BYTES, |(token, ns, _), who| weigh(token, ns, who)),
            reviewed: FreshCache::new(CACHE_MAX, CACHE_TTL)
                .with_max_bytes(CACHE_MAX_BYTES, |token, who| weigh(token, "", who)),
        }
    }

    /// The identity of the request's credential when it is already known without asking the
    /// API server: a static token, or a Kubernetes token authenticated in the last
    /// [`CACHE_TTL`]. Whether it may do anything is not checked here.
    pub fn known_identity(&self, headers: &HeaderMap) -> Option<Identity> {
        if self.disabled {
            return None;
        }
        let token = bearer(headers).ok()?;
        {
            let tokens = self.static_tokens.read().expect("static tokens lock");
            if let Some(t) = find_static(&tokens, token) {
                return Some(Identity::named(format!("static:{}", t.name)));
            }
        }
        self.reviewed.get(&token.to_string())
    }

    /// Known from now on, for the rate limit: requests with `token` count against `identity`,
    /// not their address. Only once the token was authorized, so a token that may do nothing
    /// never gets a bucket of its own.
    fn remember_reviewed(&self, token: &str, identity: &Identity) {
        self.reviewed
            .insert(token.to_string(), Identity::named(&identity.name));
    }

    /// Accepts CI id-tokens verified by `verifier` (once, at start-up).
    pub fn set_oidc(&self, verifier: Arc<Verifier>) {
        let _ = self.oidc.set(verifier);
    }

    /// Replaces the static tokens (on start and on every reload).
    pub fn set_static_tokens(&self, tokens: Vec<StaticToken>) {
        *self.static_tokens.write().expect("static tokens lock") = tokens;
    }

    /// Authenticates the request and authorizes `verb` on windows in `ns`.
    pub async fn authorize(
        &self,
        headers: &HeaderMap,
        ns: &str,
        verb: Verb,
    ) -> Result<Identity, ApiError> {
        if self.disabled {
            return Ok(Identity::named("anonymous (--insecure-no-auth)"));
        }
        let token = bearer(headers)?;
        let static_match = {
            let tokens = self.static_tokens.read().expect("static tokens lock");
            find_static(&tokens, token).map(|t| (t.name.clone(), t.allows(ns)))
        };
        if let Some((name, allowed)) = static_match {
            return if allowed {
                Ok(Identity::named(format!("static:{name}")))
            } else {
                Err(ApiError::Forbidden(format!(
                    "namespace: static token {name:?} may not use {}",
                    scope_text(ns)
                )))
            };
        }
        if let Some(verifier) = self.oidc.get()
            && let Some(verified) = verifier
                .verify(token, jiff::Timestamp::now().as_second())
                .await
        {
            let ci = verified.map_err(|r| ApiError::Unauthenticated(r.0))?;
            let identity = Identity::named(ci.name());
            let granted = verifier.authorize(&ci, ns, verb).await?;
            self.remember_reviewed(token, &identity);
            return Ok(Identity {
                ci: Some(Arc::new(CiGrant { token: ci, granted })),
                ..identity
            });
        }
        let key = (token.to_string(), ns.to_string(), verb);
        if let Some(identity) = self.cache.get(&key) {
            return Ok(identity);
        }
        let identity = self.review(token, ns, verb).await?;
        self.remember_reviewed(token, &identity);
        self.cache.insert(key, identity.clone());
        Ok(identity)
    }

    async fn review(&self, token: &str, ns: &str, verb: Verb) -> Result<Identity, ApiError> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                audiences: Some(vec![self.audience.clone()]),
            },
            ..Default::default()
        };
        let reviews = Api::<TokenReview>::all(self.client.clone());
        let reviewed = bounded(reviews.create(&PostParams::default(), &review))
            .await
            .map_err(|e| ApiError::from_kube(e, "verifying the token (TokenReview)"))?;
        let status = reviewed.status.unwrap_or_default();
        let audience_ok = status
            .audiences
            .as_ref()
            .is_some_and(|a| a.iter().any(|a| a == &self.audience));
        if status.authenticated != Some(true) || !audience_ok {
            if self.oidc.get().is_some()
                && let Some(iss) = super::oidc::token::peek_issuer(token)
            {
                return Err(ApiError::Unauthenticated(format!(
                    "Authorization: the token's issuer {iss:?} is not one this operator trusts \
                     (--oidc-issuer), and the cluster did not authenticate it for audience {:?}",
                    self.audience
                )));
            }
            return Err(ApiError::Unauthenticated(format!(
                "Authorization: the token is not valid for audience {:?}",
                self.audience
            )));
        }
        let user = status.user.unwrap_or_default();
        let username = user.username.clone().unwrap_or_default();
        let sar = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username,
                groups: user.groups,
                uid: user.uid,
                extra: user.extra,
                resource_attributes: Some(ResourceAttributes {
                    group: Some(GROUP.into()),
                    resource: Some("testwindows".into()),
                    verb: Some(verb.as_str().into()),
                    namespace: Some(ns.into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let reviews = Api::<SubjectAccessReview>::all(self.client.clone());
        let answer = bounded(reviews.create(&PostParams::default(), &sar))
            .await
            .map_err(|e| ApiError::from_kube(e, "checking permissions (SubjectAccessReview)"))?;
        if answer.status.is_some_and(|s| s.allowed) {
            Ok(Identity::named(username))
        } else {
            Err(ApiError::Forbidden(format!(
                "namespace: {username} may not {} testwindows.{GROUP} in {}",
                verb.as_str(),
                scope_text(ns)
            )))
        }
    }
}

/// What a cached answer weighs: the token and namespace of its key, the identity's name, and a
/// fixed part for the rest (the entry, its list links, the strings' headers). Identities in
/// these caches carry no CI grant (a CI token is verified on every request, never cached).
pub fn weigh(token: &str, ns: &str, who: &Identity) -> usize {
    const ENTRY: usize = 160;
    ENTRY + token.len() + ns.len() + who.name.len()
}

/// `namespace shop`, or `every namespace` for the empty namespace of a cluster-wide check.
fn scope_text(ns: &str) -> String {
    if ns.is_empty() {
        "every namespace".into()
    } else {
        format!("namespace {ns}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_without_a_bearer_token_is_unauthenticated() {
        let mut headers = HeaderMap::new();
        assert!(matches!(
            bearer(&headers),
            Err(ApiError::Unauthenticated(_))
        ));
        headers.insert(header::AUTHORIZATION, "Basic abc".parse().unwrap());
        assert!(matches!(
            bearer(&headers),
            Err(ApiError::Unauthenticated(_))
        ));
        headers.insert(header::AUTHORIZATION, "Bearer  ".parse().unwrap());
        assert!(matches!(
            bearer(&headers),
            Err(ApiError::Unauthenticated(_))
        ));
        headers.insert(header::AUTHORIZATION, "bearer t0k".parse().unwrap());
        assert_eq!(bearer(&headers).unwrap(), "t0k");
    }

    #[test]
    fn a_cached_answer_weighs_at_least_its_token_and_name() {
        let who = Identity::named("u".repeat(300));
        let token = "t".repeat(200 * 1024);
        assert!(weigh(&token, "shop", &who) >= token.len() + 300 + 4);
        // A cache full of typical tokens fits in the budget.
        let typical = weigh(
            &"t".repeat(1024),
            "shop",
            &Identity::named("system:serviceaccount:ci:runner"),
        );
        assert!(typical * CACHE_MAX <= CACHE_MAX_BYTES, "{typical}");
    }

    #[test]
    fn a_static_token_matches_only_exactly_and_names_its_namespaces() {
        let tokens = vec![
            StaticToken {
                name: "gh".into(),
                token: "secret-one".into(),
                namespaces: vec!["shop".into()],
            },
            StaticToken {
                name: "all".into(),
                token: "secret-two".into(),
                namespaces: vec!["*".into()],
            },
        ];
        assert_eq!(find_static(&tokens, "secret-one").unwrap().name, "gh");
        assert!(find_static(&tokens, "secret-on").is_none());
        assert!(find_static(&tokens, "secret-one2").is_none());
        assert!(find_static(&tokens, "secret-one").unwrap().allows("shop"));
        assert!(!find_static(&tokens, "secret-one").unwrap().allows("other"));
        assert!(find_static(&tokens, "secret-two").unwrap().allows("other"));
    }
}
