//! Where the client's bearer token comes from, and getting it again when it may have changed:
//! `run` renews a window for as long as its command runs, longer than a CI job's id-token lives.
//!
//! - a fixed token (`--token`, `DISRUPTION_GUARD_TOKEN`);
//! - a file (`--token-file`), read again for every request: a projected ServiceAccount token
//!   is rotated on disk by the kubelet;
//! - GitHub Actions (`--oidc github`): the job's OIDC id-token for `--oidc-audience`, requested
//!   from the runner (`ACTIONS_ID_TOKEN_REQUEST_URL` / `_TOKEN`, which the runner sets when the
//!   job has `permissions: id-token: write`), and requested again when it nears expiry;
//! - GitLab CI (`--oidc gitlab`): the id-token GitLab puts in the variable the job's
//!   `id_tokens:` names (`--oidc-token-var`); GitLab mints it once per job, so it is read as is.
//!
//! The token's expiry is read from its `exp` claim without verifying it: the guard verifies.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::ClientError;

/// How long before its expiry an id-token is requested again.
pub const REFRESH_MARGIN: Duration = Duration::from_secs(60);

/// Where the bearer token comes from.
#[derive(Clone, Debug)]
pub enum TokenSource {
    /// No token (a guard without authentication).
    None,
    /// The same token for every request.
    Fixed(String),
    /// A file, read again for every request.
    File(PathBuf),
    /// The environment variable GitLab's `id_tokens:` fills.
    Env(String),
    /// The GitHub Actions runner's id-token endpoint.
    GitHubActions(GitHubActions),
}

/// The runner's id-token endpoint and the token it last gave.
#[derive(Clone, Debug)]
pub struct GitHubActions {
    request_url: String,
    request_token: String,
    audience: String,
    cached: Arc<Mutex<Option<Cached>>>,
}

#[derive(Clone, Debug)]
struct Cached {
    token: String,
    expires: Option<SystemTime>,
}

impl TokenSource {
    /// The GitHub Actions runner's id-token for `audience`, from the variables the runner sets
    /// (`env` looks them up).
    pub fn github_actions(
        audience: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ClientError> {
        let (Some(request_url), Some(request_token)) = (
            env("ACTIONS_ID_TOKEN_REQUEST_URL").filter(|v| !v.is_empty()),
            env("ACTIONS_ID_TOKEN_REQUEST_TOKEN").filter(|v| !v.is_empty()),
        ) else {
            return Err(ClientError::Config(
                "--oidc github: ACTIONS_ID_TOKEN_REQUEST_URL and ACTIONS_ID_TOKEN_REQUEST_TOKEN \
                 are not set; give the job `permissions: id-token: write`"
                    .into(),
            ));
        };
        Ok(TokenSource::GitHubActions(GitHubActions {
            request_url,
            request_token,
            audience: audience.to_string(),
            cached: Arc::default(),
        }))
    }

    /// The token to send now; `http` asks the runner when a new id-token is needed.
    pub async fn current(&self, http: &reqwest::Client) -> Result<Option<String>, ClientError> {
        match self {
            TokenSource::None => Ok(None),
            TokenSource::Fixed(token) => Ok(Some(token.clone())),
            TokenSource::File(path) => std::fs::read_to_string(path)
                .map(|t| Some(t.trim().to_string()))
                .map_err(|e| ClientError::Config(format!("reading {}: {e}", path.display()))),
            TokenSource::Env(var) => match std::env::var(var) {
                Ok(token) if !token.trim().is_empty() => Ok(Some(token.trim().to_string())),
                _ => Err(ClientError::Config(format!(
                    "--oidc gitlab: the variable {var} is empty or not set; define it in the \
                     job's `id_tokens:` with `aud: <the guard's audience>`"
                ))),
            },
            TokenSource::GitHubActions(gh) => gh.token(http).await.map(Some),
        }
    }
}

impl GitHubActions {
    async fn token(&self, http: &reqwest::Client) -> Result<String, ClientError> {
        let now = SystemTime::now();
        if let Some(cached) = self.cached.lock().expect("token cache").as_ref()
            && !needs_refresh(cached.expires, now, REFRESH_MARGIN)
        {
            return Ok(cached.token.clone());
        }
        let token = self.request(http).await?;
        let expires = jwt_expiry(&token);
        *self.cached.lock().expect("token cache") = Some(Cached {
            token: token.clone(),
            expires,
        });
        Ok(token)
    }

