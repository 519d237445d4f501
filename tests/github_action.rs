//! The GitHub Action in `examples/github-action` run with node exactly as the Actions runner
//! runs it (inputs as `INPUT_*`, state, outputs and the step summary through files), against a
//! real operator: `main` opens a window that becomes Ready, `post` closes it; the legs of a
//! matrix job each open and close their own window. The same action run by GitHub's
//! `@github/local-action` (pinned, installed into the component cache on first use by
//! `tests/tools/npm-tool`), whose stub of `@actions/core` carries outputs, state and the summary.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use kube::api::PostParams;
use support::action::{local_action_run, node_step};
use support::fixtures::deployment;
use support::operator::Operator;
use support::window_fields::field as window_field;
use support::{repo_root, runner_files, wait, with_namespace};

/// Runs `post` as the runner does: with the step's environment `env`, and `STATE_<name>` for
/// every entry `main` appended to `GITHUB_STATE` (the file `state`).
fn post_step(env: &[(&str, String)], state: &Path) -> std::process::Output {
    let saved: Vec<(String, String)> = runner_files::read(state)
        .into_iter()
        .map(|(k, v)| (format!("STATE_{k}"), v))
        .collect();
    let mut post_env = env.to_vec();
    post_env.extend(saved.iter().map(|(k, v)| (k.as_str(), v.clone())));
    node_step("post.js", &post_env)
}

/// The phase of the window `name` in `ns`, as kubectl shows it.
fn phase(ns: &str, name: &str) -> String {
    window_field(ns, name, "{.status.phase}")
}

/// The phase and the Ready condition's status of the window, e.g. `Active True`.
fn phase_and_ready(ns: &str, name: &str) -> String {
    window_field(
        ns,
        name,
        "{.status.phase} {.status.conditions[?(@.type==\"Ready\")].status}",
    )
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
        let name = runner_files::value(&output, "window").expect("window in GITHUB_OUTPUT");
        assert_eq!(
            phase_and_ready(&ns, &name),
            "Active True",
            "the window is open and Ready"
        );

        let summary = dir.join("summary");
        std::fs::write(&summary, "").unwrap();
        let mut post_env = inputs.clone();
        post_env.push(("GITHUB_STEP_SUMMARY", summary.display().to_string()));
        let post = post_step(&post_env, &state);
        let stdout = String::from_utf8_lossy(&post.stdout);
        assert!(
            post.status.success() && stdout.contains("closed"),
            "post step: {stdout}"
        );
        let summary = std::fs::read_to_string(&summary).unwrap();
        for row in [
            "### disruption-guard: ".to_string(),
            format!("| Window | {name} |"),
            format!("| Namespace | {ns} |"),
            "| Pods selected | app=api |".to_string(),
            "| Protected | ".to_string(),
        ] {
            assert!(
                summary.contains(&row),
                "{row:?} in the step summary: {summary}"
            );
        }
        assert!(
            !summary.contains("fail-open"),
            "protection was in effect: {summary}"
        );
        wait::until(
            "the window to be Closed",
            Duration::from_secs(10),
            || async { phase(&ns, &name) == "Closed" },
        )
        .await;
    })
    .await;
}

