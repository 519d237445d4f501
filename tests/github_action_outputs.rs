//! The GitHub Action's outputs and its answers that must not read as success, against a real
//! operator: run with node as the Actions runner runs it, its outputs and state go through the
//! runner's files with the multi-line delimiter protocol, `report` carrying the window's report
//! as JSON; run by `@github/local-action`, a window over no pod is a `::warning::`, and
//! `require-pods` fails the step and closes that window again.

mod support;

use std::path::{Path, PathBuf};

use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use kube::api::PostParams;
use serde_json::Value;
use support::action::{local_action_run, node_step};
use support::fixtures::deployment;
use support::operator::Operator;
use support::window_fields::{field, ready};
use support::{kubectl, runner_files, with_namespace};

/// A scratch directory for one test's files.
fn scratch(what: &str, ns: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{what}-{ns}"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// An empty file at `path`, as the runner gives each step.
fn empty(path: &Path) -> String {
    std::fs::write(path, "").unwrap();
    path.display().to_string()
}

/// The `report` output of a file-command file, parsed.
fn report(output: &Path) -> Value {
    let text = runner_files::value(output, "report").expect("a report output");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("report is JSON ({e}): {text}"))
}

/// Every entry of the file at `path` is written `name<<DELIMITER`, its random delimiter in
/// neither name nor value.
fn assert_delimited(path: &Path) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let (_, delimiter) = line
            .split_once("<<")
            .unwrap_or_else(|| panic!("{line:?} is not a delimited entry: {text}"));
        assert!(
            delimiter.starts_with("ghadelimiter_") && delimiter.len() > 30,
            "{line}"
        );
        let value: Vec<&str> = lines.by_ref().take_while(|l| *l != delimiter).collect();
        assert!(!value.is_empty(), "{text}");
    }
}

#[tokio::test]
async fn outputs_and_state_use_the_runners_delimiters_and_report_carries_the_report_as_json() {
    with_namespace(|client, ns| async move {
        Api::<Deployment>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &deployment("api").build())
            .await
            .unwrap();
        support::pods::ready_pod(&client, &ns, "api").await;
        let op = Operator::start(&ns, &[]).await;
        let dir = scratch("gha-outputs", &ns);
        let (state, output, post_output) = (
            dir.join("state"),
            dir.join("output"),
            dir.join("post-output"),
        );
        let summary = dir.join("summary");
        let mut env = vec![
            ("INPUT_SERVER", op.api.clone()),
            ("INPUT_TOKEN", "unused-without-auth".to_string()),
            ("INPUT_NAMESPACE", ns.clone()),
            ("INPUT_SELECTOR", "app=api".to_string()),
            ("INPUT_TTL", "10m".to_string()),
            ("INPUT_REQUIRE-PODS", "true".to_string()),
            ("GITHUB_STATE", empty(&state)),
            ("GITHUB_OUTPUT", empty(&output)),
            ("GITHUB_RUN_ID", "4646".to_string()),
        ];
        let main = node_step("main.js", &env);
        let stdout = String::from_utf8_lossy(&main.stdout);
        assert!(main.status.success(), "main: {stdout}");
        assert!(!stdout.contains("::warning"), "pods are selected: {stdout}");
        assert_delimited(&output);
        assert_delimited(&state);
        let name = runner_files::value(&output, "window").unwrap();
        assert_eq!(
            runner_files::value(&output, "protected").as_deref(),
            Some("true")
        );
        let at_open = report(&output);
        assert_eq!(at_open["peakProtected"]["pods"], 1, "{at_open}");
        assert_eq!(at_open["clean"], true, "{at_open}");
        assert_eq!(field(&ns, &name, "{.status.phase}"), "Active");

        // post, a step of its own: its own output file; main's state through STATE_*.
        env.retain(|(k, _)| *k != "GITHUB_OUTPUT");
        env.push(("GITHUB_OUTPUT", empty(&post_output)));
        env.push(("GITHUB_STEP_SUMMARY", empty(&summary)));
        let saved: Vec<(String, String)> = runner_files::read(&state)
            .into_iter()
            .map(|(k, v)| (format!("STATE_{k}"), v))
            .collect();
        env.extend(saved.iter().map(|(k, v)| (k.as_str(), v.clone())));
        let post = node_step("post.js", &env);
        let stdout = String::from_utf8_lossy(&post.stdout);
        assert!(
            post.status.success() && stdout.contains("closed"),
            "post: {stdout}"
        );
        assert_delimited(&post_output);
        let closed = report(&post_output);
        assert_eq!(closed["peakProtected"]["workloads"], 1, "{closed}");
        assert_eq!(closed["peakProtected"]["pods"], 1, "{closed}");
        let summary = std::fs::read_to_string(&summary).unwrap();
        assert!(
            summary.contains(
                "| Protected | 1 pod on 1 node, 1 workload under a PodDisruptionBudget |"
            ),
            "what the window protected, from its report after the release: {summary}"
        );
    })
    .await;
}

