//! The command line itself ([`Cli`]) and what each command runs.

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

use super::client::{self, CloseArgs, GetArgs, OpenArgs, RenewArgs, RunArgs};
use super::connection::Connection;
use super::{check_webhook, completion, crd};
use crate::operator::OperatorArgs;
use crate::telemetry::LogFormat;

/// Keeps node autoscalers (Karpenter, Cluster Autoscaler) from killing lone-replica pods while
/// CI tests run.
///
/// CI opens a test window; while it is open the operator protects the selected workloads with
/// PodDisruptionBudgets and do-not-disrupt annotations. When CI closes it, or its TTL runs out,
/// every trace is removed. Independently, the drain watcher rolls out a lone-replica Deployment
/// whose node is being drained, so its new pod starts elsewhere before the old one goes.
#[derive(Debug, Parser)]
#[command(name = "disruption-guard", version, propagate_version = true)]
pub struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Auto, env = "DISRUPTION_GUARD_LOG_FORMAT")]
    pub log_format: LogFormat,

    #[command(flatten)]
    pub connection: Connection,

    #[command(subcommand)]
    pub command: Command,
}

/// What to run.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the operator: window controller, drain watcher, HTTP API, metrics and health.
    Operator(Box<OperatorArgs>),
    /// Print the CustomResourceDefinitions (TestWindow, CITrust) as YAML, or only one.
    Crd {
        /// Only this CRD.
        #[arg(value_enum)]
        only: Option<crd::Which>,
    },
    /// Print the HTTP API's OpenAPI 3 document (as served at /v1/openapi.json).
    Openapi,
    /// Open a test window and wait until protection is in effect (CI client).
    Open(OpenArgs),
    /// Close a test window, wait until its protection is removed, print its report (CI client).
    Close(CloseArgs),
    /// Extend an open test window from now (CI client).
    Renew(RenewArgs),
    /// Show one test window and its report (CI client).
    Get(GetArgs),
    /// List test windows (CI client).
    List(client::ListArgs),
    /// Open a window, run a command inside it, close it, exit with the command's code.
    Run(RunArgs),
    /// Print a shell completion script (bash, zsh or fish) to stdout.
    Completion(completion::CompletionArgs),
    /// Prove that the API server calls the eviction webhook: a dry-run eviction in `-n
    /// NAMESPACE` the webhook must answer (exit 1 with what to check when it does not).
    CheckWebhook(check_webhook::CheckWebhookArgs),
}

impl Command {
    /// Runs the command; the returned code becomes the process exit code.
    pub async fn run(self, connection: Connection) -> anyhow::Result<ExitCode> {
        use client::ClientCommand as C;
        let client_command = match self {
            Command::Operator(args) => {
                return crate::operator::run(*args)
                    .await
                    .map(|()| ExitCode::SUCCESS);
            }
            Command::Crd { only } => return crd::print(only).map(|()| ExitCode::SUCCESS),
            Command::Openapi => {
                print!("{}", crate::api::openapi::json());
                return Ok(ExitCode::SUCCESS);
            }
            Command::Completion(a) => {
                return completion::print(a.shell, Cli::command()).map(|()| ExitCode::SUCCESS);
            }
            Command::CheckWebhook(a) => {
                let target = check_webhook::Target {
                    kubeconfig: connection.kubeconfig.clone(),
                    context: connection.context.clone(),
                    namespace: connection.namespace.clone(),
                };
                return check_webhook::run(a, target)
                    .await
                    .map(|()| ExitCode::SUCCESS);
            }
            Command::Open(a) => C::Open(a),
            Command::Close(a) => C::Close(a),
            Command::Renew(a) => C::Renew(a),
            Command::Get(a) => C::Get(a),
            Command::List(a) => C::List(a),
            Command::Run(a) => C::Run(a),
        };
        Ok(client::run(connection, client_command).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_overflowing_duration_flag_is_refused_naming_the_flag_without_panicking() {
        let huge = "94522879700260684295381835.4h";
        for (flag, args) in [
            ("--max-ttl", vec!["operator", "--max-ttl", huge]),
            ("--default-ttl", vec!["operator", "--default-ttl", huge]),
            ("--drain-resync", vec!["operator", "--drain-resync", huge]),
            ("--retry-for", vec!["--retry-for", huge, "list"]),
        ] {
            let err = Cli::try_parse_from(std::iter::once("disruption-guard").chain(args))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(flag) && err.contains("too large"),
                "{flag}: {err}"
            );
        }
    }
}