/// A job with `permissions: id-token: write` and no `token` input: `main` and `post` each ask
/// the runner (a stand-in handing out the real test issuer's tokens) for an id-token for the
/// `audience` input, mask it, and the operator, with its ordinary authentication, accepts it
/// through the API server's JWT authenticator for the issuer (structured authentication), for
/// the user RBAC grants windows to.
#[tokio::test]
async fn without_a_token_the_action_uses_the_jobs_id_token_from_the_runner_in_main_and_post() {
    let issuer = support::authn::trust_shared_issuer();
    with_namespace(|client, ns| async move {
        let runner = support::runner_token::RunnerTokenEndpoint::start(issuer, &ns, "pipeline");
        support::authn::grant_windows(&client, &ns, &support::authn::user_for(&ns, "pipeline"))
            .await;
        let op = Operator::start_with(&ns, vec![format!("--namespaces={ns}")]).await;
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("gha-oidc-{ns}"));
        std::fs::create_dir_all(&dir).unwrap();
        let (state, output) = (dir.join("state"), dir.join("output"));
        std::fs::write(&state, "").unwrap();
        std::fs::write(&output, "").unwrap();
        let mut inputs = vec![
            ("INPUT_SERVER", op.api.clone()),
            ("INPUT_NAMESPACE", ns.clone()),
            ("INPUT_AUDIENCE", support::authn::AUDIENCE.to_string()),
            ("INPUT_TTL", "10m".to_string()),
            ("INPUT_WAIT-TIMEOUT", "60s".to_string()),
            ("GITHUB_STATE", state.display().to_string()),
            ("GITHUB_OUTPUT", output.display().to_string()),
            ("GITHUB_RUN_ID", "4545".to_string()),
            ("GITHUB_JOB", "e2e".to_string()),
        ];
        inputs.extend(runner.env());
        // RBAC reaches the API server's authorizer a moment after the binding is created.
        let main = wait::for_some("main to open the window", Duration::from_secs(30), || {
            let inputs = inputs.clone();
            std::fs::write(&output, "").unwrap();
            async move {
                let main = node_step("main.js", &inputs);
                let stdout = String::from_utf8_lossy(&main.stdout).into_owned();
                (main.status.success() && !stdout.contains("::error::")).then_some(stdout)
            }
        })
        .await;
        let minted = main
            .lines()
            .find_map(|l| l.strip_prefix("::add-mask::"))
            .expect("the id-token is masked");
        assert_eq!(minted.split('.').count(), 3, "a JWT is masked: {main}");
        assert!(
            main.starts_with("::add-mask::"),
            "masked before anything else is printed: {main}"
        );
        assert!(
            main.contains("::warning title=disruption-guard: no pod selected::"),
            "the namespace has no pod: {main}"
        );
        let name = runner_files::value(&output, "window").expect("window in GITHUB_OUTPUT");
        assert_eq!(phase_and_ready(&ns, &name), "Active True");

        let asked_by_main = runner.audiences().len();
        let post = post_step(&inputs, &state);
        let stdout = String::from_utf8_lossy(&post.stdout);
        assert!(
            post.status.success() && stdout.contains("closed") && !stdout.contains("::warning::"),
            "post step: {stdout}"
        );
        assert!(
            stdout.contains("::add-mask::"),
            "post masks its own id-token: {stdout}"
        );
        assert_eq!(
            runner.audiences().len(),
            asked_by_main + 1,
            "post asks the runner for a fresh id-token"
        );
        assert!(
            runner
                .audiences()
                .iter()
                .all(|a| a == support::authn::AUDIENCE),
            "{:?}",
            runner.audiences()
        );
        wait::until(
            "the window to be Closed",
            Duration::from_secs(10),
            || async { phase(&ns, &name) == "Closed" },
        )
        .await;
    })
    .await;
}

