//! `disruption-guard completion`: the built binary prints scripts the shells accept.

use std::io::Write;
use std::process::{Command, Stdio};

fn completion(shell: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_disruption-guard"))
        .args(["completion", shell])
        .env_remove("DISRUPTION_GUARD_SERVER")
        .output()
        .expect("run disruption-guard");
    assert!(
        out.status.success(),
        "completion {shell} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("the script is UTF-8")
}

/// Runs `shell -n` (parse only) over `script`.
fn syntax_check(shell: &str, script: &str) -> std::process::Output {
    let mut child = Command::new(shell)
        .arg("-n")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {shell}: {e}"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn installed(shell: &str) -> bool {
    Command::new(shell)
        .args(["-c", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn bash_accepts_the_script() {
    let script = completion("bash");
    assert!(script.contains("disruption-guard"), "{script}");
    assert!(
        script.contains("complete -F") && script.contains(" disruption-guard\n"),
        "no completion registered for disruption-guard:\n{script}"
    );
    let check = syntax_check("bash", &script);
    assert!(
        check.status.success(),
        "bash -n refused the script: {}",
        String::from_utf8_lossy(&check.stderr)
    );
}

#[test]
fn bash_completes_subcommands_and_flags() {
    // Load the script and ask its function what `disruption-guard ru<TAB>` and
    // `disruption-guard run --se<TAB>` complete to, as bash's completion machinery would.
    let script = completion("bash");
    let probe = r#"
source /dev/stdin
spec=$(complete -p disruption-guard) || exit 1
fn=${spec#*-F }; fn=${fn%% *}
COMP_WORDS=(disruption-guard ru); COMP_CWORD=1; COMP_LINE="disruption-guard ru"; COMP_POINT=${#COMP_LINE}
"$fn" disruption-guard ru disruption-guard
echo "sub: ${COMPREPLY[*]}"
COMP_WORDS=(disruption-guard run --se); COMP_CWORD=2; COMP_LINE="disruption-guard run --se"; COMP_POINT=${#COMP_LINE}
"$fn" disruption-guard --se run
echo "flag: ${COMPREPLY[*]}"
"#;
    let mut child = Command::new("bash")
        .args(["-c", probe])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start bash");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines()
            .any(|l| l.starts_with("sub:") && l.contains("run")),
        "no `run` for `ru`: {text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("flag:") && l.contains("--selector") && l.contains("--server")),
        "no --selector/--server for `run --se`: {text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn zsh_and_fish_accept_their_scripts_when_installed() {
    for shell in ["zsh", "fish"] {
        let script = completion(shell);
        assert!(script.contains("disruption-guard"), "{shell}: {script}");
        if !installed(shell) {
            eprintln!("{shell} is not installed: only generation checked");
            continue;
        }
        let check = syntax_check(shell, &script);
        assert!(
            check.status.success(),
            "{shell} -n refused the script: {}",
            String::from_utf8_lossy(&check.stderr)
        );
    }
}

#[test]
fn an_unknown_shell_is_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_disruption-guard"))
        .args(["completion", "tcsh"])
        .output()
        .expect("run disruption-guard");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("bash") && stderr.contains("fish"),
        "{stderr}"
    );
}
