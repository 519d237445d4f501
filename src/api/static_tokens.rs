//! Static bearer tokens for CI systems outside the cluster, read from a Secret
//! (`--static-tokens-secret ns/name`, key `tokens.yaml`) or a file (`--static-tokens-file`),
//! and re-read every [`RELOAD_EVERY`] so a rotated Secret takes effect without a restart.
//!
//! ```yaml
//! tokens:
//!   - name: github-shop          # shown in logs as static:github-shop
//!     token: "long-random-string"
//!     namespaces: [shop, shop-e2e] # "*" = every namespace
//! ```

use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};
use serde::Deserialize;
use tracing::{info, warn};

/// Key of the Secret that holds the tokens.
pub const SECRET_KEY: &str = "tokens.yaml";
/// How often the tokens are re-read.
pub const RELOAD_EVERY: Duration = Duration::from_secs(30);

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

/// Parses the YAML document; refuses empty or short tokens.
pub fn parse(text: &str) -> anyhow::Result<Vec<StaticToken>> {
    let file: TokenFile = serde_saphyr::from_str(text).context("parsing static tokens")?;
    for t in &file.tokens {
        anyhow::ensure!(
            t.token.len() >= 16,
            "static token {:?} is shorter than 16 characters",
            t.name
        );
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
    pub async fn load(&self, client: &Client) -> anyhow::Result<Vec<StaticToken>> {
        match self {
            Source::File(path) => {
                let text = tokio::fs::read_to_string(path)
                    .await
                    .with_context(|| format!("reading {}", path.display()))?;
                parse(&text)
            }
            Source::Secret { namespace, name } => {
                let secret = Api::<Secret>::namespaced(client.clone(), namespace)
                    .get(name)
                    .await
                    .with_context(|| format!("reading Secret {namespace}/{name}"))?;
                let data = secret
                    .data
                    .and_then(|mut d| d.remove(SECRET_KEY))
                    .with_context(|| format!("Secret {namespace}/{name} has no {SECRET_KEY}"))?;
                parse(std::str::from_utf8(&data.0).context("tokens.yaml is not UTF-8")?)
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

/// Loads the tokens once (failing start-up if they cannot be read), then keeps reloading;
/// each load is handed to `install` (the authenticator's `set_static_tokens`).
pub async fn start(
    source: Source,
    client: Client,
    install: impl Fn(Vec<StaticToken>) + Send + 'static,
    shutdown: tokio_util::sync::CancellationToken,
) -> anyhow::Result<()> {
    let tokens = source.load(&client).await?;
    info!(count = tokens.len(), "static tokens loaded");
    install(tokens);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(RELOAD_EVERY) => {}
            }
            match source.load(&client).await {
                Ok(tokens) => install(tokens),
                Err(err) => {
                    warn!(error = %format!("{err:#}"), "keeping the previous static tokens")
                }
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
    fn a_short_token_is_refused() {
        assert!(parse("tokens:\n  - {name: a, token: short, namespaces: ['*']}\n").is_err());
    }

    #[test]
    fn a_secret_reference_needs_a_namespace_and_a_name() {
        assert!(parse_secret_ref("ns/name").is_ok());
        assert!(parse_secret_ref("name").is_err());
        assert!(parse_secret_ref("/name").is_err());
    }
}
