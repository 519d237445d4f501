//! Static bearer tokens for CI systems outside the cluster, read from a Secret
//! (`--static-tokens-secret ns/name`, key `tokens.yaml`) or a file (`--static-tokens-file`),
//! and re-read every [`RELOAD_EVERY`] so a rotated Secret takes effect without a restart.
//!
//! What a reload finds decides which tokens stay valid ([`after_reload`]): deleting the Secret
//! or the file, or its `tokens.yaml`, revokes every static token; so does a malformed one
//! (keeping the old tokens would let a broken rotation leave a leaked token valid); only a read
//! that failed for another reason (the API server unreachable) keeps the previous tokens, for
//! at most [`KEEP_UNREADABLE_FOR`]. Every reload is logged when it changes something and
//! counted by result (`disruption_guard_api_static_token_reloads_total`).
//!
//! ```yaml
//! tokens:
//!   - name: github-shop          # shown in logs as static:github-shop
//!     token: "long-random-string"
//!     namespaces: [shop, shop-e2e] # "*" = every namespace
//! ```

use std::time::{Duration, Instant};

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};
use serde::Deserialize;
use tracing::{error, info, warn};

/// Key of the Secret that holds the tokens.
pub const SECRET_KEY: &str = "tokens.yaml";
/// How often the tokens are re-read.
pub const RELOAD_EVERY: Duration = Duration::from_secs(30);
/// How long the last tokens read stay valid while the source cannot be read at all (not
/// missing, not malformed: unreachable); then they are revoked too.
pub const KEEP_UNREADABLE_FOR: Duration = Duration::from_secs(5 * 60);

/// Why the tokens could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The Secret, the file or its `tokens.yaml` is gone: the tokens were deleted.
    #[error("{0}")]
    Missing(String),
    /// It is there but not a valid token list.
    #[error("{0:#}")]
    Malformed(anyhow::Error),
    /// It could not be read (API server unreachable, permissions, I/O).
    #[error("{0:#}")]
    Unreadable(anyhow::Error),
}

impl LoadError {
    /// Fixed label for logs and metrics.
    pub fn category(&self) -> &'static str {
        match self {
            LoadError::Missing(_) => "missing",
            LoadError::Malformed(_) => "malformed",
            LoadError::Unreadable(_) => "unreadable",
        }
    }
}

/// What a reload does with the tokens.
#[derive(Debug, PartialEq, Eq)]
pub enum Reload {
    /// Accept exactly these tokens from now on.
    Install(Vec<StaticToken>),
    /// Accept no static token any more.
    Revoke,
    /// Keep the tokens accepted now.
    Keep,
}

/// Decides what a reload at `now` does with its `outcome`; `last_read` is when the source
/// was last read (successfully, or found missing or malformed). Pure, so it is unit-tested.
pub fn after_reload(
    outcome: Result<Vec<StaticToken>, &LoadError>,
    last_read: Instant,
    now: Instant,
) -> Reload {
    match outcome {
        Ok(tokens) => Reload::Install(tokens),
        Err(LoadError::Missing(_) | LoadError::Malformed(_)) => Reload::Revoke,
        Err(LoadError::Unreadable(_)) => {
            if now.saturating_duration_since(last_read) < KEEP_UNREADABLE_FOR {
                Reload::Keep
            } else {
                Reload::Revoke
            }
        }
    }
}

/// One static token and where it may be used.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct StaticToken {
    /// Name shown in logs.
    pub name: String,
    /// The secret value.
    pub token: String,
    /// Namespaces it may open, read, renew and close windows in; `*` for all.
    pub namespaces: Vec<String>,
}

