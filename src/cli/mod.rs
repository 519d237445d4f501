//! The command line: one binary, the in-cluster operator and the CI client.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::operator::OperatorArgs;
use crate::telemetry::LogFormat;

pub mod crd;

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

    #[command(subcommand)]
    pub command: Command,
}

/// What to run.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the operator: window controller, drain watcher, HTTP API, metrics and health.
    Operator(Box<OperatorArgs>),
    /// Print the TestWindow CustomResourceDefinition as YAML.
    Crd,
    /// Open a test window (CI client).
    Open,
    /// Close a test window and print its report (CI client).
    Close,
    /// Extend an open test window (CI client).
    Renew,
    /// Show one test window and its report (CI client).
    Get,
    /// List test windows (CI client).
    List,
    /// Open a window, run a command inside it, close it, exit with the command's code.
    Run,
}

impl Command {
    /// Runs the command; the returned code becomes the process exit code.
    pub async fn run(self) -> anyhow::Result<ExitCode> {
        match self {
            Command::Operator(args) => crate::operator::run(*args)
                .await
                .map(|()| ExitCode::SUCCESS),
            Command::Crd => crd::print().map(|()| ExitCode::SUCCESS),
            Command::Open
            | Command::Close
            | Command::Renew
            | Command::Get
            | Command::List
            | Command::Run => anyhow::bail!("the CI client is not available in this build yet"),
        }
    }
}