/// The legs of a matrix job share run id, attempt and job id. Each leg's `main` opens its own
/// window, and one leg's `post` closes its own window and leaves the other leg's open.
#[tokio::test]
async fn each_leg_of_a_matrix_job_opens_its_own_window_and_its_post_closes_only_that_one() {
    with_namespace(|client, ns| async move {
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        deployments
            .create(&PostParams::default(), &deployment("api").build())
            .await
            .unwrap();
        let op = Operator::start(&ns, &[]).await;
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("gha-matrix-{ns}"));
        std::fs::create_dir_all(&dir).unwrap();
        let inputs = vec![
            ("INPUT_SERVER", op.api.clone()),
            ("INPUT_TOKEN", "unused-without-auth".to_string()),
            ("INPUT_NAMESPACE", ns.clone()),
            ("INPUT_SELECTOR", "app=api".to_string()),
            ("INPUT_TTL", "10m".to_string()),
            ("INPUT_WAIT-TIMEOUT", "60s".to_string()),
            ("GITHUB_RUN_ID", "4343".to_string()),
            ("GITHUB_RUN_ATTEMPT", "1".to_string()),
            ("GITHUB_JOB", "e2e".to_string()),
            ("GITHUB_REPOSITORY", "org/shop".to_string()),
        ];
        // Each leg runs on its own runner: its own state and output files.
        let mut legs = vec![];
        for leg in ["0", "1"] {
            let state = dir.join(format!("state-{leg}"));
            let output = dir.join(format!("output-{leg}"));
            std::fs::write(&state, "").unwrap();
            std::fs::write(&output, "").unwrap();
            let mut env = inputs.clone();
            env.push(("GITHUB_STATE", state.display().to_string()));
            env.push(("GITHUB_OUTPUT", output.display().to_string()));
            let main = node_step("main.js", &env);
            let stdout = String::from_utf8_lossy(&main.stdout);
            assert!(
                main.status.success() && !stdout.contains("::error::"),
                "leg {leg}, main step: {stdout}"
            );
            let name = runner_files::value(&output, "window").expect("window in GITHUB_OUTPUT");
            legs.push((name, env, state));
        }
        let (first, second) = (legs[0].0.clone(), legs[1].0.clone());
        assert_ne!(first, second, "each leg opened its own window");
        assert_eq!(phase(&ns, &first), "Active", "window {first}");
        assert_eq!(phase(&ns, &second), "Active", "window {second}");

        let post = post_step(&legs[0].1, &legs[0].2);
        let stdout = String::from_utf8_lossy(&post.stdout);
        assert!(
            post.status.success() && stdout.contains(&format!("{first} closed")),
            "leg 0, post step: {stdout}"
        );
        wait::until(
            "the first leg's window to be Closed",
            Duration::from_secs(10),
            || async { phase(&ns, &first) == "Closed" },
        )
        .await;
        assert_eq!(
            phase(&ns, &second),
            "Active",
            "the other leg's window stays open while its tests run"
        );

        let post = post_step(&legs[1].1, &legs[1].2);
        let stdout = String::from_utf8_lossy(&post.stdout);
        assert!(
            post.status.success() && stdout.contains(&format!("{second} closed")),
            "leg 1, post step: {stdout}"
        );
        wait::until(
            "the second leg's window to be Closed",
            Duration::from_secs(10),
            || async { phase(&ns, &second) == "Closed" },
        )
        .await;
    })
    .await;
}