impl StaticToken {
    /// Whether the token may be used in `ns`.
    pub fn allows(&self, ns: &str) -> bool {
        self.namespaces.iter().any(|n| n == "*" || n == ns)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenFile {
    tokens: Vec<StaticToken>,
}

/// Parses the YAML document; refuses empty or short tokens, and two entries with one name or
/// one token (which would leave it to the order of the file who a request is; the error
/// names the entries, never the token).
pub fn parse(text: &str) -> anyhow::Result<Vec<StaticToken>> {
    let file: TokenFile = serde_saphyr::from_str(text).context("parsing static tokens")?;
    for (i, t) in file.tokens.iter().enumerate() {
        anyhow::ensure!(
            t.token.len() >= 16,
            "static token {:?} is shorter than 16 characters",
            t.name
        );
        if let Some(first) = file.tokens[..i].iter().find(|o| o.name == t.name) {
            anyhow::bail!("static token name {:?} is given twice", first.name);
        }
        if let Some(first) = file.tokens[..i].iter().find(|o| o.token == t.token) {
            anyhow::bail!(
                "static tokens {:?} and {:?} have the same token: each needs its own",
                first.name,
                t.name
            );
        }
    }
    Ok(file.tokens)
}

/// Where the static tokens come from.
#[derive(Debug, Clone)]
pub enum Source {
    /// A Secret `namespace/name`, key `tokens.yaml`.
    Secret {
        /// Namespace of the Secret.
        namespace: String,
        /// Name of the Secret.
        name: String,
    },
    /// A file.
    File(std::path::PathBuf),
}

impl Source {
    /// Reads the tokens now.
    pub async fn load(&self, client: &Client) -> Result<Vec<StaticToken>, LoadError> {
        match self {
            Source::File(path) => {
                let text = match tokio::fs::read_to_string(path).await {
                    Ok(text) => text,
                    Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                        return Err(LoadError::Missing(format!(
                            "{} does not exist",
                            path.display()
                        )));
                    }
                    Err(err) if err.kind() == std::io::ErrorKind::InvalidData => {
                        return Err(LoadError::Malformed(anyhow::anyhow!(
                            "{} is not UTF-8",
                            path.display()
                        )));
                    }
                    Err(err) => {
                        return Err(LoadError::Unreadable(
                            anyhow::Error::new(err).context(format!("reading {}", path.display())),
                        ));
                    }
                };
                parse(&text).map_err(LoadError::Malformed)
            }
            Source::Secret { namespace, name } => {
                let secret = match Api::<Secret>::namespaced(client.clone(), namespace)
                    .get_opt(name)
                    .await
                {
                    Ok(Some(secret)) => secret,
                    Ok(None) => {
                        return Err(LoadError::Missing(format!(
                            "Secret {namespace}/{name} does not exist"
                        )));
                    }
                    Err(err) => {
                        return Err(LoadError::Unreadable(
                            anyhow::Error::new(err)
                                .context(format!("reading Secret {namespace}/{name}")),
                        ));
                    }
                };
                let data = secret
                    .data
                    .and_then(|mut d| d.remove(SECRET_KEY))
                    .ok_or_else(|| {
                        LoadError::Missing(format!("Secret {namespace}/{name} has no {SECRET_KEY}"))
                    })?;
                let text = std::str::from_utf8(&data.0).map_err(|_| {
                    LoadError::Malformed(anyhow::anyhow!(
                        "{SECRET_KEY} of Secret {namespace}/{name} is not UTF-8"
                    ))
                })?;
                parse(text).map_err(LoadError::Malformed)
            }
        }
    }
}

/// Parses `ns/name`.
pub fn parse_secret_ref(text: &str) -> Result<Source, String> {
    match text.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() => Ok(Source::Secret {
            namespace: ns.into(),
            name: name.into(),
        }),
        _ => Err(format!("{text:?} must be namespace/name")),
    }
}

