//! `disruption-guard run -- CMD…`: open a window, wait until protection is in effect, run the
//! command with `DISRUPTION_GUARD_WINDOW` set, renew on a heartbeat, close on exit, failure or
//! signal (forwarding SIGINT/SIGTERM to the command), print the report, exit with the
//! command's code. When the close fails the window's ttl is the backstop.
//!
//! Every call is retried while the guard hiccups (see [`super::retry`]): a rolling update of
//! the operator while the command runs delays a renewal or the close, never the command. With
//! `--fail-open`, a guard that stays unreachable past the retries lets the command run
//! unprotected, with a loud warning, instead of failing the job.

use std::process::{ExitCode, ExitStatus};
use std::time::Duration;

use tokio::process::Command;
use tokio::signal::unix::{SignalKind, signal};

use super::output::{self, Format};
use super::{Backend, ClientError, wait};
use crate::operations::types::{OpenRequest, WindowView};

/// What `run` needs.
pub struct RunPlan {
    /// Namespace of the window.
    pub namespace: String,
    /// The open request.
    pub open: OpenRequest,
    /// Idempotency key of the open (the wait for Ready asks the same open again with it).
    pub key: String,
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
    /// Run the command unprotected, with a loud warning, when the guard fails (after the
    /// retries) instead of failing.
    pub fail_open: bool,
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

/// Whether a failure is the guard's and not the client's own: it could not be reached, it
/// answered 429 or 5xx, or nothing became Ready in time. Wrong credentials, a refused request
/// or a bad configuration are never "the guard is down".
pub fn guard_failure(err: &ClientError) -> bool {
    match err {
        ClientError::Api { problem, .. } => problem.status == 429 || problem.status >= 500,
        ClientError::Unreachable(_) | ClientError::Transport(_) => true,
        ClientError::Config(_) | ClientError::Interrupted { .. } => false,
    }
}

/// The warning of `--fail-open`: on stderr in a box, and as an annotation in GitHub Actions.
fn warn_unprotected(err: &ClientError, window: Option<&str>) {
    let what = match window {
        Some(name) => format!(
            "window {name} did not get protection in effect ({err}); it is renewed and closed \
             as usual in case the guard comes back"
        ),
        None => format!("the guard could not be reached ({err})"),
    };
    let bar = "!".repeat(78);
    eprintln!(
        "{bar}\n!! --fail-open: {what}.\n!! The command runs WITHOUT PROTECTION: node \
         autoscalers may disrupt the pods under test.\n{bar}"
    );
    if std::env::var("GITHUB_ACTIONS").as_deref() == Ok("true") {
        eprintln!(
            "::warning title=disruption-guard: running unprotected::--fail-open: {}",
            what.replace('\n', " ")
        );
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

    let opened = tokio::select! {
        r = backend.open(ns, &plan.open, Some(&plan.key)) => r,
        _ = term.recv() => Err(ClientError::Interrupted { name: "SIGTERM", code: 143 }),
        _ = int.recv() => Err(ClientError::Interrupted { name: "SIGINT", code: 130 }),
    };
    let opened = match opened {
        Ok(view) => view,
        Err(err) if plan.fail_open && guard_failure(&err) => {
            warn_unprotected(&err, None);
            let (code, _) = supervise(backend, &plan, None, &mut term, &mut int).await;
            return Ok(ExitCode::from(code));
        }
        Err(err) => return Err(err),
    };
    let name = opened.name.clone();
    eprintln!("opened window {ns}/{name}");
    github_output(&name);

    let ready = tokio::select! {
        r = wait::until_ready(backend, ns, &name, &plan.open, &plan.key, plan.ready_timeout), if plan.wait_ready => r,
        _ = std::future::ready(()), if !plan.wait_ready => Ok(opened.clone()),
        _ = term.recv() => Err(ClientError::Interrupted { name: "SIGTERM", code: 143 }),
        _ = int.recv() => Err(ClientError::Interrupted { name: "SIGINT", code: 130 }),
    };
    match ready {
        Ok(view) if plan.wait_ready => match output::no_pod_warning(&view) {
            Some(warning) => eprintln!("{warning}"),
            None => eprintln!("window {ns}/{name} is Ready: protection is in effect"),
        },
        Ok(_) => {}
        Err(err) if plan.fail_open && guard_failure(&err) => {
            warn_unprotected(&err, Some(&name));
        }
        Err(err) => {
            eprintln!("error: {err}; the command was not started");
            let interrupted = matches!(err, ClientError::Interrupted { .. });
            close_and_report(backend, ns, &name, &plan, interrupted).await;
            return Ok(ExitCode::from(err.exit_code()));
        }
    }

    let (code, signalled) = supervise(backend, &plan, Some(&name), &mut term, &mut int).await;
    close_and_report(backend, ns, &name, &plan, signalled).await;
    Ok(ExitCode::from(code))
}

type Renewal<'a> = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<WindowView, ClientError>> + Send + 'a>,
>;

/// Runs the command, renewing `window` on the heartbeat and forwarding SIGTERM and SIGINT;
/// returns its exit code and whether a signal came. A renewal is retried beside the command
/// (never holding up its exit or a signal); one that fails for good is a warning, and the
/// next heartbeat tries again. Without a window (`--fail-open` with the guard unreachable)
/// the command runs with `DISRUPTION_GUARD_UNPROTECTED=1` and nothing is renewed.
async fn supervise(
    backend: &Backend,
    plan: &RunPlan,
    window: Option<&str>,
    term: &mut tokio::signal::unix::Signal,
    int: &mut tokio::signal::unix::Signal,
) -> (u8, bool) {
    let ns = plan.namespace.as_str();
    let Some((program, args)) = plan.command.split_first() else {
        eprintln!("error: run: no command given after --");
        return (crate::client::exit::CONFIG, false);
    };
    let mut command = Command::new(program);
    command
        .args(args)
        .env("DISRUPTION_GUARD_NAMESPACE", ns)
        .kill_on_drop(false);
    match window {
        Some(name) => command.env("DISRUPTION_GUARD_WINDOW", name),
        None => command.env("DISRUPTION_GUARD_UNPROTECTED", "1"),
    };
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(err) => {
            eprintln!("error: starting {program:?}: {err}");
            return (127, false);
        }
    };
    let pid = child.id();
    let mut heartbeat = tokio::time::interval(plan.heartbeat);
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    heartbeat.tick().await;
    let mut renewing: Option<Renewal<'_>> = None;
    let mut signalled = false;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            _ = heartbeat.tick(), if window.is_some() && renewing.is_none() => {
                if let Some(name) = window {
                    renewing = Some(Box::pin(backend.renew(ns, name, plan.renew_ttl.clone())));
                }
            }
            renewed = async { renewing.as_mut().expect("a renewal in flight").await }, if renewing.is_some() => {
                renewing = None;
                if let Err(err) = renewed {
                    eprintln!(
                        "warning: renewing window {ns}/{} failed: {err}; the next heartbeat \
                         tries again (unrenewed, the window ends when its ttl runs out)",
                        window.unwrap_or_default()
                    );
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
    if window.is_none() {
        eprintln!("the command ran without a window (--fail-open): nothing to close");
    }
    (code, signalled)
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
    // CI kills a cancelled job soon after its SIGTERM: retry the close only briefly then.
    let backend = &if signalled {
        let mut retry = backend.retry();
        retry.budget = retry.budget.min(RELEASE_WAIT_AFTER_SIGNAL);
        backend.with_retry(retry)
    } else {
        backend.clone()
    };
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
        wait::until_released(backend, ns, name, limit).await
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

    fn problem(status: u16) -> ClientError {
        ClientError::Api {
            problem: Box::new(crate::operations::problem::Problem {
                type_: "about:blank".into(),
                title: "t".into(),
                status,
                detail: "d".into(),
                instance: None,
                window: None,
            }),
            retry_after: None,
        }
    }

    #[test]
    fn fail_open_covers_the_guards_failures_never_the_clients_own() {
        for status in [429, 500, 502, 503, 504] {
            assert!(guard_failure(&problem(status)), "{status}");
        }
        assert!(guard_failure(&ClientError::Unreachable("refused".into())));
        assert!(guard_failure(&ClientError::Transport(
            "not a window".into()
        )));
        for status in [400, 401, 403, 404, 409, 422] {
            assert!(!guard_failure(&problem(status)), "{status}");
        }
        assert!(!guard_failure(&ClientError::Config("no server".into())));
        assert!(!guard_failure(&ClientError::Interrupted {
            name: "SIGTERM",
            code: 143
        }));
    }

    #[test]
    fn the_exit_code_is_the_commands_or_128_plus_its_signal() {
        assert_eq!(exit_code_of(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code_of(ExitStatus::from_raw(0)), 0);
        assert_eq!(exit_code_of(ExitStatus::from_raw(15)), 143);
    }
}
