//! The client binary run as a user runs it: aimed at an operator's API, its output read, a
//! failure shown with everything it printed.

use std::process::{Command, Output};

use super::operator::{Operator, binary};

/// The client binary aimed at `op`'s API in namespace `ns`, with nothing else from the test's
/// environment but `PATH`.
pub fn client(op: &Operator, ns: &str) -> Command {
    let mut cmd = Command::new(binary());
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("DISRUPTION_GUARD_SERVER", &op.api)
        .env("DISRUPTION_GUARD_NAMESPACE", ns);
    cmd
}

/// Runs `cmd` and asserts it succeeded, showing what it printed when it did not.
pub fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed with {}:\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// What `out` printed on stdout.
pub fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).unwrap()
}
