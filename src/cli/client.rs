//! Arguments of the CI client commands (`open`, `get`, `list`, `renew`, `close`, `run`) and
//! their dispatch to [`crate::client`].

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use crate::api::ttl::{self, TtlLimits};
use crate::api::types::{CiMeta, OpenRequest, ProtectInput, SelectorInput};
use crate::api::windows::Windows;
use crate::client::credentials::TokenSource;
use crate::client::output::{self, Format};
use crate::client::retry::RetryPolicy;
use crate::client::run::{RunPlan, github_output};
use crate::client::{Backend, ClientError, HttpBackend, wait};

fn duration(text: &str) -> Result<Duration, String> {
    ttl::parse(text)
}

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
    ttl::parse(text)
}

/// What a new window protects and why.
#[derive(Debug, Clone, Args)]
pub struct OpenArgs {
    /// Label selector of the pods to protect (`app=web,tier in (a,b)`); all pods when absent.
    #[arg(short = 'l', long)]
    pub selector: Option<String>,
    /// Time to live (Go duration); the server's default when absent.
    #[arg(long)]
    pub ttl: Option<String>,
    /// Why the window is open.
    #[arg(long)]
    pub reason: Option<String>,
    /// Name of the window; generated when absent.
    #[arg(long)]
    pub name: Option<String>,
    /// Also protect pods that DaemonSets run (and so every node they run on).
    #[arg(long)]
    pub protect_daemon_sets: bool,
    /// A retried open with the same key (and the same request) returns the same window; a
    /// random one when absent, so the client's own retries never open a second window.
    #[arg(long, env = "DISRUPTION_GUARD_IDEMPOTENCY_KEY")]
    pub idempotency_key: Option<String>,
    /// Do not wait until protection is in effect.
    #[arg(long)]
    pub no_wait: bool,
    /// How long to wait for protection to be in effect.
    #[arg(long, default_value = "2m", value_parser = duration)]
    pub wait_timeout: Duration,
}

/// `renew NAME`.
#[derive(Debug, Clone, Args)]
pub struct RenewArgs {
    /// The window.
    pub name: String,
    /// Time left from now (Go duration); the server's default when absent.
    #[arg(long)]
    pub ttl: Option<String>,
}

/// `close NAME`.
#[derive(Debug, Clone, Args)]
pub struct CloseArgs {
    /// The window.
    pub name: String,
    /// Do not wait until every trace of the window is removed.
    #[arg(long)]
    pub no_wait: bool,
    /// How long to wait for the release.
    #[arg(long, default_value = "1m", value_parser = duration)]
    pub wait_timeout: Duration,
}

/// `get NAME`.
#[derive(Debug, Clone, Args)]
pub struct GetArgs {
    /// The window.
    pub name: String,
}

/// `list [-A] [-l SELECTOR]`.
#[derive(Debug, Clone, Args)]
pub struct ListArgs {
    /// List the windows of every namespace, with a NAMESPACE column (as `kubectl get -A`).
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Only windows whose labels match this selector, as `kubectl get -l` (`team=shop,ci`).
    #[arg(short = 'l', long = "selector", value_name = "SELECTOR")]
    pub selector: Option<String>,
}

/// `run [OPTIONS] -- CMD ARGS…`.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub open: OpenArgs,
    /// How often to renew while the command runs; a third of the ttl when absent.
    #[arg(long, value_parser = duration)]
    pub heartbeat: Option<Duration>,
    /// When the guard cannot be reached (or fails) past --retry-for, run the command anyway,
    /// unprotected, with a loud warning, instead of failing the job.
    #[arg(
        long,
        env = "DISRUPTION_GUARD_FAIL_OPEN",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub fail_open: bool,
    /// The command and its arguments.
    #[arg(last = true, required = true, num_args = 1..)]
    pub command: Vec<String>,
}

/// CI metadata from the environment of GitHub Actions or GitLab CI.
pub fn ci_from_env(env: impl Fn(&str) -> Option<String>) -> Option<CiMeta> {
    if env("GITHUB_ACTIONS").as_deref() == Some("true") {
        let repository = env("GITHUB_REPOSITORY");
        let run_id = env("GITHUB_RUN_ID");
        let url = match (env("GITHUB_SERVER_URL"), &repository, &run_id) {
            (Some(server), Some(repo), Some(id)) => {
                Some(format!("{server}/{repo}/actions/runs/{id}"))
            }
            _ => None,
        };
        return Some(CiMeta {
            provider: Some("github".into()),
            repository,
            run_id,
            url,
        });
    }
    if env("GITLAB_CI").as_deref() == Some("true") {
        return Some(CiMeta {
            provider: Some("gitlab".into()),
            repository: env("CI_PROJECT_PATH"),
            run_id: env("CI_PIPELINE_ID"),
            url: env("CI_PIPELINE_URL"),
        });
    }
    None
}

impl OpenArgs {
    /// The key of the open: the one given, or a random one.
    fn key(&self) -> String {
        self.idempotency_key
            .clone()
            .unwrap_or_else(crate::client::generated_key)
    }

