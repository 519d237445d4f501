//! The verifier: a token of a trusted issuer checked against its keys and claims, then
//! authorized by the namespace's CITrusts; the bounds a CI token's window must keep.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio_util::sync::CancellationToken;

use super::bounds::{self, Asked, Granted, OutOfBounds};
use super::fetch::Fetcher;
use super::issuers::IssuerConfig;
use super::keys::IssuerKeys;
use super::refusals::Refusals;
use super::token::{Claims, Refusal};
use super::{token, trust};
use crate::api::ApiMetrics;
use crate::api::verb::Verb;
use crate::operations::problem::ApiError;
use crate::operations::types::SelectorInput;
use crate::resources::{CITrust, OpenedBy, TestWindow};

/// Longest a request waits for the CITrust cache's first list before it is refused (503).
pub const TRUSTS_SYNC_WAIT: Duration = Duration::from_secs(5);

/// Where the CITrusts and the namespaces that forbid them are read from.
#[derive(Clone)]
pub struct TrustCache {
    /// Every CITrust in the operator's scope.
    pub trusts: Store<CITrust>,
    /// Namespaces labelled `disruption-guard.io/ci-trust` (only those are watched; a value
    /// `false`, in any case, forbids CI trust there).
    pub forbidden: Store<Namespace>,
    /// Where refusals are reported.
    pub refusals: Arc<Refusals>,
}

/// Whether the label value `value` of [`crate::resources::citrust::CI_TRUST_LABEL`] forbids CI
/// trust: `false` in any case (`False`, `FALSE`), as a person may write it.
pub fn forbids(value: &str) -> bool {
    value.trim().eq_ignore_ascii_case("false")
}

/// A verified CI token: who it is.
#[derive(Debug, Clone, PartialEq)]
pub struct CiToken {
    /// Its claims.
    pub claims: Claims,
}

impl CiToken {
    /// The identity's name, for logs and the rate limit: `oidc:<iss>#<sub>`.
    pub fn name(&self) -> String {
        format!("oidc:{}#{}", self.claims.iss, self.claims.sub)
    }

    /// What the window records about its opener (GitHub and GitLab claims named).
    pub fn opened_by(&self, trust: Option<&str>) -> OpenedBy {
        let c = &self.claims;
        let first = |names: &[&str]| names.iter().find_map(|n| c.text(n));
        let run = match (
            first(&["run_id", "pipeline_id"]),
            first(&["run_attempt", "job_id"]),
        ) {
            (Some(run), Some(part)) => Some(format!("{run}/{part}")),
            (run, _) => run,
        };
        OpenedBy {
            name: self.name(),
            issuer: Some(c.iss.clone()),
            subject: Some(c.sub.clone()),
            repository: first(&["repository", "project_path"]),
            git_ref: c.text("ref"),
            run,
            trust: trust.map(str::to_string),
        }
    }
}

/// Verifies id-tokens of the trusted issuers and authorizes them with the CITrusts.
pub struct Verifier {
    issuers: HashMap<String, Arc<IssuerKeys>>,
    audience: String,
    max_token_lifetime: Duration,
    cache: TrustCache,
}

/// What a [`Verifier`] checks, from the operator's flags.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The trusted issuers, each with its own CA and hosts (`--oidc-issuer`, `--oidc-ca-file`,
    /// `--oidc-jwks-host`).
    pub issuers: Vec<IssuerConfig>,
    /// This API's audience (`--token-audience`).
    pub audience: String,
    /// Longest `exp − iat` accepted (`--oidc-max-token-lifetime`).
    pub max_token_lifetime: Duration,
    /// How long keys verify after the last successful fetch (`--oidc-keys-max-age`).
    pub keys_max_age: Duration,
    /// Where key fetches and refusals are counted.
    pub metrics: Arc<ApiMetrics>,
}

impl Verifier {
    /// A verifier as `settings` say, reading trusts from `cache`; fails when an issuer's CA
    /// file cannot be read.
    pub fn new(settings: Settings, cache: TrustCache) -> anyhow::Result<Self> {
        let mut issuers = HashMap::new();
        for config in &settings.issuers {
            let keys = IssuerKeys::new(Fetcher::new(config)?, settings.keys_max_age)
                .counted(settings.metrics.clone());
            issuers.insert(config.url.clone(), Arc::new(keys));
        }
        Ok(Self {
            issuers,
            audience: settings.audience,
            max_token_lifetime: settings.max_token_lifetime,
            cache,
        })
    }

