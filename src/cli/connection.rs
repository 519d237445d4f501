//! How the CI client reaches the windows (`--server` and its token, or `--kubeconfig`): the
//! flags every client command shares, and the backend they make.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::client::credentials::TokenSource;
use crate::client::output::Format;
use crate::client::retry::RetryPolicy;
use crate::client::{Backend, ClientError, HttpBackend};
use crate::operations::ttl::TtlLimits;
use crate::operations::windows::Windows;
use crate::resources::duration;

/// The CI provider whose OIDC id-token the client uses (`--oidc`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OidcProvider {
    /// GitHub Actions: requested from the runner (`permissions: id-token: write`).
    Github,
    /// GitLab CI: the variable a job's `id_tokens:` defines.
    Gitlab,
}

/// How the client reaches the windows.
#[derive(Debug, Clone, Args)]
pub struct Connection {
    /// Base URL of the disruption-guard API.
    #[arg(long, env = "DISRUPTION_GUARD_SERVER", global = true)]
    pub server: Option<String>,
    /// Bearer token for the API.
    #[arg(
        long,
        env = "DISRUPTION_GUARD_TOKEN",
        hide_env_values = true,
        global = true
    )]
    pub token: Option<String>,
    /// File holding the bearer token (e.g. a projected ServiceAccount token); read again for
    /// every request, so a token rotated on disk is picked up.
    #[arg(
        long,
        env = "DISRUPTION_GUARD_TOKEN_FILE",
        global = true,
        conflicts_with = "token"
    )]
    pub token_file: Option<PathBuf>,
    /// Use the CI job's own OIDC id-token instead of a stored one (takes precedence over
    /// --token and --token-file). `github`: requested from the runner for --oidc-audience (the
    /// job needs `permissions: id-token: write`), and again before it expires. `gitlab`: the
    /// variable named by --oidc-token-var, defined by the job's `id_tokens:`.
    #[arg(long, env = "DISRUPTION_GUARD_OIDC", value_enum, global = true)]
    pub oidc: Option<OidcProvider>,
    /// Audience of the id-token requested from the GitHub Actions runner: the guard's
    /// `--token-audience`, its own per install (the chart's `disruption-guard:<clusterName>`).
    #[arg(
        long,
        env = "DISRUPTION_GUARD_OIDC_AUDIENCE",
        default_value = "disruption-guard",
        global = true
    )]
    pub oidc_audience: String,
    /// With `--oidc gitlab`: the variable the job's `id_tokens:` puts the id-token in.
    #[arg(
        long,
        env = "DISRUPTION_GUARD_OIDC_TOKEN_VAR",
        default_value = "DISRUPTION_GUARD_ID_TOKEN",
        global = true
    )]
    pub oidc_token_var: String,
    /// Talk to the cluster's TestWindow objects directly with this kubeconfig instead of the
    /// API. Without `--server`, direct mode reads the kubeconfig as kubectl does: `KUBECONFIG`
    /// (several files merged), else `~/.kube/config`.
    #[arg(long, global = true, conflicts_with = "server")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use in direct mode (default: its current context).
    #[arg(long, global = true, conflicts_with = "server")]
    pub context: Option<String>,
    /// Namespace of the window [default: in direct mode the context's namespace, as kubectl;
    /// else `default`].
    #[arg(short, long, env = "DISRUPTION_GUARD_NAMESPACE", global = true)]
    pub namespace: Option<String>,
    /// Output format on stdout.
    #[arg(short, long, value_enum, default_value_t = Format::Table, global = true)]
    pub output: Format,
    /// How long to keep retrying a call that meets 429, 502, 503, 504 or no connection (with
    /// exponential backoff and jitter, honouring Retry-After); 0s tries once.
    #[arg(
        long,
        env = "DISRUPTION_GUARD_RETRY_FOR",
        default_value = "2m",
        value_parser = duration_or_zero,
        global = true
    )]
    pub retry_for: Duration,
}

fn duration_or_zero(text: &str) -> Result<Duration, String> {
    if text.trim().trim_end_matches(['s', 'm', 'h']) == "0" {
        return Ok(Duration::ZERO);
    }
    duration::parse(text)
}