    fn request(&self) -> OpenRequest {
        OpenRequest {
            selector: self.selector.clone().map(SelectorInput::Text),
            ttl: self.ttl.clone(),
            reason: self.reason.clone(),
            ci: ci_from_env(|k| std::env::var(k).ok()),
            name: self.name.clone(),
            protect: self
                .protect_daemon_sets
                .then_some(ProtectInput { daemon_sets: true }),
            idempotency_key: None,
        }
    }
}

/// The ttl limits of direct mode: the operator's own defaults (`--default-ttl`, `--max-ttl`),
/// or their `DISRUPTION_GUARD_*` environment variables when set.
fn direct_limits() -> TtlLimits {
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
    async fn backend(&self) -> Result<(Backend, String), ClientError> {
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

/// A client command.
#[derive(Debug, Clone)]
pub enum ClientCommand {
    /// Open a window.
    Open(OpenArgs),
    /// Read one window.
    Get(GetArgs),
    /// List windows.
    List(ListArgs),
    /// Renew a window.
    Renew(RenewArgs),
    /// Close a window.
    Close(CloseArgs),
    /// Run a command inside a window.
    Run(RunArgs),
}

/// Runs a client command; failures are printed on stderr and become the exit code.
pub async fn run(conn: Connection, cmd: ClientCommand) -> ExitCode {
    match dispatch(&conn, cmd).await {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err}");
            if let ClientError::Api { problem, .. } = &err
                && let Some(window) = &problem.window
            {
                eprint!("{}", output::window(window, Format::Table, false));
            }
            ExitCode::from(err.exit_code())
        }
    }
}

async fn dispatch(conn: &Connection, cmd: ClientCommand) -> Result<ExitCode, ClientError> {
    let (backend, ns) = conn.backend().await?;
    let ns = ns.as_str();
    let fmt = conn.output;
    match cmd {
        ClientCommand::Open(args) => {
            let view = backend.open(ns, &args.request(), Some(&args.key())).await?;
            eprintln!("opened window {ns}/{}", view.name);
            github_output(&view.name);
            let view = if args.no_wait {
                view
            } else {
                wait::until(
                    &backend,
                    ns,
                    &view.name,
                    "Ready",
                    args.wait_timeout,
                    wait::ready,
                )
                .await?
            };
            print!("{}", output::window(&view, fmt, false));
        }
        ClientCommand::Get(args) => {
            print!(
                "{}",
                output::window(&backend.get(ns, &args.name).await?, fmt, false)
            );
        }
        ClientCommand::List(args) => {
            let scope = (!args.all_namespaces).then_some(ns);
            let list = backend.list(scope, args.selector.as_deref()).await?;
            print!("{}", output::windows(&list.items, fmt, args.all_namespaces));
        }
        ClientCommand::Renew(args) => {
            let view = backend.renew(ns, &args.name, args.ttl).await?;
            eprintln!(
                "renewed window {ns}/{} until {}",
                view.name,
                view.expires_at.as_deref().unwrap_or("(pending)")
            );
            print!("{}", output::window(&view, fmt, false));
        }
        ClientCommand::Close(args) => {
            let mut view = backend.close(ns, &args.name).await?;
            if !args.no_wait {
                view = wait::until(
                    &backend,
                    ns,
                    &args.name,
                    "released",
                    args.wait_timeout,
                    wait::released,
                )
                .await?;
            }
            eprintln!("closed window {ns}/{}", view.name);
            print!("{}", output::window(&view, fmt, true));
        }
        ClientCommand::Run(args) => {
            let ttl_secs = args
                .open
                .ttl
                .as_deref()
                .and_then(|t| ttl::parse(t).ok())
                .unwrap_or(Duration::from_secs(30 * 60));
            let heartbeat = args
                .heartbeat
                .unwrap_or(ttl_secs / 3)
                .clamp(Duration::from_secs(1), Duration::from_secs(300));
            let plan = RunPlan {
                namespace: ns.to_string(),
                open: args.open.request(),
                key: Some(args.open.key()),
                ready_timeout: args.open.wait_timeout,
                close_timeout: Duration::from_secs(60),
                heartbeat,
                renew_ttl: args.open.ttl.clone(),
                command: args.command,
                format: fmt,
                wait_ready: !args.open.no_wait,
                fail_open: args.fail_open,
            };
            return crate::client::run::run(&backend, plan).await;
        }
    }
    Ok(ExitCode::SUCCESS)
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

    #[test]
    fn github_actions_metadata_is_read_from_its_environment() {
        let env = |k: &str| match k {
            "GITHUB_ACTIONS" => Some("true".to_string()),
            "GITHUB_REPOSITORY" => Some("org/shop".to_string()),
            "GITHUB_RUN_ID" => Some("42".to_string()),
            "GITHUB_SERVER_URL" => Some("https://github.com".to_string()),
            _ => None,
        };
        let ci = ci_from_env(env).unwrap();
        assert_eq!(ci.provider.as_deref(), Some("github"));
        assert_eq!(
            ci.url.as_deref(),
            Some("https://github.com/org/shop/actions/runs/42")
        );
        assert!(ci_from_env(|_| None).is_none());
    }
}
