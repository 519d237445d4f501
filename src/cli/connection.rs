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
    #[arg(long, env = "DISRUPTION_GUARD_TOKEN", hide_env_values = true, global = true)]
    pub token: Option<String>,
    /// File holding the bearer token (e.g. a projected ServiceAccount token); read again for
    /// every request, so a token rotated on disk is picked up.
    #[arg(long, env = "DISRUPTION_GUARD_TOKEN_FILE", global = true, conflicts_with = "token")]
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
    /// Namespace of the window [default: the kubeconfig context's namespace, as kubectl: in
    /// direct mode the kubeconfig used (at --context); with --server the one kubectl would read
    /// (KUBECONFIG or ~/.kube/config, current context) if there is one; else `default`].
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

/// The namespace of the kubeconfig's context `context` (its current context when `None`), as
/// kubectl reads it: none when the context names none (or does not exist).
pub fn context_namespace(
    kubeconfig: &kube::config::Kubeconfig,
    context: Option<&str>,
) -> Option<String> {
    let name = context.or(kubeconfig.current_context.as_deref())?;
    kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == name)?
        .context
        .as_ref()?
        .namespace
        .clone()
        .filter(|ns| !ns.is_empty())
}

impl Connection {
    /// The backend, and the namespace to act in: `-n`, else in direct mode the kubeconfig
    /// context's namespace (kubectl's rule), else `default`.
    pub(super) async fn backend(&self) -> Result<(Backend, String), ClientError> {
        let Some(server) = self.server.as_deref() else {
            let (kubeconfig, source) = self.kubeconfig()?;
            let namespace =
                self.namespace_or(context_namespace(&kubeconfig, self.context.as_deref()));
            let options = kube::config::KubeConfigOptions {
                context: self.context.clone(),
                ..Default::default()
            };
            let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(|e| ClientError::Config(format!("loading {source}: {e}")))?;
            let client = kube::Client::try_from(config)
                .map_err(|e| ClientError::Config(format!("building a Kubernetes client: {e}")))?;
            return Ok((
                Backend::Kube(Windows::new(client, direct_limits())),
                namespace,
            ));
        };
        // The API needs no kubeconfig; one that is there (and readable) still names the
        // namespace, as kubectl's would.
        let from_context = kube::config::Kubeconfig::read()
            .ok()
            .and_then(|kubeconfig| context_namespace(&kubeconfig, None));
        Ok((self.http(server)?, self.namespace_or(from_context)))
    }

    /// `-n` (or `DISRUPTION_GUARD_NAMESPACE`), else the context's, else `default`.
    fn namespace_or(&self, from_context: Option<String>) -> String {
        self.namespace
            .clone()
            .or(from_context)
            .unwrap_or_else(|| "default".into())
    }

    /// Direct mode's kubeconfig, `--kubeconfig` else kubectl's files, and where it was read.
    fn kubeconfig(&self) -> Result<(kube::config::Kubeconfig, String), ClientError> {
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
        Ok((kubeconfig, source))
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

    fn kubeconfig(yaml: &str) -> kube::config::Kubeconfig {
        kube::config::Kubeconfig::from_yaml(yaml).unwrap()
    }

    const TWO_CONTEXTS: &str = "
apiVersion: v1
kind: Config
current-context: shop
contexts:
- name: shop
  context: {cluster: c, user: u, namespace: shop}
- name: bare
  context: {cluster: c, user: u}
";

    #[test]
    fn the_namespace_is_the_current_or_named_contexts_as_kubectl_reads_it() {
        let config = kubeconfig(TWO_CONTEXTS);
        assert_eq!(context_namespace(&config, None).as_deref(), Some("shop"));
        assert_eq!(
            context_namespace(&config, Some("shop")).as_deref(),
            Some("shop")
        );
        assert_eq!(context_namespace(&config, Some("bare")), None);
        assert_eq!(context_namespace(&config, Some("missing")), None);
        let no_current = kubeconfig(&TWO_CONTEXTS.replace("current-context: shop", ""));
        assert_eq!(context_namespace(&no_current, None), None);
    }

    #[test]
    fn n_wins_over_the_context_and_default_is_the_last_resort() {
        use clap::Parser;
        let mut conn = crate::cli::Cli::try_parse_from(["disruption-guard", "list"])
            .unwrap()
            .connection;
        assert_eq!(conn.namespace_or(Some("shop".into())), "shop");
        assert_eq!(conn.namespace_or(None), "default");
        conn.namespace = Some("cart".into());
        assert_eq!(conn.namespace_or(Some("shop".into())), "cart");
    }

    #[test]
    fn direct_mode_applies_the_operators_default_ttl_limits() {
        let limits = direct_limits();
        assert_eq!(limits.default, Duration::from_secs(30 * 60));
        assert_eq!(limits.max, Duration::from_secs(24 * 3600));
    }
}