    /// Fetches every issuer's keys now, then every [`IssuerKeys::refresh_every`] until
    /// `shutdown`; an issuer that is down is logged and tried again, never fatal.
    pub fn start_refresh(&self, shutdown: CancellationToken) {
        for keys in self.issuers.values() {
            let keys = keys.clone();
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                loop {
                    // A failure is logged by `refresh` itself.
                    let _ = keys.refresh().await;
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = tokio::time::sleep(keys.refresh_every()) => {}
                    }
                }
            });
        }
    }

    /// `None` when `token` is not an id-token of a trusted issuer (it is then TokenReview's);
    /// otherwise the verified token, or why it is refused. `now`: seconds since the epoch.
    pub async fn verify(&self, token: &str, now: i64) -> Option<Result<CiToken, Refusal>> {
        let iss = token::peek_issuer(token)?;
        let keys = self.issuers.get(iss.trim_end_matches('/'))?;
        Some(self.verify_with(keys, token, now).await)
    }

    async fn verify_with(
        &self,
        keys: &IssuerKeys,
        token: &str,
        now: i64,
    ) -> Result<CiToken, Refusal> {
        let header = token::header(token)?;
        let all = keys.verify(token, &header).await?;
        let claims = Claims::from_json(all)?;
        let expected = token::Expected {
            issuer: keys.issuer(),
            audience: &self.audience,
            max_lifetime_secs: self.max_token_lifetime.as_secs() as i64,
        };
        token::check(&claims, &expected, now)?;
        Ok(CiToken { claims })
    }

    /// The trusts of `ns` that let `ci` do `verb`; 403 naming why when none does, 503 when
    /// the trusts are not loaded yet.
    pub async fn authorize(
        &self,
        ci: &CiToken,
        ns: &str,
        verb: Verb,
    ) -> Result<Vec<Granted>, ApiError> {
        let synced = tokio::time::timeout(TRUSTS_SYNC_WAIT, async {
            self.cache.trusts.wait_until_ready().await.is_ok()
                && self.cache.forbidden.wait_until_ready().await.is_ok()
        })
        .await;
        if synced != Ok(true) {
            return Err(ApiError::Unavailable(
                "the operator has not loaded the CITrusts yet (is the CRD \
                 citrusts.disruption-guard.io installed?); retry shortly"
                    .into(),
            ));
        }
        let forbidden = !ns.is_empty()
            && self
                .cache
                .forbidden
                .get(&ObjectRef::new(ns))
                .is_some_and(|n| {
                    n.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(crate::resources::citrust::CI_TRUST_LABEL))
                        .is_some_and(|v| forbids(v))
                });
        let trusts = trusts_of(&self.cache.trusts, ns);
        trust::decide(&trusts, ns, forbidden, &ci.claims, verb).map_err(|refused| {
            self.cache
                .refusals
                .report(ns, &ci.claims, &refused, &trusts);
            ApiError::Forbidden(refused.detail)
        })
    }
}

/// The CITrusts of namespace `ns`, shared with the cache: each request holds the store's own
/// objects (an `Arc` each), never a copy of them, whatever their size and number.
pub fn trusts_of(store: &Store<CITrust>, ns: &str) -> Vec<Arc<CITrust>> {
    let mut trusts = store.state();
    trusts.retain(|t| t.metadata.namespace.as_deref() == Some(ns));
    trusts
}

/// The ttl an open under `granted` gets, checked with the selector and `protect.daemonSets`
/// against the trusts' bounds: `Ok(Some(ttl))` when the request named none and a bound caps
/// the server's `default`; [`OutOfBounds`] when no granting trust admits it. A ttl or selector
/// that does not parse is left to the ordinary 400/422 checks.
pub fn bound_open(
    granted: &[Granted],
    requested: Option<&str>,
    default: Duration,
    selector: Option<&SelectorInput>,
    daemon_sets: bool,
) -> Result<Option<String>, OutOfBounds> {
    let match_labels = match selector.map(crate::operations::selector::parse) {
        None => Default::default(),
        Some(Ok(sel)) => sel.match_labels,
        Some(Err(_)) => return Ok(None),
    };
    bound(granted, requested, default, match_labels, daemon_sets)
}

