//! Arguments of the CI client commands (`open`, `get`, `list`, `renew`, `close`, `run`) and
//! their dispatch to [`crate::client`].

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use super::connection::Connection;
use crate::client::output::{self, Format};
use crate::client::run::{RunPlan, github_output};
use crate::client::{ClientError, wait};
use crate::operations::overlap::overlap;
use crate::operations::problem::ApiError;
use crate::operations::selector;
use crate::operations::types::{CiMeta, OpenRequest, ProtectInput, SelectorInput, SelectorObject};
use crate::resources::duration;

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
    /// Fail (exit 65) when the window, once Ready, selects no pod, and close it again; without
    /// it such a window is kept, with a warning on stderr.
    #[arg(long, conflicts_with = "no_wait")]
    pub require_pods: bool,
    /// How long to wait for protection to be in effect.
    #[arg(long, default_value = "2m", value_parser = duration::parse)]
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
    #[arg(long, default_value = "1m", value_parser = duration::parse)]
    pub wait_timeout: Duration,
}

/// `get NAME`.
#[derive(Debug, Clone, Args)]
pub struct GetArgs {
    /// The window.
    pub name: String,
}

/// `list [-A] [-l SELECTOR] [--window-selector SELECTOR]`.
#[derive(Debug, Clone, Args)]
pub struct ListArgs {
    /// List the windows of every namespace, with a NAMESPACE column (as `kubectl get -A`).
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Only windows over pods this label selector selects (`app=web,tier in (a,b)`), as `-l`
    /// selects pods in every command: a window is listed when a pod could match both its
    /// selector and this one (a window over every pod always is).
    #[arg(short = 'l', long = "selector", value_name = "SELECTOR")]
    pub selector: Option<String>,
    /// Only windows whose own labels match this selector, as `kubectl get testwindows -l`
    /// (`team=shop,ci`).
    #[arg(long, value_name = "SELECTOR")]
    pub window_selector: Option<String>,
}

/// The pods `list -l` names, parsed as an open's selector is; a malformed one is refused as
/// invalid, naming the flag.
fn pod_selector(text: &str) -> Result<SelectorObject, ClientError> {
    selector::parse(&SelectorInput::Text(text.to_string()))
        .map_err(|e| ApiError::BadRequest(format!("selector (-l): {e}")).into())
}

/// `run [OPTIONS] -- CMD ARGS…`.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub open: OpenArgs,
    /// How often to renew while the command runs; a third of the ttl when absent.
    #[arg(long, value_parser = duration::parse)]
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
            require_pods: self.require_pods,
        }
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
            let (req, key) = (args.request(), args.key());
            let view = backend.open(ns, &req, Some(&key)).await?;
            eprintln!("opened window {ns}/{}", view.name);
            github_output(&view.name);
            let view = if args.no_wait {
                view
            } else {
                wait::until_ready(&backend, ns, &view.name, &req, &key, args.wait_timeout).await?
            };
            if let Some(warning) = output::no_pod_warning(&view) {
                eprintln!("{warning}");
            }
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
            let pods = args.selector.as_deref().map(pod_selector).transpose()?;
            let mut list = backend.list(scope, args.window_selector.as_deref()).await?;
            if let Some(pods) = &pods {
                list.items.retain(|w| overlap(&w.selector, pods));
            }
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
                view = wait::until_released(&backend, ns, &args.name, args.wait_timeout).await?;
            }
            eprintln!("closed window {ns}/{}", view.name);
            print!("{}", output::window(&view, fmt, true));
        }
        ClientCommand::Run(args) => {
            let ttl_secs = args
                .open
                .ttl
                .as_deref()
                .and_then(|t| duration::parse(t).ok())
                .unwrap_or(Duration::from_secs(30 * 60));
            let heartbeat = args
                .heartbeat
                .unwrap_or(ttl_secs / 3)
                .clamp(Duration::from_secs(1), Duration::from_secs(300));
            let plan = RunPlan {
                namespace: ns.to_string(),
                open: args.open.request(),
                key: args.open.key(),
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
