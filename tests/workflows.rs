//! The GitHub Actions files, linted before GitHub meets them: every workflow under
//! `.github/workflows/` and every workflow example under `examples/` passes actionlint (with
//! shellcheck on its `run:` scripts), and those workflows and the actions (`action.yml` at the
//! root and under `examples/`) pass zizmor's offline audits. Each linter is also fed a
//! known-bad workflow and must report it, so a linter that silently checks nothing fails here.
//! The release workflow's own rules: actions pinned by commit with the release in a comment,
//! no permission but per job.
//!
//! The linters are pinned and installed into the component cache on first use by the scripts
//! in `tests/workflows/` (actionlint from its Go module, zizmor and shellcheck from PyPI).

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use support::repo_root;

/// Runs one of the install scripts in `tests/workflows/` and returns the path it prints.
/// Once per test binary, so that two tests never install the same tool at once.
fn tool(script: &'static str, once: &'static OnceLock<PathBuf>) -> &'static Path {
    once.get_or_init(|| {
        let out = Command::new(repo_root().join("tests/workflows").join(script))
            .output()
            .unwrap_or_else(|e| panic!("running tests/workflows/{script}: {e}"));
        assert!(
            out.status.success(),
            "installing {script} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    })
}

fn actionlint(files: &[PathBuf]) -> Output {
    static ACTIONLINT: OnceLock<PathBuf> = OnceLock::new();
    static SHELLCHECK: OnceLock<PathBuf> = OnceLock::new();
    let shellcheck = tool("shellcheck", &SHELLCHECK);
    Command::new(tool("actionlint", &ACTIONLINT))
        .arg("-no-color")
        .arg(format!("-shellcheck={}", shellcheck.display()))
        // No Python in the workflows; and no pyflakes from whatever PATH holds.
        .arg("-pyflakes=")
        .args(files)
        .current_dir(repo_root())
        .output()
        .expect("running actionlint")
}

fn zizmor(files: &[PathBuf]) -> Output {
    static ZIZMOR: OnceLock<PathBuf> = OnceLock::new();
    Command::new(tool("zizmor", &ZIZMOR))
        .args(["--offline", "--no-progress", "--color", "never"])
        .args(files)
        .env_remove("GH_TOKEN")
        .env_remove("GITHUB_TOKEN")
        .current_dir(repo_root())
        .output()
        .expect("running zizmor")
}

fn report(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .flat_map(|p| if p.is_dir() { yaml_files(&p) } else { vec![p] })
        .filter(|p| p.extension().is_some_and(|e| e == "yml" || e == "yaml"))
        .collect();
    files.sort();
    files
}

/// The repository's workflows and its workflow examples (a YAML file with top-level `on:` and
/// `jobs:`; the other YAML under `examples/` is Kubernetes manifests and GitLab CI).
fn workflows() -> Vec<PathBuf> {
    let root = repo_root();
    let mut files = yaml_files(&root.join(".github/workflows"));
    files.extend(yaml_files(&root.join("examples")).into_iter().filter(|p| {
        let text = std::fs::read_to_string(p).unwrap();
        text.lines().any(|l| l.starts_with("on:")) && text.lines().any(|l| l == "jobs:")
    }));
    files
}

/// The repository's actions: `action.yml` at the root and under `examples/`.
fn actions() -> Vec<PathBuf> {
    let root = repo_root();
    let mut files = vec![root.join("action.yml")];
    files.extend(
        yaml_files(&root.join("examples"))
            .into_iter()
            .filter(|p| p.file_name().is_some_and(|n| n == "action.yml")),
    );
    files
}

fn known_bad(name: &str, text: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("workflows-known-bad");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// A pull_request_target workflow that checks out with credentials left behind, uses an action
/// by branch, expands a pull request's title inside a script, leaves a variable unquoted and
/// needs a job that does not exist.
const BAD_WORKFLOW: &str = r#"name: bad
on: pull_request_target
jobs:
  greet:
    runs-on: ubuntu-latest
    needs: missing
    steps:
      - uses: actions/checkout@v4
      - uses: someone/some-action@main
      - run: echo "${{ github.event.pull_request.title }}" $GITHUB_REF
"#;

/// A composite action that expands an issue's title inside a script.
const BAD_ACTION: &str = r#"name: bad
description: expands untrusted text in a script
runs:
  using: composite
  steps:
    - run: echo "${{ github.event.issue.title }}"
      shell: bash
"#;

#[test]
fn there_is_a_release_workflow_and_a_workflow_example_to_lint() {
    let names: Vec<String> = workflows()
        .iter()
        .map(|p| p.strip_prefix(repo_root()).unwrap().display().to_string())
        .collect();
    for expected in [
        ".github/workflows/release.yml",
        "examples/github-actions-curl/e2e.yml",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} in {names:?}"
        );
    }
    assert_eq!(actions().len(), 2, "{:?}", actions());
}

#[test]
fn every_workflow_passes_actionlint_with_shellcheck_on_its_scripts() {
    let out = actionlint(&workflows());
    assert!(out.status.success(), "actionlint:\n{}", report(&out));
}

#[test]
fn every_workflow_and_action_passes_zizmors_offline_audits() {
    let mut files = workflows();
    files.extend(actions());
    let out = zizmor(&files);
    assert!(out.status.success(), "zizmor:\n{}", report(&out));
}

#[test]
fn actionlint_reports_a_missing_job_an_injected_title_and_an_unquoted_variable() {
    let out = actionlint(&[known_bad("bad-workflow.yml", BAD_WORKFLOW)]);
    let text = report(&out);
    assert!(!out.status.success(), "actionlint must reject it:\n{text}");
    for finding in ["[job-needs]", "potentially untrusted", "SC2086"] {
        assert!(text.contains(finding), "{finding} reported:\n{text}");
    }
}

#[test]
fn zizmor_reports_a_dangerous_trigger_an_unpinned_action_and_template_injection() {
    let out = zizmor(&[known_bad("bad-workflow.yml", BAD_WORKFLOW)]);
    let text = report(&out);
    assert!(!out.status.success(), "zizmor must reject it:\n{text}");
    for audit in [
        "dangerous-triggers",
        "unpinned-uses",
        "template-injection",
        "artipacked",
    ] {
        assert!(
            text.contains(&format!("[{audit}]")),
            "{audit} reported:\n{text}"
        );
    }
}

#[test]
fn zizmor_reports_template_injection_in_a_composite_action() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("workflows-known-bad/action");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("action.yml"), BAD_ACTION).unwrap();
    let out = zizmor(&[dir.join("action.yml")]);
    let text = report(&out);
    assert!(!out.status.success(), "zizmor must reject it:\n{text}");
    assert!(text.contains("[template-injection]"), "{text}");
}