/// `@github/local-action` runs `main` against the operator: the window it opens is Active and
/// Ready in the cluster, and local-action lists the outputs `main` set through its stub of
/// `@actions/core`. Then `main` and `post` in one run, as local-action runs an action with a post
/// step: `main` opens with the same key and finds the same window, and `post`, given `main`'s
/// state in memory by the stub, closes it and writes the summary. (local-action runs `post` right
/// after `main`, with no step between them, hence the first run of `main` alone to see the window
/// in effect.)
#[tokio::test]
async fn local_action_runs_main_and_post_against_the_operator() {
    with_namespace(|client, ns| async move {
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        deployments
            .create(&PostParams::default(), &deployment("api").build())
            .await
            .unwrap();
        let op = Operator::start(&ns, &[]).await;
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("gha-local-{ns}"));
        std::fs::create_dir_all(&dir).unwrap();
        let summary = dir.join("summary");
        let token = "unused-without-auth";
        let dotenv = dir.join("dotenv");
        let vars = [
            ("INPUT_SERVER", op.api.clone()),
            ("INPUT_TOKEN", token.to_string()),
            ("INPUT_NAMESPACE", ns.clone()),
            ("INPUT_SELECTOR", "app=api".to_string()),
            ("INPUT_TTL", "10m".to_string()),
            ("INPUT_WAIT-TIMEOUT", "60s".to_string()),
            ("INPUT_KEY", format!("local-action-{ns}")),
            ("GITHUB_STEP_SUMMARY", summary.display().to_string()),
            ("GITHUB_WORKFLOW", "e2e".to_string()),
            ("GITHUB_RUN_NUMBER", "7".to_string()),
            ("GITHUB_RUN_ID", "4444".to_string()),
            ("GITHUB_REPOSITORY", "org/shop".to_string()),
        ];
        let text: String = vars.iter().map(|(k, v)| format!("{k}=\"{v}\"\n")).collect();
        std::fs::write(&dotenv, text).unwrap();

        let main = local_action_run(&dotenv, false);
        let log = format!(
            "{}{}",
            String::from_utf8_lossy(&main.stdout),
            String::from_utf8_lossy(&main.stderr)
        );
        assert!(
            main.status.success() && !log.contains("::error::") && !log.contains("::warning::"),
            "local-action, main: {log}"
        );
        assert!(
            !log.contains(token),
            "the token is a secret of the stub, never printed: {log}"
        );
        assert!(!log.contains("Running Post Step"), "{log}");
        let name = log
            .lines()
            .find_map(|l| l.strip_prefix("::set-output name=window::"))
            .unwrap_or_else(|| panic!("main set the window output through the stub: {log}"))
            .to_string();
        let outputs = log
            .split("Action Outputs")
            .nth(1)
            .unwrap_or_else(|| panic!("local-action lists the outputs: {log}"));
        for (output, value) in [("window", name.as_str()), ("protected", "true")] {
            assert!(
                outputs.lines().any(
                    |l| l.contains(&format!("'{output}'")) && l.contains(&format!("'{value}'"))
                ),
                "output {output} = {value} in local-action's table: {outputs}"
            );
        }
        assert_eq!(
            phase_and_ready(&ns, &name),
            "Active True",
            "the window local-action's main opened is open and Ready"
        );

        let run = local_action_run(&dotenv, true);
        let log = format!(
            "{}{}",
            String::from_utf8_lossy(&run.stdout),
            String::from_utf8_lossy(&run.stderr)
        );
        assert!(
            run.status.success() && !log.contains("::error::") && !log.contains("::warning::"),
            "local-action, main and post: {log}"
        );
        assert!(
            log.contains(&format!("::set-output name=window::{name}\n")),
            "the same key opened the same window: {log}"
        );
        let post = log
            .split("Running Post Step")
            .nth(1)
            .unwrap_or_else(|| panic!("local-action ran post: {log}"));
        assert!(
            post.contains(&format!("disruption-guard: window {ns}/{name} closed")),
            "post closed the window main named in its state: {post}"
        );
        let summary = std::fs::read_to_string(&summary).unwrap();
        for row in [
            "### disruption-guard: ".to_string(),
            format!("| Window | {name} |"),
            format!("| Namespace | {ns} |"),
            "| Pods selected | app=api |".to_string(),
            "| Reason | e2e #7 |".to_string(),
        ] {
            assert!(
                summary.contains(&row),
                "{row:?} in the step summary: {summary}"
            );
        }
        let protected = summary
            .lines()
            .find(|l| l.starts_with("| Protected | "))
            .unwrap_or_else(|| panic!("a Protected row: {summary}"));
        assert!(
            protected.ends_with(" under a PodDisruptionBudget |"),
            "post read what main saw protected from the stub's state: {protected}"
        );
        wait::until(
            "the window to be Closed",
            Duration::from_secs(10),
            || async { phase(&ns, &name) == "Closed" },
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
        runner_files::read(&output),
        [("protected".to_string(), "false".to_string())]
    );
    assert_eq!(
        std::fs::read_to_string(&state).unwrap(),
        "",
        "nothing for post to close"
    );
}
