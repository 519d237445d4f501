//! `disruption-guard run -- CMD…`: open a window, wait until protection is in effect, run the
//! command with `DISRUPTION_GUARD_WINDOW` set, renew on a heartbeat, close on exit, failure or
//! signal (forwarding SIGINT/SIGTERM to the command), print the report, exit with the
//! command's code. When the close fails the window's ttl is the backstop.

use std::process::{ExitCode, ExitStatus};
use std::time::Duration;

use tokio::process::Command;
use tokio::signal::unix::{SignalKind, signal};

use super::output::{self, Format};
use super::{Backend, ClientError, wait};
use crate::api::types::{OpenRequest, WindowView};

/// What `run` needs.
pub struct RunPlan {
    /// Namespace of the window.
    pub namespace: String,
    /// The open request.
    pub open: OpenRequest,
    /// Idempotency key of the open.
    pub key: Option<String>,
    /// How long to wait for Ready.
    pub ready_timeout: Duration,
    /// How long to wait for the release after the close.
    pub close_timeout: Duration,
    /// Renewal period.
    pub heartbeat: Duration,
    /// Ttl asked for on each renewal.
    pub renew_ttl: Option<String>,
    /// The command and its arguments.
    pub command: Vec<String>,
    /// Output format of the report.
    pub format: Format,
    /// Wait for Ready before the command and for the release after the close (`--no-wait`
    /// turns both off).
    pub wait_ready: bool,
}

/// The exit code of a finished child: its code, or 128 + the signal that killed it.
pub fn exit_code_of(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(1),
        (None, Some(sig)) => u8::try_from(128 + sig).unwrap_or(1),
        _ => 1,
    }
}

/// Writes `window=<name>` to `$GITHUB_OUTPUT` inside GitHub Actions.
pub fn github_output(name: &str) {
    if std::env::var_os("GITHUB_ACTIONS").is_none() {
        return;
    }
    let Some(path) = std::env::var_os("GITHUB_OUTPUT") else {
        return;
    };
    use std::io::Write;
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| writeln!(f, "window={name}"));
    if let Err(err) = written {
        eprintln!("warning: could not write to $GITHUB_OUTPUT: {err}");
    }
}

/// Runs the plan; the result is the process exit code.
pub async fn run(backend: &Backend, plan: RunPlan) -> Result<ExitCode, ClientError> {
    let ns = plan.namespace.as_str();
    // Signals are caught from the start, so a SIGTERM while waiting still closes the window.
    let mut term = signal(SignalKind::terminate())
        .map_err(|e| ClientError::Config(format!("installing a SIGTERM handler: {e}")))?;
    let mut int = signal(SignalKind::interrupt())
        .map_err(|e| ClientError::Config(format!("installing a SIGINT handler: {e}")))?;

    let opened = backend.open(ns, &plan.open, plan.key.as_deref()).await?;
    let name = opened.name.clone();
    eprintln!("opened window {ns}/{name}");
    github_output(&name);

    let ready = tokio::select! {
        r = wait::until(backend, ns, &name, "Ready", plan.ready_timeout, wait::ready), if plan.wait_ready => r,
        _ = std::future::ready(()), if !plan.wait_ready => Ok(opened.clone()),
        _ = term.recv() => Err(ClientError::Interrupted { name: "SIGTERM", code: 143 }),
        _ = int.recv() => Err(ClientError::Interrupted { name: "SIGINT", code: 130 }),
    };
    if let Err(err) = ready {
        eprintln!("error: {err}; the command was not started");
        let interrupted = matches!(err, ClientError::Interrupted { .. });
        close_and_report(backend, ns, &name, &plan, interrupted).await;
        return Ok(ExitCode::from(err.exit_code()));
    }
    if plan.wait_ready {
        eprintln!("window {ns}/{name} is Ready: protection is in effect");
    }

    let (program, args) = plan
        .command
        .split_first()
        .ok_or_else(|| ClientError::Config("run: no command given after --".into()))?;
    let mut child = match Command::new(program)
        .args(args)
        .env("DISRUPTION_GUARD_WINDOW", &name)
        .env("DISRUPTION_GUARD_NAMESPACE", ns)
        .kill_on_drop(false)
        .spawn()
    {
        Ok(child) => child,
        Err(err) => {
            eprintln!("error: starting {program:?}: {err}");
            close_and_report(backend, ns, &name, &plan, false).await;
            return Ok(ExitCode::from(127));
        }
    };
    let pid = child.id();
    let mut heartbeat = tokio::time::interval(plan.heartbeat);
    heartbeat.tick().await;
    let mut signalled = false;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            _ = heartbeat.tick() => {
                if let Err(err) = backend.renew(ns, &name, plan.renew_ttl.clone()).await {
                    eprintln!("warning: renewing window {name} failed: {err}");
                }
            }
            _ = term.recv() => {
                signalled = true;
                forward(pid, libc::SIGTERM, "SIGTERM");
            }
            _ = int.recv() => {
                signalled = true;
                forward(pid, libc::SIGINT, "SIGINT");
            }
        }
    };
    let code = match status {
        Ok(status) => exit_code_of(status),
        Err(err) => {
            eprintln!("error: waiting for the command: {err}");
            1
        }
    };
    close_and_report(backend, ns, &name, &plan, signalled).await;
    Ok(ExitCode::from(code))
}

fn forward(pid: Option<u32>, sig: libc::c_int, name: &str) {
    if let Some(pid) = pid.and_then(|p| libc::pid_t::try_from(p).ok()) {
        eprintln!("forwarding {name} to the command (pid {pid})");
        // SAFETY: kill(2) with a pid we spawned and still wait on; no memory is touched.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

/// How long to wait for the release after a signal: CI kills a cancelled job soon after its
/// SIGTERM, and the close itself is already recorded.
const RELEASE_WAIT_AFTER_SIGNAL: Duration = Duration::from_secs(5);

/// Closes the window, waits for the release, prints the report; failures go to stderr.
async fn close_and_report(
    backend: &Backend,
    ns: &str,
    name: &str,
    plan: &RunPlan,
    signalled: bool,
) {
    let closed = match backend.close(ns, name).await {
        Ok(view) => view,
        Err(err) => {
            eprintln!(
                "error: closing window {ns}/{name} failed: {err}; it ends by itself when its \
                 ttl runs out"
            );
            return;
        }
    };
    let released = if plan.wait_ready {
        let limit = if signalled {
            RELEASE_WAIT_AFTER_SIGNAL.min(plan.close_timeout)
        } else {
            plan.close_timeout
        };
        wait::until(backend, ns, name, "released", limit, wait::released).await
    } else {
        Ok(closed.clone())
    };
    let view: WindowView = match released {
        Ok(view) => view,
        Err(err) => {
            eprintln!("warning: window {ns}/{name} is closed but not yet released: {err}");
            closed
        }
    };
    eprintln!("closed window {ns}/{name}");
    print!("{}", output::window(&view, plan.format, true));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn the_exit_code_is_the_commands_or_128_plus_its_signal() {
        assert_eq!(exit_code_of(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code_of(ExitStatus::from_raw(0)), 0);
        assert_eq!(exit_code_of(ExitStatus::from_raw(15)), 143);
    }
}
