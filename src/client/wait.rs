//! Waiting on a window with feedback: a spinner on a terminal, a plain line every few
//! seconds in CI logs.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use super::{Backend, ClientError};
use crate::operations::problem::Problem;
use crate::operations::types::WindowView;

const FRAMES: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];
const PLAIN_EVERY: Duration = Duration::from_secs(5);

/// Polls the window until `done` holds, showing progress on stderr; a 504-like error carrying
/// the window's state after `timeout`. Each read is retried under the backend's retry policy,
/// so a restart of the operator while waiting is only a pause.
pub async fn until(
    backend: &Backend,
    ns: &str,
    name: &str,
    what: &str,
    timeout: Duration,
    done: fn(&WindowView) -> bool,
) -> Result<WindowView, ClientError> {
    let started = Instant::now();
    let tty = std::io::stderr().is_terminal();
    let mut last_line = Instant::now() - PLAIN_EVERY;
    let mut frame = 0usize;
    loop {
        // Transient failures were already retried under the backend's policy.
        let view = backend.get(ns, name).await?;
        if done(&view) {
            if tty {
                eprint!("\r\x1b[2K");
            }
            return Ok(view);
        }
        let waited = started.elapsed();
        if waited >= timeout {
            if tty {
                eprint!("\r\x1b[2K");
            }
            return Err(ClientError::Api {
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
            });
        }
        if tty {
            eprint!(
                "\r\x1b[2K{} waiting for window {name} to be {what} (phase {}, {}s)",
                FRAMES[frame % FRAMES.len()],
                view.phase,
                waited.as_secs()
            );
            let _ = std::io::stderr().flush();
            frame += 1;
        } else if last_line.elapsed() >= PLAIN_EVERY {
            eprintln!(
                "waiting for window {name} to be {what}: phase {}, {}s",
                view.phase,
                waited.as_secs()
            );
            last_line = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(if tty { 100 } else { 250 })).await;
    }
}

/// Ready: protection is in effect.
pub fn ready(view: &WindowView) -> bool {
    view.ready && !view.closed
}

/// Released: the controller has ended the window and removed its protection.
pub fn released(view: &WindowView) -> bool {
    view.is_finished()
}