/// The ttl limits of direct mode: the operator's own defaults (`--default-ttl`, `--max-ttl`),
/// or their `DISRUPTION_GUARD_*` environment variables when set.
pub(super) fn direct_limits() -> TtlLimits {
    #[derive(clap::Parser)]
    struct OperatorDefaults {
        #[command(flatten)]
        api: crate::api::ApiArgs,
        #[command(flatten)]
        window: crate::window::WindowArgs,
    }
    let d = <OperatorDefaults as clap::Parser>::parse_from(["operator"]);
    TtlLimits {
        default: d.api.default_ttl,
        max: d.window.max_ttl,
    }
}

impl Connection {
    /// The backend, and the namespace to act in: `-n`, else in direct mode the kubeconfig
    /// context's namespace (kubectl's rule), else `default`.
    pub(super) async fn backend(&self) -> Result<(Backend, String), ClientError> {
        let Some(server) = self.server.as_deref() else {
            let config = self.kubeconfig().await?;
            let namespace = self
                .namespace
                .clone()
                .unwrap_or_else(|| config.default_namespace.clone());
            let client = kube::Client::try_from(config)
                .map_err(|e| ClientError::Config(format!("building a Kubernetes client: {e}")))?;
            return Ok((
                Backend::Kube(Windows::new(client, direct_limits())),
                namespace,
            ));
        };
        let namespace = self.namespace.clone().unwrap_or_else(|| "default".into());
        Ok((self.http(server)?, namespace))
    }

    /// Direct mode's configuration: `--kubeconfig`, else kubectl's files, at `--context`.
    async fn kubeconfig(&self) -> Result<kube::Config, ClientError> {
        let options = kube::config::KubeConfigOptions {
            context: self.context.clone(),
            ..Default::default()
        };
        let (kubeconfig, source) = match &self.kubeconfig {
            Some(path) => (
                kube::config::Kubeconfig::read_from(path),
                path.display().to_string(),
            ),
            None => (
                kube::config::Kubeconfig::read(),
                "the kubeconfig (KUBECONFIG or ~/.kube/config)".to_string(),
            ),
        };
        let kubeconfig = kubeconfig.map_err(|e| {
            ClientError::Config(format!(
                "no server and no kubeconfig: pass --server URL (or DISRUPTION_GUARD_SERVER), or \
                 --kubeconfig; reading {source}: {e}"
            ))
        })?;
        kube::Config::from_custom_kubeconfig(kubeconfig, &options)
            .await
            .map_err(|e| ClientError::Config(format!("loading {source}: {e}")))
    }

    /// Where the bearer token comes from: `--oidc`, else `--token`, else `--token-file`.
    fn token_source(&self) -> Result<TokenSource, ClientError> {
        Ok(match (self.oidc, &self.token, &self.token_file) {
            (Some(OidcProvider::Github), _, _) => {
                TokenSource::github_actions(&self.oidc_audience, |k| std::env::var(k).ok())?
            }
            (Some(OidcProvider::Gitlab), _, _) => TokenSource::Env(self.oidc_token_var.clone()),
            (None, Some(t), _) => TokenSource::Fixed(t.trim().to_string()),
            (None, None, Some(path)) => {
                // Read once now, so that a missing file is an error before anything starts.
                std::fs::read_to_string(path)
                    .map_err(|e| ClientError::Config(format!("reading {}: {e}", path.display())))?;
                TokenSource::File(path.clone())
            }
            (None, None, None) => TokenSource::None,
        })
    }

    /// Server mode: the HTTP API at `server`, with the bearer token if one is given.
    fn http(&self, server: &str) -> Result<Backend, ClientError> {
        let token = self.token_source()?;
        Ok(Backend::Http(HttpBackend::new(
            server,
            token,
            RetryPolicy::new(self.retry_for),
        )?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_mode_applies_the_operators_default_ttl_limits() {
        let limits = direct_limits();
        assert_eq!(limits.default, Duration::from_secs(30 * 60));
        assert_eq!(limits.max, Duration::from_secs(24 * 3600));
    }
}
