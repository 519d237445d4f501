//! Waiting on a window with feedback: the backend waits (one `?wait=true` request to the API,
//! or a watch in direct mode) while stderr shows a spinner on a terminal, a plain line every
//! few seconds in CI logs; a wait that runs out is a 504 carrying the window's state.

use std::future::Future;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use super::waited::Waited;
use super::{Backend, ClientError};
use crate::operations::problem::Problem;
use crate::operations::types::{OpenRequest, WindowView};

const FRAMES: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];
const PLAIN_EVERY: Duration = Duration::from_secs(5);
const SPIN_EVERY: Duration = Duration::from_millis(100);

/// Waits until the window `name`, opened with `req` and `key`, is Ready (protection is in
/// effect), for at most `timeout`. The wait is retried under the backend's retry policy, so a
/// restart of the operator while waiting is only a pause; a window that ended first is the
/// server's 409.
pub async fn until_ready(
    backend: &Backend,
    ns: &str,
    name: &str,
    req: &OpenRequest,
    key: &str,
    timeout: Duration,
) -> Result<WindowView, ClientError> {
    let waiting = backend.wait_ready(ns, name, req, key, timeout);
    outcome(
        name,
        "Ready",
        timeout,
        showing_progress(name, "Ready", waiting).await?,
    )
}

/// Waits until the closed window `name` is released (the controller has ended it and removed
/// its protection), for at most `timeout`.
pub async fn until_released(
    backend: &Backend,
    ns: &str,
    name: &str,
    timeout: Duration,
) -> Result<WindowView, ClientError> {
    let waiting = backend.wait_released(ns, name, timeout);
    outcome(
        name,
        "released",
        timeout,
        showing_progress(name, "released", waiting).await?,
    )
}

/// The view of a wait that ended in time, or the 504 of one that ran out.
fn outcome(
    name: &str,
    what: &str,
    timeout: Duration,
    waited: Waited,
) -> Result<WindowView, ClientError> {
    match waited {
        Waited::Done(view) => Ok(view),
        Waited::TimedOut(view) => Err(ClientError::Api {
            problem: Box::new(Problem {
                type_: "https://disruption-guard.io/problems/timeout".into(),
                title: "Gateway Timeout".into(),
                status: 504,
                detail: format!(
                    "window {name:?} was not {what} within {}s (phase {})",
                    timeout.as_secs(),
                    view.phase
                ),
                instance: None,
                window: Some(Box::new(view)),
            }),
            retry_after: None,
        }),
    }
}

/// Runs `waiting` while stderr shows that it waits: a spinner on a terminal (cleared at the
/// end), otherwise a line at the start and every [`PLAIN_EVERY`].
async fn showing_progress<T>(name: &str, what: &str, waiting: impl Future<Output = T>) -> T {
    let tty = std::io::stderr().is_terminal();
    let started = Instant::now();
    let mut ticks = tokio::time::interval(if tty { SPIN_EVERY } else { PLAIN_EVERY });
    let mut waiting = std::pin::pin!(waiting);
    let mut frame = 0usize;
    loop {
        tokio::select! {
            biased;
            done = &mut waiting => {
                if tty {
                    eprint!("\r\x1b[2K");
                }
                return done;
            }
            _ = ticks.tick() => {
                let waited = started.elapsed().as_secs();
                if tty {
                    eprint!(
                        "\r\x1b[2K{} waiting for window {name} to be {what} ({waited}s)",
                        FRAMES[frame % FRAMES.len()]
                    );
                    let _ = std::io::stderr().flush();
                    frame += 1;
                } else {
                    eprintln!("waiting for window {name} to be {what}: {waited}s");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_that_ran_out_is_a_504_naming_the_state_and_carrying_the_window() {
        let view = WindowView {
            name: "tw-1".into(),
            phase: "Pending".into(),
            ..Default::default()
        };
        let err = outcome(
            "tw-1",
            "Ready",
            Duration::from_secs(120),
            Waited::TimedOut(view.clone()),
        )
        .unwrap_err();
        assert_eq!(err.exit_code(), crate::client::exit::TEMPFAIL);
        assert_eq!(
            err.to_string(),
            r#"504 Gateway Timeout: window "tw-1" was not Ready within 120s (phase Pending)"#
        );
        let ClientError::Api { problem, .. } = err else {
            unreachable!()
        };
        assert_eq!(problem.window.as_deref(), Some(&view));
        let done = outcome("tw-1", "Ready", Duration::ZERO, Waited::Done(view.clone()));
        assert_eq!(done.unwrap(), view);
    }

    #[tokio::test]
    async fn the_wait_is_shown_while_it_lasts_and_its_answer_returned() {
        let answer = showing_progress("tw-1", "Ready", async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            7
        })
        .await;
        assert_eq!(answer, 7);
    }
}