    /// Asks the runner, as `@actions/core`'s `getIDToken` does: GET the request URL with
    /// `audience` added, authorized by the request token; the answer is `{"value": "<jwt>"}`.
    async fn request(&self, http: &reqwest::Client) -> Result<String, ClientError> {
        #[derive(serde::Deserialize)]
        struct Answer {
            value: String,
        }
        let url = id_token_url(&self.request_url, &self.audience)?;
        let resp = http
            .get(url)
            .bearer_auth(&self.request_token)
            .send()
            .await
            .map_err(|e| {
                ClientError::Unreachable(format!("requesting an id-token from the runner: {e}"))
            })?;
        let status = resp.status();
        let body = resp
            .bytes()
            .await
            .map_err(|e| ClientError::Unreachable(format!("reading the runner's id-token: {e}")))?;
        if !status.is_success() {
            let text: String = String::from_utf8_lossy(&body).chars().take(200).collect();
            let message = format!("requesting an id-token from the runner: {status} {text}");
            return Err(if status.is_server_error() || status.as_u16() == 429 {
                ClientError::Unreachable(message)
            } else {
                ClientError::Config(message)
            });
        }
        serde_json::from_slice::<Answer>(&body)
            .map(|a| a.value)
            .map_err(|e| ClientError::Transport(format!("the runner's id-token answer: {e}")))
    }
}

/// The runner's request URL with `audience` set (it already carries `api-version`).
pub fn id_token_url(request_url: &str, audience: &str) -> Result<reqwest::Url, ClientError> {
    let mut url = reqwest::Url::parse(request_url).map_err(|e| {
        ClientError::Config(format!("ACTIONS_ID_TOKEN_REQUEST_URL {request_url:?}: {e}"))
    })?;
    let kept: Vec<(String, String)> = url
        .query_pairs()
        .filter(|(k, _)| k != "audience")
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    url.query_pairs_mut()
        .clear()
        .extend_pairs(kept)
        .append_pair("audience", audience);
    Ok(url)
}

/// Whether a token expiring at `expires` must be replaced at `now`: within `margin` of its
/// expiry, or past it. A token without a known expiry is kept.
pub fn needs_refresh(expires: Option<SystemTime>, now: SystemTime, margin: Duration) -> bool {
    expires.is_some_and(|exp| now + margin >= exp)
}

/// The `exp` of a JWT, read without verifying it; `None` for anything else.
pub fn jwt_expiry(token: &str) -> Option<SystemTime> {
    use base64::Engine;
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    let exp = claims.get("exp")?.as_u64()?;
    Some(UNIX_EPOCH + Duration::from_secs(exp))
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;

    fn jwt(claims: serde_json::Value) -> String {
        let part = |v: serde_json::Value| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
        };
        format!(
            "{}.{}.sig",
            part(serde_json::json!({"alg": "RS256"})),
            part(claims)
        )
    }

    fn http() -> reqwest::Client {
        let _ = rustls::crypto::ring::default_provider().install_default();
        reqwest::Client::new()
    }

    #[test]
    fn a_jwts_expiry_is_its_exp_claim_and_anything_else_has_none() {
        let at = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(
            jwt_expiry(&jwt(serde_json::json!({"exp": 1_700_000_000}))),
            Some(at)
        );
        assert_eq!(jwt_expiry(&jwt(serde_json::json!({"sub": "x"}))), None);
        assert_eq!(jwt_expiry("a-static-token"), None);
        assert_eq!(jwt_expiry("a.!!!.c"), None);
    }

    #[test]
    fn a_token_is_replaced_within_the_margin_of_its_expiry_and_kept_before() {
        let exp = UNIX_EPOCH + Duration::from_secs(1_000);
        let margin = Duration::from_secs(60);
        let at = |s| UNIX_EPOCH + Duration::from_secs(s);
        assert!(!needs_refresh(Some(exp), at(939), margin));
        assert!(needs_refresh(Some(exp), at(940), margin));
        assert!(needs_refresh(Some(exp), at(2_000), margin));
        assert!(!needs_refresh(None, at(2_000), margin));
    }

    #[test]
    fn the_audience_is_added_to_the_runners_request_url_keeping_its_query() {
        let url = id_token_url(
            "https://pipelines.example/idtoken/abc?api-version=2.0",
            "disruption-guard",
        )
        .unwrap();
        assert_eq!(
            url.as_str(),
            "https://pipelines.example/idtoken/abc?api-version=2.0&audience=disruption-guard"
        );
        let replaced = id_token_url("https://r/t?audience=old&x=1", "a b").unwrap();
        assert_eq!(replaced.as_str(), "https://r/t?x=1&audience=a+b");
        assert!(id_token_url("not a url", "a").is_err());
    }

    #[test]
    fn github_mode_needs_both_runner_variables_and_says_which_permission_gives_them() {
        let none = |_: &str| None;
        let err = TokenSource::github_actions("disruption-guard", none).unwrap_err();
        assert!(err.to_string().contains("id-token: write"), "{err}");
        let both = |k: &str| Some(format!("value-of-{k}"));
        assert!(TokenSource::github_actions("disruption-guard", both).is_ok());
    }

    #[tokio::test]
    async fn gitlab_mode_reads_the_variable_its_id_tokens_names_and_names_it_when_missing() {
        let http = http();
        let missing = TokenSource::Env("DG_TEST_UNSET_ID_TOKEN_VAR".into());
        let err = missing.current(&http).await.unwrap_err();
        assert!(
            err.to_string().contains("DG_TEST_UNSET_ID_TOKEN_VAR"),
            "{err}"
        );
        assert!(err.to_string().contains("id_tokens"), "{err}");
        // PATH is set in every environment tests run in.
        let set = TokenSource::Env("PATH".into());
        assert!(set.current(&http).await.unwrap().is_some());
    }

    #[tokio::test]
    async fn a_token_file_is_read_again_for_every_request() {
        let path = std::env::temp_dir().join(format!("dg-token-{}", fastrand::u64(..)));
        std::fs::write(&path, "first\n").unwrap();
        let source = TokenSource::File(path.clone());
        let http = http();
        assert_eq!(
            source.current(&http).await.unwrap().as_deref(),
            Some("first")
        );
        std::fs::write(&path, "second").unwrap();
        assert_eq!(
            source.current(&http).await.unwrap().as_deref(),
            Some("second")
        );
        let _ = std::fs::remove_file(&path);
    }
}