/// Loads the tokens once (failing start-up only if they cannot be read at all), then keeps
/// reloading;
/// each set of tokens to accept is handed to `install` (the authenticator's
/// `set_static_tokens`; an empty set revokes them all), and each reload is counted in
/// `metrics`.
pub async fn start(
    source: Source,
    client: Client,
    install: impl Fn(Vec<StaticToken>) + Send + 'static,
    metrics: std::sync::Arc<super::ApiMetrics>,
    shutdown: tokio_util::sync::CancellationToken,
) -> anyhow::Result<()> {
    // Missing or malformed at start is what it is at a reload: no static token, and the
    // operator still starts (failing would turn a revocation into a crash loop of the whole
    // operator). Only a source that cannot be read at all stops the start.
    let mut revoked = false;
    let tokens = match source.load(&client).await {
        Ok(tokens) => {
            info!(count = tokens.len(), "static tokens loaded");
            metrics.static_token_reload("loaded");
            tokens
        }
        Err(err @ (LoadError::Missing(_) | LoadError::Malformed(_))) => {
            error!(
                error = %err,
                result = err.category(),
                "no static token is accepted: until the tokens can be read, only \
                 ServiceAccount tokens are"
            );
            metrics.static_token_reload(err.category());
            revoked = true;
            Vec::new()
        }
        Err(err) => return Err(err.into()),
    };
    metrics.static_tokens.set(tokens.len() as i64);
    install(tokens);
    tokio::spawn(async move {
        let mut last_read = Instant::now();
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(RELOAD_EVERY) => {}
            }
            let outcome = source.load(&client).await;
            let now = Instant::now();
            let result = outcome.as_ref().err().map_or("loaded", LoadError::category);
            metrics.static_token_reload(result);
            if !matches!(outcome, Err(LoadError::Unreadable(_))) {
                last_read = now;
            }
            let error = outcome.as_ref().err().map(ToString::to_string);
            match after_reload(outcome.as_ref().map(Clone::clone), last_read, now) {
                Reload::Install(tokens) => {
                    if revoked {
                        info!(count = tokens.len(), "static tokens loaded again");
                    }
                    revoked = false;
                    metrics.static_tokens.set(tokens.len() as i64);
                    install(tokens);
                }
                Reload::Revoke => {
                    if !revoked {
                        error!(
                            error = error.unwrap_or_default(),
                            result,
                            "every static token is revoked: until the tokens can be read \
                             again, only ServiceAccount tokens are accepted"
                        );
                    }
                    revoked = true;
                    metrics.static_tokens.set(0);
                    install(Vec::new());
                }
                Reload::Keep => warn!(
                    error = error.unwrap_or_default(),
                    revoked_in = ?KEEP_UNREADABLE_FOR.saturating_sub(now - last_read),
                    "static tokens cannot be read; keeping the previous ones for now"
                ),
            }
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_parse_with_their_namespaces() {
        let tokens =
            parse("tokens:\n  - name: gh\n    token: 0123456789abcdef\n    namespaces: [shop]\n")
                .unwrap();
        assert_eq!(tokens[0].name, "gh");
        assert!(tokens[0].allows("shop") && !tokens[0].allows("x"));
    }

    #[test]
    fn a_name_or_a_token_given_twice_is_refused_without_quoting_the_token() {
        let same_token = "tokens:\n  - {name: a, token: aaaaaaaaaaaaaaaa, namespaces: ['*']}\n  - {name: b, token: aaaaaaaaaaaaaaaa, namespaces: [x]}\n";
        let err = parse(same_token).unwrap_err().to_string();
        assert!(err.contains("\"a\" and \"b\" have the same token"), "{err}");
        assert!(!err.contains("aaaaaaaaaaaaaaaa"), "{err}");
        let same_name = "tokens:\n  - {name: a, token: aaaaaaaaaaaaaaaa, namespaces: ['*']}\n  - {name: a, token: bbbbbbbbbbbbbbbb, namespaces: [x]}\n";
        let err = parse(same_name).unwrap_err().to_string();
        assert!(err.contains("name \"a\" is given twice"), "{err}");
    }

    #[test]
    fn a_short_token_is_refused() {
        assert!(parse("tokens:\n  - {name: a, token: short, namespaces: ['*']}\n").is_err());
    }

    fn token() -> StaticToken {
        StaticToken {
            name: "gh".into(),
            token: "0123456789abcdef".into(),
            namespaces: vec!["shop".into()],
        }
    }

    #[test]
    fn a_reload_that_reads_tokens_installs_exactly_them() {
        let t0 = Instant::now();
        assert_eq!(
            after_reload(Ok(vec![token()]), t0, t0),
            Reload::Install(vec![token()])
        );
        assert_eq!(after_reload(Ok(vec![]), t0, t0), Reload::Install(vec![]));
    }

    #[test]
    fn a_deleted_or_malformed_source_revokes_every_token_at_once() {
        let t0 = Instant::now();
        let missing = LoadError::Missing("Secret guard/tokens does not exist".into());
        assert_eq!(after_reload(Err(&missing), t0, t0), Reload::Revoke);
        let malformed = LoadError::Malformed(parse("tokens: [").unwrap_err());
        assert_eq!(after_reload(Err(&malformed), t0, t0), Reload::Revoke);
        assert_eq!(
            (missing.category(), malformed.category()),
            ("missing", "malformed")
        );
    }

    #[test]
    fn an_unreadable_source_keeps_the_tokens_only_for_a_bounded_time() {
        let t0 = Instant::now();
        let unreadable = LoadError::Unreadable(anyhow::anyhow!("connection refused"));
        assert_eq!(
            after_reload(Err(&unreadable), t0, t0 + RELOAD_EVERY),
            Reload::Keep
        );
        assert_eq!(
            after_reload(Err(&unreadable), t0, t0 + KEEP_UNREADABLE_FOR),
            Reload::Revoke
        );
    }

    #[test]
    fn a_short_token_or_an_unknown_field_is_malformed() {
        assert!(
            parse("tokens:\n  - {name: a, token: 0123456789abcdef, namespaces: ['*'], x: 1}\n")
                .is_err()
        );
        assert!(parse("not yaml: [").is_err());
    }

    #[tokio::test]
    async fn a_deleted_tokens_file_is_missing_and_a_broken_one_malformed() {
        // The client is never called for a file.
        let client =
            Client::try_from(kube::Config::new("http://127.0.0.1:1".parse().unwrap())).unwrap();
        let path = std::env::temp_dir().join(format!("dg-tokens-{}.yaml", std::process::id()));
        let source = Source::File(path.clone());
        std::fs::write(
            &path,
            "tokens:\n  - {name: gh, token: 0123456789abcdef, namespaces: [shop]}\n",
        )
        .unwrap();
        assert_eq!(source.load(&client).await.unwrap(), vec![token()]);
        std::fs::write(&path, "tokens:\n  - {name: gh, token: 0123").unwrap();
        let err = source.load(&client).await.unwrap_err();
        assert_eq!(err.category(), "malformed", "{err}");
        std::fs::remove_file(&path).unwrap();
        let err = source.load(&client).await.unwrap_err();
        assert_eq!(err.category(), "missing", "{err}");
    }

    #[test]
    fn a_secret_reference_needs_a_namespace_and_a_name() {
        assert!(parse_secret_ref("ns/name").is_ok());
        assert!(parse_secret_ref("name").is_err());
        assert!(parse_secret_ref("/name").is_err());
    }
}