/// [`bound_open`] for a renew of `window`: its own stored selector and `protect.daemonSets`
/// are what the trusts' bounds must admit, so a renew can neither be refused for a selector it
/// does not send nor extend a window its trust would not have let open.
pub fn bound_renew(
    granted: &[Granted],
    requested: Option<&str>,
    default: Duration,
    window: &TestWindow,
) -> Result<Option<String>, OutOfBounds> {
    bound(
        granted,
        requested,
        default,
        stored_labels(window),
        window.spec.protect.daemon_sets,
    )
}

/// Whether a close of `window` is within the bounds of one of `granted`: its stored selector
/// must require a granting trust's `matchLabels`, so a trust bounded to `app=x` closes the
/// windows of `app=x` and not another team's in the same namespace. Only the selector counts:
/// a close shortens a window, so its ttl and `protect.daemonSets` (what the bounds cap on an
/// open) cost nothing here.
pub fn bound_close(granted: &[Granted], window: &TestWindow) -> Result<(), OutOfBounds> {
    let asked = Asked {
        ttl: Duration::ZERO,
        match_labels: stored_labels(window),
        daemon_sets: false,
    };
    bounds::any_admits(granted, &asked)
}

/// The `matchLabels` of a stored window's selector.
fn stored_labels(window: &TestWindow) -> BTreeMap<String, String> {
    window
        .spec
        .selector
        .match_labels
        .clone()
        .unwrap_or_default()
}