/// Every `uses:` of another repository's action in the workflows and actions.
fn remote_uses() -> Vec<(PathBuf, String)> {
    let mut files = workflows();
    files.extend(actions());
    files
        .into_iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(&f).unwrap();
            text.lines()
                .filter_map(|l| {
                    let l = l.trim_start().trim_start_matches("- ");
                    l.strip_prefix("uses:").map(|u| u.trim().to_string())
                })
                .filter(|u| !u.starts_with("./") && !u.starts_with("docker://"))
                .map(|u| (f.clone(), u))
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn every_action_used_is_pinned_by_commit_with_its_release_in_a_comment() {
    let uses = remote_uses();
    assert!(
        uses.len() >= 7,
        "the release workflow uses actions: {uses:?}"
    );
    for (file, used) in uses {
        let (action, rest) = used.split_once('@').unwrap_or((&used, ""));
        let (sha, comment) = rest.split_once(" # ").unwrap_or((rest, ""));
        assert!(
            sha.len() == 40 && sha.bytes().all(|b| b.is_ascii_hexdigit()),
            "{}: {action} is pinned by a full commit SHA, not {sha:?}",
            file.display()
        );
        let release = comment.trim();
        assert!(
            release.starts_with('v') && release[1..].split('.').count() == 3,
            "{}: {action}@{sha} names its release (# vX.Y.Z), not {comment:?}",
            file.display()
        );
    }
}

#[test]
fn the_release_workflow_grants_no_permission_but_per_job_and_runs_on_version_tags() {
    let text = std::fs::read_to_string(repo_root().join(".github/workflows/release.yml")).unwrap();
    let workflow: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
    assert_eq!(
        workflow["permissions"],
        serde_json::json!({}),
        "no permission for the whole workflow"
    );
    assert_eq!(
        workflow["on"]["push"]["tags"],
        serde_json::json!(["v*.*.*"]),
        "published from a pushed version tag"
    );
    let jobs = workflow["jobs"].as_object().unwrap();
    for (name, job) in jobs {
        let permissions = job["permissions"]
            .as_object()
            .unwrap_or_else(|| panic!("job {name} declares its permissions"));
        for (scope, level) in permissions {
            assert!(
                level == "read" || level == "write" || level == "none",
                "{name}: {scope}: {level}"
            );
        }
        let writes: Vec<&str> = permissions
            .iter()
            .filter(|(_, l)| *l == "write")
            .map(|(s, _)| s.as_str())
            .collect();
        let allowed: &[&str] = match name.as_str() {
            "image" | "chart" => &["packages"],
            "release" | "action-tag" => &["contents"],
            _ => &[],
        };
        assert_eq!(writes, allowed, "job {name} writes only what it publishes");
    }
    for step in jobs.values().flat_map(|j| j["steps"].as_array().unwrap()) {
        if step["uses"]
            .as_str()
            .is_some_and(|u| u.starts_with("actions/checkout@"))
        {
            assert_eq!(step["with"]["persist-credentials"], false, "{step}");
        }
    }
}