/// Runs main alone with local-action and `vars`; its log (stdout and stderr).
fn local_main(dir: &Path, vars: &[(&str, String)]) -> (bool, String) {
    let dotenv = dir.join("dotenv");
    let text: String = vars.iter().map(|(k, v)| format!("{k}=\"{v}\"\n")).collect();
    std::fs::write(&dotenv, text).unwrap();
    let out = local_action_run(&dotenv, false);
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), log)
}

#[tokio::test]
async fn local_action_warns_of_a_window_over_no_pod_and_require_pods_fails_the_step_and_closes_it()
{
    with_namespace(|_client, ns| async move {
        let op = Operator::start(&ns, &[]).await;
        let dir = scratch("gha-no-pods", &ns);
        let vars = |key: &str, require: &str| {
            vec![
                ("INPUT_SERVER", op.api.clone()),
                ("INPUT_TOKEN", "unused-without-auth".to_string()),
                ("INPUT_NAMESPACE", ns.clone()),
                ("INPUT_SELECTOR", "tier=backnd".to_string()),
                ("INPUT_TTL", "10m".to_string()),
                ("INPUT_KEY", format!("{key}-{ns}")),
                ("INPUT_REQUIRE-PODS", require.to_string()),
            ]
        };
        let (ok, log) = local_main(&dir, &vars("kept", "false"));
        assert!(
            ok && !log.contains("::error::"),
            "local-action, main: {log}"
        );
        let name = log
            .lines()
            .find_map(|l| l.strip_prefix("::set-output name=window::"))
            .unwrap_or_else(|| panic!("the window output: {log}"))
            .to_string();
        let warning = format!(
            "::warning title=disruption-guard: no pod selected::window {name} selects no pod in \
             {ns}: check the selector tier=backnd; nothing is protected"
        );
        assert!(log.contains(&warning), "{warning} in {log}");
        let report = log
            .lines()
            .find_map(|l| l.strip_prefix("::set-output name=report::"))
            .unwrap_or_else(|| panic!("the report output: {log}"));
        let report: Value = serde_json::from_str(report).unwrap();
        assert_eq!(report["peakProtected"]["pods"], 0, "{report}");
        assert_eq!(ready(&ns, &name), "True NoPodsSelected");

        let (_, log) = local_main(&dir, &vars("required", "true"));
        assert!(
            log.contains("::error::disruption-guard: ")
                && log.contains("422 requirePods: window ")
                && log.contains("it was closed"),
            "local-action, main with require-pods: {log}"
        );
        assert!(!log.contains("::set-output name=protected::true"), "{log}");
        let windows = kubectl()
            .args(["get", "tw", "-n", &ns, "-o"])
            .arg("jsonpath={range .items[*]}{.metadata.name} {.spec.closed}{\"\\n\"}{end}")
            .output()
            .unwrap();
        let windows = String::from_utf8_lossy(&windows.stdout).into_owned();
        let closed: Vec<&str> = windows.lines().filter(|l| l.ends_with(" true")).collect();
        assert_eq!(
            closed.len(),
            1,
            "the refused window is closed again: {windows}"
        );
        assert!(
            windows.lines().any(|l| l.trim() == name),
            "the kept window stays open: {windows}"
        );
    })
    .await;
}
