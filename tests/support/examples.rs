//! Helpers for `tests/examples.rs`, which runs the CI examples under `examples/` against a real
//! operator: an operator with API authentication on (a static token), a scratch work directory
//! with a `make e2e` that records the windows it ran inside, and the substitutions a CI system
//! would make (GitHub `${{ … }}` expressions, GitLab `$VARIABLES`, Kubernetes downward API and
//! volumes of a Job's container).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use super::operator::{Operator, binary};

/// The static token the operator of [`operator_with_static_token`] accepts for the test
/// namespace.
pub const STATIC_TOKEN: &str = "example-ci-token-0123456789";

/// An operator for `ns` with authentication on: [`STATIC_TOKEN`] for `ns`, and Kubernetes
/// tokens with the `disruption-guard` audience (TokenReview + SubjectAccessReview).
pub async fn operator_with_static_token(ns: &str) -> Operator {
    let file = scratch(ns, "static-tokens.yaml");
    std::fs::write(
        &file,
        format!(
            "tokens:\n  - name: example-ci\n    token: {STATIC_TOKEN:?}\n    namespaces: [{ns}]\n"
        ),
    )
    .unwrap();
    Operator::start_with(
        ns,
        vec![
            format!("--namespaces={ns}"),
            format!("--static-tokens-file={}", file.display()),
        ],
    )
    .await
}

/// A fresh scratch path for this test namespace.
pub fn scratch(ns: &str, what: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("examples-{ns}-{what}"))
}

/// `PATH` with the `disruption-guard` binary under test and the cluster's kubectl first.
pub fn path_with_tools() -> OsString {
    let mut dirs = vec![binary().parent().unwrap().to_path_buf()];
    let kubectl = super::kubernetes_bin("kubectl");
    if kubectl.exists() {
        dirs.push(kubectl.parent().unwrap().to_path_buf());
    }
    dirs.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    std::env::join_paths(dirs).unwrap()
}

/// The environment every example process starts from: nothing of the test's own environment
/// but `PATH` (with the tools), `HOME` and the cluster's `KUBECONFIG` (for `make e2e`).
pub fn base_env(ns: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("PATH".into(), path_with_tools().to_string_lossy().into()),
        (
            "HOME".into(),
            std::env::var("HOME").unwrap_or_else(|_| "/tmp".into()),
        ),
        (
            "KUBECONFIG".into(),
            super::kubeconfig().display().to_string(),
        ),
        ("E2E_NAMESPACE".into(), ns.to_string()),
    ])
}

/// A work directory whose `make e2e` appends `<window> <phase> <Ready status>` of every window
/// in `$E2E_NAMESPACE` to `seen.txt`, then fails when `$E2E_FAIL` is 1: the stand-in for a
/// project's end-to-end tests.
pub fn workdir(ns: &str, what: &str) -> PathBuf {
    let dir = scratch(ns, what);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("Makefile"),
        "e2e:\n\
         \tkubectl get tw -n \"$$E2E_NAMESPACE\" -o jsonpath='{range .items[*]}{.metadata.name} {.status.phase} {.status.conditions[?(@.type==\"Ready\")].status}{\"\\n\"}{end}' >> seen.txt\n\
         \t@if [ \"$$E2E_FAIL\" = 1 ]; then echo 'e2e: 1 test failed'; exit 1; fi\n\
         \t@echo 'e2e: all tests passed'\n",
    )
    .unwrap();
    dir
}

/// What `make e2e` saw of window `name`: `"<phase> <ready>"`, if it ran at all.
pub fn seen_by_tests(dir: &Path, name: &str) -> Option<String> {
    let seen = std::fs::read_to_string(dir.join("seen.txt")).ok()?;
    seen.lines().find_map(|l| {
        l.strip_prefix(name)
            .and_then(|rest| rest.strip_prefix(' '))
            .map(str::to_string)
    })
}

/// Runs `program args` with exactly `env`, in `dir`.
pub fn run_with_env(
    program: &str,
    args: &[&str],
    env: &BTreeMap<String, String>,
    dir: &Path,
) -> Output {
    Command::new(program)
        .args(args)
        .env_clear()
        .envs(env)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("starting {program}: {e}"))
}

/// Output of a finished process as text, for assertion messages.
pub fn text(out: &Output) -> String {
    format!(
        "exit {}\n--- stdout ---\n{}--- stderr ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Replaces every `${{ expr }}` in `text` with `values[expr]`; panics on an expression the
/// test did not provide (so a new expression in an example fails the test until it is handled).
pub fn github_expressions(text: &str, values: &BTreeMap<&str, String>) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${{") {
        out.push_str(&rest[..start]);
        let end = rest[start..]
            .find("}}")
            .unwrap_or_else(|| panic!("unterminated expression in {text:?}"))
            + start;
        let expr = rest[start + 3..end].trim();
        let value = values.get(expr).unwrap_or_else(|| {
            panic!("the test has no value for the expression ${{{{ {expr} }}}}")
        });
        out.push_str(value);
        rest = &rest[end + 2..];
    }
    out.push_str(rest);
    out
}

/// Expands `$NAME` and `${NAME}` from `env`, as GitLab expands the values of `variables:`
/// (unknown names become empty).
pub fn gitlab_expand(text: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '$' {
            out.push(c);
            continue;
        }
        let braced = chars.peek() == Some(&'{');
        if braced {
            chars.next();
        }
        let mut name = String::new();
        while let Some(&n) = chars.peek() {
            if n.is_ascii_alphanumeric() || n == '_' {
                name.push(n);
                chars.next();
            } else {
                break;
            }
        }
        if braced {
            assert_eq!(chars.next(), Some('}'), "unterminated ${{ in {text:?}");
        }
        if name.is_empty() {
            out.push('$');
        } else {
            out.push_str(env.get(&name).map(String::as_str).unwrap_or(""));
        }
    }
    out
}

/// The documents of a multi-document YAML file, as JSON values.
pub fn yaml_documents(path: &Path) -> Vec<Value> {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_saphyr::from_str_multiple::<Value, Vec<Value>>(&text)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .into_iter()
        .filter(|v| !v.is_null())
        .collect()
}