fn bound(
    granted: &[Granted],
    requested: Option<&str>,
    default: Duration,
    match_labels: BTreeMap<String, String>,
    daemon_sets: bool,
) -> Result<Option<String>, OutOfBounds> {
    let (ttl, fill) = match requested {
        Some(text) => match crate::resources::duration::parse(text) {
            Ok(ttl) => (ttl, None),
            Err(_) => return Ok(None),
        },
        None => match bounds::ttl_cap(granted) {
            Some(cap) if cap < default => (cap, Some(crate::resources::duration::format(cap))),
            _ => (default, None),
        },
    };
    let asked = Asked {
        ttl,
        match_labels,
        daemon_sets,
    };
    bounds::any_admits(granted, &asked)?;
    Ok(fill)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::oidc::issuers::normalize_issuer;
    use serde_json::json;

    fn granted(max: &str) -> Vec<Granted> {
        vec![Granted {
            trust: "shop/main".into(),
            limits: bounds::Limits {
                max_ttl: Some(crate::resources::duration::parse(max).unwrap()),
                ..Default::default()
            },
        }]
    }

    #[test]
    fn an_open_without_a_ttl_gets_the_default_capped_by_the_trust() {
        let thirty = Duration::from_secs(1800);
        assert_eq!(
            bound_open(&granted("10m"), None, thirty, None, false).unwrap(),
            Some("10m".into())
        );
        assert_eq!(
            bound_open(&granted("1h"), None, thirty, None, false).unwrap(),
            None
        );
    }

    #[test]
    fn an_open_asking_more_than_the_bound_is_forbidden_naming_ttl() {
        let err = bound_open(
            &granted("10m"),
            Some("1h"),
            Duration::from_secs(60),
            None,
            false,
        )
        .unwrap_err();
        assert!(err.detail.starts_with("ttl: 1h "), "{err:?}");
        assert!(
            bound_open(
                &granted("10m"),
                Some("nonsense"),
                Duration::ZERO,
                None,
                false
            )
            .is_ok()
        );
    }

    fn window(labels: &[(&str, &str)]) -> TestWindow {
        let labels: serde_json::Map<String, serde_json::Value> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        serde_json::from_value(json!({
            "apiVersion": "disruption-guard.io/v1alpha1", "kind": "TestWindow",
            "metadata": {"name": "w", "namespace": "shop"},
            "spec": {"selector": {"matchLabels": labels}, "ttl": "24h"},
        }))
        .unwrap()
    }

    #[test]
    fn a_close_is_bounded_by_the_stored_selector_and_nothing_else() {
        let mut team = granted("10m");
        team[0].limits.match_labels = BTreeMap::from([("app".to_string(), "x".to_string())]);
        bound_close(&team, &window(&[("app", "x"), ("tier", "web")])).unwrap();
        for other in [window(&[("app", "y")]), window(&[])] {
            let err = bound_close(&team, &other).unwrap_err();
            assert_eq!(err.field, "selector", "{err:?}");
            assert!(err.why.contains("app=x"), "{err:?}");
            assert!(!err.detail.contains("app=x"), "{err:?}");
        }
        // A long ttl or DaemonSet pods do not keep a window in bounds from being closed.
        let mut long = window(&[("app", "x")]);
        long.spec.protect.daemon_sets = true;
        bound_close(&team, &long).unwrap();
        // Unbounded trusts close any window of their namespace.
        bound_close(&granted("10m"), &window(&[])).unwrap();
    }

    #[test]
    fn a_renew_is_bounded_by_the_stored_selector() {
        let mut team = granted("1h");
        team[0].limits.match_labels = BTreeMap::from([("app".to_string(), "x".to_string())]);
        let d = Duration::from_secs(60);
        bound_renew(&team, Some("10m"), d, &window(&[("app", "x")])).unwrap();
        let err = bound_renew(&team, Some("10m"), d, &window(&[("app", "y")])).unwrap_err();
        assert_eq!(err.field, "selector", "{err:?}");
    }

    #[test]
    fn a_request_shares_the_cached_trusts_instead_of_copying_them() {
        use kube::runtime::{reflector::store::Writer, watcher::Event};
        let mut writer = Writer::<CITrust>::default();
        for (ns, name) in [("shop", "a"), ("shop", "b"), ("web", "c")] {
            let mut t = CITrust::new(
                name,
                crate::resources::CITrustSpec {
                    issuer: "https://issuer.example".into(),
                    subject: "repo:acme/shop".into(),
                    claims: Default::default(),
                    grants: vec![crate::resources::Grant::Read],
                    bounds: None,
                },
            );
            t.metadata.namespace = Some(ns.into());
            writer.apply_watcher_event(&Event::Apply(t));
        }
        let store = writer.as_reader();
        let shop = trusts_of(&store, "shop");
        assert_eq!(shop.len(), 2);
        for t in &shop {
            let cached = store.get(&ObjectRef::from_obj(t.as_ref())).unwrap();
            assert!(Arc::ptr_eq(t, &cached), "{:?} was copied", t.metadata.name);
        }
    }

    #[test]
    fn the_forbid_label_counts_in_any_case() {
        for v in ["false", "False", "FALSE", " false "] {
            assert!(forbids(v), "{v}");
        }
        for v in ["true", "", "no", "0"] {
            assert!(!forbids(v), "{v}");
        }
    }

    #[test]
    fn issuers_are_https_urls_without_a_trailing_slash() {
        assert_eq!(
            normalize_issuer("https://gitlab.com/").unwrap(),
            "https://gitlab.com"
        );
        assert!(normalize_issuer("http://gitlab.com").is_err());
        assert!(normalize_issuer("https://").is_err());
    }

    #[test]
    fn the_opener_records_github_and_gitlab_claims() {
        let gh = json!({"iss": "https://token.actions.githubusercontent.com",
            "sub": "repo:acme/shop:ref:refs/heads/main", "aud": "disruption-guard", "exp": 1,
            "repository": "acme/shop", "ref": "refs/heads/main", "run_id": "42", "run_attempt": "2"});
        let ci = CiToken {
            claims: Claims::from_json(gh.as_object().unwrap().clone()).unwrap(),
        };
        let by = ci.opened_by(Some("shop/main"));
        assert_eq!(by.repository.as_deref(), Some("acme/shop"));
        assert_eq!(by.git_ref.as_deref(), Some("refs/heads/main"));
        assert_eq!(by.run.as_deref(), Some("42/2"));
        assert_eq!(
            by.name,
            "oidc:https://token.actions.githubusercontent.com#repo:acme/shop:ref:refs/heads/main"
        );
        let gl = json!({"iss": "https://gitlab.com", "aud": "disruption-guard", "exp": 1,
            "sub": "project_path:acme/shop:ref_type:branch:ref:main",
            "project_path": "acme/shop", "ref": "main", "pipeline_id": "7", "job_id": 9});
        let ci = CiToken {
            claims: Claims::from_json(gl.as_object().unwrap().clone()).unwrap(),
        };
        let by = ci.opened_by(None);
        assert_eq!(by.repository.as_deref(), Some("acme/shop"));
        assert_eq!(by.run.as_deref(), Some("7/9"));
        assert!(
            by.summary()
                .contains("repository acme/shop, ref main, run 7/9")
        );
    }
}
