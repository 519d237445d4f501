//! The GitHub Action in `examples/github-action` run with node exactly as the Actions runner
//! runs it (inputs as `INPUT_*`, state and outputs through files), against a real operator:
//! `main` opens a window that becomes Ready, `post` closes it.

mod support;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use kube::api::PostParams;
use support::fixtures::deployment;
use support::operator::Operator;
use support::{repo_root, wait, with_namespace};

fn node_step(script: &str, env: &[(&str, String)]) -> std::process::Output {
    let mut cmd = Command::new("node");
    cmd.arg(repo_root().join("examples/github-action").join(script));
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("node (Node.js) runs the action")
}

#[tokio::test]
async fn the_action_opens_a_ready_window_in_main_and_closes_it_in_post() {
    with_namespace(|client, ns| async move {
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        deployments
            .create(&PostParams::default(), &deployment("api").build())
            .await
            .unwrap();
        let op = Operator::start(&ns, &[]).await;
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("gha-{ns}"));
        std::fs::create_dir_all(&dir).unwrap();
        let (state, output) = (dir.join("state"), dir.join("output"));
        std::fs::write(&state, "").unwrap();
        std::fs::write(&output, "").unwrap();
        let inputs = vec![
            ("INPUT_SERVER", op.api.clone()),
            ("INPUT_TOKEN", "unused-without-auth".to_string()),
            ("INPUT_NAMESPACE", ns.clone()),
            ("INPUT_SELECTOR", "app=api".to_string()),
            ("INPUT_TTL", "10m".to_string()),
            ("INPUT_WAIT-TIMEOUT", "60s".to_string()),
            ("GITHUB_STATE", state.display().to_string()),
            ("GITHUB_OUTPUT", output.display().to_string()),
            ("GITHUB_RUN_ID", "4242".to_string()),
            ("GITHUB_RUN_ATTEMPT", "1".to_string()),
            ("GITHUB_JOB", "e2e".to_string()),
            ("GITHUB_REPOSITORY", "org/shop".to_string()),
        ];
        let main = node_step("main.js", &inputs);
        let stdout = String::from_utf8_lossy(&main.stdout);
        assert!(
            main.status.success() && !stdout.contains("::error::"),
            "main step: {stdout}"
        );
        assert!(
            stdout.starts_with("::add-mask::unused-without-auth\n"),
            "the token is masked before anything else is printed: {stdout}"
        );
        let outputs = std::fs::read_to_string(&output).unwrap();
        let name = outputs
            .lines()
            .find_map(|l| l.strip_prefix("window="))
            .expect("window= in GITHUB_OUTPUT")
            .to_string();
        let tw = support::kubectl()
            .args([
                "get",
                "tw",
                &name,
                "-n",
                &ns,
                "-o",
                "jsonpath={.status.phase} {.status.conditions[?(@.type==\"Ready\")].status}",
            ])
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&tw.stdout),
            "Active True",
            "the window is open and Ready"
        );

        let mut post_env = inputs.clone();
        for line in std::fs::read_to_string(&state).unwrap().lines() {
            let (k, v) = line.split_once('=').unwrap();
            post_env.push((
                if k == "window" {
                    "STATE_window"
                } else {
                    "STATE_namespace"
                },
                v.to_string(),
            ));
        }
        let post = node_step("post.js", &post_env);
        let stdout = String::from_utf8_lossy(&post.stdout);
        assert!(
            post.status.success() && stdout.contains("closed"),
            "post step: {stdout}"
        );
        wait::until(
            "the window to be Closed",
            Duration::from_secs(10),
            || async {
                let out = support::kubectl()
                    .args([
                        "get",
                        "tw",
                        &name,
                        "-n",
                        &ns,
                        "-o",
                        "jsonpath={.status.phase}",
                    ])
                    .output()
                    .unwrap();
                String::from_utf8_lossy(&out.stdout) == "Closed"
            },
        )
        .await;
    })
    .await;
}

#[test]
fn the_actions_retry_and_fail_open_helpers_pass_their_node_unit_tests() {
    let out = Command::new("node")
        .arg("--test")
        .arg(repo_root().join("examples/github-action/lib.test.js"))
        .output()
        .expect("node (Node.js) runs the action's unit tests");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// With the guard unreachable past `retry-for`, `main` fails the job, unless `fail-open` is
/// set: then it retries, warns and lets the job go on, and `post` has nothing to close.
#[test]
fn the_action_retries_an_unreachable_guard_then_fails_or_with_fail_open_goes_on_unprotected() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("gha-fail-open");
    std::fs::create_dir_all(&dir).unwrap();
    let (state, output) = (dir.join("state"), dir.join("output"));
    let step = |fail_open: &str| {
        std::fs::write(&state, "").unwrap();
        std::fs::write(&output, "").unwrap();
        let started = std::time::Instant::now();
        let out = node_step(
            "main.js",
            &[
                ("INPUT_SERVER", "http://127.0.0.1:9".to_string()),
                ("INPUT_TOKEN", "t".to_string()),
                ("INPUT_NAMESPACE", "shop".to_string()),
                ("INPUT_RETRY-FOR", "2s".to_string()),
                ("INPUT_FAIL-OPEN", fail_open.to_string()),
                ("GITHUB_STATE", state.display().to_string()),
                ("GITHUB_OUTPUT", output.display().to_string()),
            ],
        );
        (out, started.elapsed())
    };

    let (out, took) = step("false");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{stdout}");
    assert!(stdout.contains("::error::"), "{stdout}");
    assert!(stdout.contains("retrying in"), "it retried: {stdout}");
    assert!(
        took >= Duration::from_millis(1500),
        "within retry-for: {took:?}"
    );

    let (out, _) = step("true");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("::warning title=disruption-guard: running unprotected::"),
        "{stdout}"
    );
    assert_eq!(
        std::fs::read_to_string(&output).unwrap(),
        "protected=false\n"
    );
    assert_eq!(
        std::fs::read_to_string(&state).unwrap(),
        "",
        "nothing for post to close"
    );
}
