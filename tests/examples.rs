//! The CI examples under `examples/`, run against a real operator (authentication on) and the
//! real cluster, the way their CI system would run them:
//! - `examples/argocd`: the manifests are applied server-side; each hook Job's container command
//!   runs locally with its environment resolved (downward API from the applied Job), its
//!   ConfigMap and projected token volumes materialised (a real TokenRequest token with the
//!   Job's audience) and the server URL pointed at the local operator;
//! - `examples/github-actions-curl`: the workflow's `run:` steps run with bash, `${{ … }}`
//!   expressions substituted, later steps skipped after a failure unless `if: always()`;
//! - `examples/gitlab-ci`: the job's `script` lines run with `sh -c` in order, then
//!   `after_script`, with `disruption-guard` on PATH;
//! - `examples/shell/ci.sh`.
//!
//! The tests they wrap are a `make e2e` that records the windows it ran inside.

mod support;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::Value;
use support::examples::{
    STATIC_TOKEN, base_env, github_expressions, gitlab_expand, operator_with_static_token,
    run_with_env, scratch, seen_by_tests, text, workdir, yaml_documents,
};
use support::fixtures::deployment;
use support::{repo_root, service_account_token, wait, with_namespace};

fn example(path: &str) -> PathBuf {
    repo_root().join("examples").join(path)
}

/// A Deployment `api` whose pod carries `tier=backend`, the selection every example protects.
async fn backend(client: &Client, ns: &str) {
    Api::<Deployment>::namespaced(client.clone(), ns)
        .create(
            &PostParams::default(),
            &deployment("api").label("tier", "backend").build(),
        )
        .await
        .unwrap();
}

/// The TestWindow `name` as JSON, if it exists.
fn testwindow(ns: &str, name: &str) -> Option<Value> {
    let out = support::kubectl()
        .args(["get", "tw", name, "-n", ns, "-o", "json"])
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).unwrap())
}

fn phase(tw: &Value) -> &str {
    tw["status"]["phase"].as_str().unwrap_or("")
}

/// Waits until window `name` has ended Closed with a report, and returns it.
async fn until_closed(ns: &str, name: &str) -> Value {
    let tw = wait::for_some(
        &format!("window {name} to be Closed"),
        Duration::from_secs(20),
        || async { testwindow(ns, name).filter(|tw| phase(tw) == "Closed") },
    )
    .await;
    assert_eq!(tw["spec"]["closed"], true, "{tw}");
    assert!(tw["status"]["report"].is_object(), "no report: {tw}");
    assert!(tw["status"]["endedAt"].is_string(), "no end time: {tw}");
    tw
}

/// Names of the windows in `ns` starting with `prefix`.
fn windows_named(ns: &str, prefix: &str) -> Vec<String> {
    let out = support::kubectl()
        .args(["get", "tw", "-n", ns, "-o", "name"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.rsplit('/').next())
        .filter(|n| n.starts_with(prefix))
        .map(str::to_string)
        .collect()
}

// --- ArgoCD ---------------------------------------------------------------------------------

/// The manifests `examples/argocd/kustomization.yaml` lists, moved into `ns`.
fn argocd_manifests(ns: &str) -> Vec<Value> {
    let kustomization = &yaml_documents(&example("argocd/kustomization.yaml"))[0];
    let mut docs = vec![];
    for file in kustomization["resources"].as_array().unwrap() {
        for mut doc in yaml_documents(&example("argocd").join(file.as_str().unwrap())) {
            doc["metadata"]["namespace"] = ns.into();
            if let Some(subjects) = doc.get_mut("subjects").and_then(Value::as_array_mut) {
                for s in subjects {
                    s["namespace"] = ns.into();
                }
            }
            docs.push(doc);
        }
    }
    docs
}

/// Applies the ArgoCD example server-side, as ArgoCD's server-side sync would.
fn apply_argocd(ns: &str, only_kind_name: Option<(&str, &str)>) {
    let docs: Vec<Value> = argocd_manifests(ns)
        .into_iter()
        .filter(|d| {
            only_kind_name.is_none_or(|(kind, name)| {
                d["kind"] == kind && d["metadata"]["name"].as_str() == Some(name)
            })
        })
        .collect();
    assert!(!docs.is_empty());
    let mut apply = support::kubectl()
        .args([
            "apply",
            "--server-side",
            "--field-manager=argocd-controller",
            "-f",
            "-",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let yaml: String = docs
        .iter()
        .map(|d| format!("---\n{}", serde_saphyr::to_string(d).unwrap()))
        .collect();
    apply
        .stdin
        .take()
        .unwrap()
        .write_all(yaml.as_bytes())
        .unwrap();
    let out = apply.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "applying the ArgoCD example: {}",
        text(&out)
    );
}

fn annotation<'a>(job: &'a Job, key: &str) -> Option<&'a str> {
    job.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

/// The container command of Job `name` as the kubelet would start it, on this machine: env
/// resolved (values, the downward API from the applied Job's pod template), ConfigMap and
/// projected ServiceAccount token volumes written to local directories that replace their
/// mount paths, and `DISRUPTION_GUARD_SERVER` pointed at `server`.
async fn job_process(
    client: &Client,
    ns: &str,
    name: &str,
    server: &str,
) -> (Vec<String>, BTreeMap<String, String>) {
    let job = Api::<Job>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .unwrap();
    let uid = job.metadata.uid.clone().unwrap();
    let template = job.spec.unwrap().template;
    let labels = template
        .metadata
        .unwrap_or_default()
        .labels
        .unwrap_or_default();
    let pod = template.spec.unwrap();
    let container = &pod.containers[0];

    let root = scratch(ns, &format!("job-{uid}"));
    let mut mounts: Vec<(String, PathBuf)> = vec![];
    for mount in container.volume_mounts.iter().flatten() {
        let volume = pod
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == mount.name)
            .unwrap_or_else(|| panic!("{name}: no volume {}", mount.name));
        let dir = root.join(&mount.name);
        std::fs::create_dir_all(&dir).unwrap();
        if let Some(cm) = &volume.config_map {
            let cm = Api::<ConfigMap>::namespaced(client.clone(), ns)
                .get(&cm.name)
                .await
                .unwrap_or_else(|e| panic!("{name}: ConfigMap {}: {e}", cm.name));
            for (key, value) in cm.data.unwrap_or_default() {
                std::fs::write(dir.join(key), value).unwrap();
            }
        } else if let Some(projected) = &volume.projected {
            for source in projected.sources.iter().flatten() {
                let sat = source
                    .service_account_token
                    .as_ref()
                    .unwrap_or_else(|| panic!("{name}: unsupported projected source"));
                let audience = sat.audience.as_deref().expect("a token audience");
                let sa = pod.service_account_name.as_deref().unwrap_or("default");
                std::fs::write(dir.join(&sat.path), service_account_token(ns, sa, audience))
                    .unwrap();
            }
        } else {
            panic!("{name}: unsupported volume {}", mount.name);
        }
        mounts.push((mount.mount_path.clone(), dir));
    }
    mounts.sort_by_key(|(path, _)| std::cmp::Reverse(path.len()));
    let local = |s: &str| -> String {
        for (path, dir) in &mounts {
            if let Some(rest) = s.strip_prefix(path.as_str()) {
                return format!("{}{rest}", dir.display());
            }
        }
        s.to_string()
    };

    let mut env = base_env(ns);
    for var in container.env.iter().flatten() {
        let value = if var.name == "DISRUPTION_GUARD_SERVER" {
            server.to_string()
        } else if let Some(value) = &var.value {
            local(value)
        } else {
            let field = &var
                .value_from
                .as_ref()
                .and_then(|f| f.field_ref.as_ref())
                .unwrap_or_else(|| panic!("{name}: unsupported env source of {}", var.name))
                .field_path;
            if field == "metadata.namespace" {
                ns.to_string()
            } else if let Some(key) = field
                .strip_prefix("metadata.labels['")
                .and_then(|k| k.strip_suffix("']"))
            {
                labels
                    .get(key)
                    .unwrap_or_else(|| panic!("{name}: the pod has no label {key}"))
                    .clone()
            } else {
                panic!("{name}: unsupported fieldRef {field}")
            }
        };
        env.insert(var.name.clone(), value);
    }
    let argv = container
        .command
        .iter()
        .flatten()
        .chain(container.args.iter().flatten())
        .map(|a| local(a))
        .collect();
    (argv, env)
}

/// Runs Job `name`'s container command (see [`job_process`]) and returns its output.
async fn run_job(client: &Client, ns: &str, name: &str, server: &str) -> Output {
    let (argv, env) = job_process(client, ns, name, server).await;
    let args: Vec<&str> = argv[1..].iter().map(String::as_str).collect();
    run_with_env(&argv[0], &args, &env, Path::new("/"))
}

async fn job_uid(client: &Client, ns: &str, name: &str) -> String {
    Api::<Job>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap()
}

#[tokio::test]
async fn argocd_hook_jobs_open_a_ready_window_before_the_rollout_and_the_closing_hooks_close_it() {
    with_namespace(|client, ns| async move {
        let op = operator_with_static_token(&ns).await;
        apply_argocd(&ns, None);

        // The hooks run in the intended order.
        let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
        let hook = |job: &Job| {
            (
                annotation(job, "argocd.argoproj.io/hook")
                    .unwrap_or("")
                    .to_string(),
                annotation(job, "argocd.argoproj.io/sync-wave")
                    .map(|w| w.parse::<i32>().unwrap())
                    .unwrap_or(0),
            )
        };
        let open = hook(&jobs.get("shop-e2e-window-open").await.unwrap());
        let tests = hook(&jobs.get("shop-e2e-tests").await.unwrap());
        let close = hook(&jobs.get("shop-e2e-window-close").await.unwrap());
        let on_fail = hook(&jobs.get("shop-e2e-window-close-on-fail").await.unwrap());
        assert_eq!(
            [&open.0, &tests.0, &close.0, &on_fail.0],
            ["PreSync", "PostSync", "PostSync", "SyncFail"]
        );
        assert!(tests.1 < close.1, "waves {tests:?} {close:?}");
        // What the open Job needs exists before it: PreSync hooks of an earlier wave.
        for doc in argocd_manifests(&ns).iter().filter(|d| d["kind"] != "Job") {
            let annotations = &doc["metadata"]["annotations"];
            assert_eq!(annotations["argocd.argoproj.io/hook"], "PreSync", "{doc}");
            let wave: i32 = annotations["argocd.argoproj.io/sync-wave"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap();
            assert!(wave < open.1, "{doc}");
        }

        // A sync whose tests pass: PreSync open, before the application exists …
        let uid = job_uid(&client, &ns, "shop-e2e-window-open").await;
        let name = format!("shop-e2e-{uid}");
        let out = run_job(&client, &ns, "shop-e2e-window-open", &op.api).await;
        assert!(out.status.success(), "open Job: {}", text(&out));
        let tw = testwindow(&ns, &name).expect("the open Job's window exists");
        assert_eq!(phase(&tw), "Active", "{tw}");
        let ready = tw["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        assert!(
            ready,
            "the open Job returned before protection was in effect: {tw}"
        );
        assert_eq!(tw["status"]["protected"]["workloads"], 0, "{tw}");
        assert_eq!(tw["spec"]["ci"]["provider"], "argocd");

        // … then the sync's rollout: its new pod is protected by the open window, PDB and
        // do-not-disrupt, without another call.
        backend(&client, &ns).await;
        wait::until(
            "the rollout's new pod to be protected",
            Duration::from_secs(30),
            || async {
                let pods = support::kubectl()
                    .args(["get", "pods", "-n", &ns, "-l", "tier=backend", "-o", "json"])
                    .output()
                    .unwrap();
                let pods: Value = serde_json::from_slice(&pods.stdout).unwrap();
                let annotated = pods["items"].as_array().is_some_and(|items| {
                    !items.is_empty()
                        && items.iter().all(|p| {
                            p["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] == "true"
                        })
                });
                let tw = testwindow(&ns, &name).unwrap();
                annotated && tw["status"]["protected"]["workloads"] == 1
            },
        )
        .await;
        let pdbs = support::kubectl()
            .args(["get", "pdb", "-n", &ns, "-o", "name"])
            .output()
            .unwrap();
        assert!(!pdbs.stdout.is_empty(), "no PDB over the new pod");

        // The tests (PostSync) run here, protected.
        assert_eq!(tw["spec"]["ci"]["runId"], uid.as_str());

        // A retried pod of the same Job finds the same window.
        let out = run_job(&client, &ns, "shop-e2e-window-open", &op.api).await;
        assert!(out.status.success(), "retried open Job: {}", text(&out));
        assert_eq!(windows_named(&ns, "shop-e2e-"), vec![name.clone()]);

        let out = run_job(&client, &ns, "shop-e2e-window-close", &op.api).await;
        assert!(out.status.success(), "close Job: {}", text(&out));
        assert!(
            String::from_utf8_lossy(&out.stdout).contains(&format!("closing window {ns}/{name}")),
            "{}",
            text(&out)
        );
        until_closed(&ns, &name).await;

        // A sync that fails: ArgoCD recreates the open Job (BeforeHookCreation, a new uid), the
        // tests fail, and the SyncFail hook must close the window that is open.
        support::kubectl()
            .args([
                "delete",
                "job",
                "shop-e2e-window-open",
                "-n",
                &ns,
                "--wait=true",
            ])
            .output()
            .unwrap();
        apply_argocd(&ns, Some(("Job", "shop-e2e-window-open")));
        let uid2 = job_uid(&client, &ns, "shop-e2e-window-open").await;
        assert_ne!(uid, uid2, "the recreated Job has a new uid");
        let second = format!("shop-e2e-{uid2}");
        let out = run_job(&client, &ns, "shop-e2e-window-open", &op.api).await;
        assert!(out.status.success(), "open Job: {}", text(&out));
        let tw = testwindow(&ns, &second).expect("the second window exists");
        assert_eq!(phase(&tw), "Active", "{tw}");
        assert_ne!(tw["spec"]["closed"], true, "{tw}");

        let out = run_job(&client, &ns, "shop-e2e-window-close-on-fail", &op.api).await;
        assert!(out.status.success(), "SyncFail Job: {}", text(&out));
        until_closed(&ns, &second).await;
        wait::until(
            "the window's PDB to be gone",
            Duration::from_secs(20),
            || async {
                let out = support::kubectl()
                    .args(["get", "pdb", "-n", &ns, "-o", "name"])
                    .output()
                    .unwrap();
                out.stdout.is_empty()
            },
        )
        .await;
    })
    .await;
}

#[tokio::test]
async fn argocd_hook_jobs_are_refused_without_the_roles_verbs() {
    with_namespace(|client, ns| async move {
        let op = operator_with_static_token(&ns).await;
        apply_argocd(&ns, None);
        // Without its RoleBinding the Job's token authenticates but may not open a window:
        // the Role in the example is what lets it.
        let out = support::kubectl()
            .args(["delete", "rolebinding", "shop-e2e-window", "-n", &ns])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
        let out = run_job(&client, &ns, "shop-e2e-window-open", &op.api).await;
        assert!(!out.status.success(), "open without RBAC: {}", text(&out));
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("403"),
            "{}",
            text(&out)
        );
        assert!(windows_named(&ns, "shop-e2e-").is_empty());
    })
    .await;
}

// --- GitHub Actions (curl) ------------------------------------------------------------------

/// Runs the `e2e` job of the curl workflow: `run:` steps with bash as the runner does, later
/// steps skipped after a failure unless `if: always()`. Returns each step's name and output.
fn run_workflow(
    ns: &str,
    server: &str,
    run_id: &str,
    dir: &Path,
    fail_tests: bool,
) -> Vec<(String, Output)> {
    let workflow = &yaml_documents(&example("github-actions-curl/e2e.yml"))[0];
    let job = &workflow["jobs"]["e2e"];
    let expressions = BTreeMap::from([
        ("vars.DISRUPTION_GUARD_SERVER", server.to_string()),
        ("secrets.DISRUPTION_GUARD_TOKEN", STATIC_TOKEN.to_string()),
        ("github.run_id", run_id.to_string()),
        ("github.run_attempt", "1".to_string()),
        ("strategy.job-index", "0".to_string()),
    ]);
    let mut env = base_env(ns);
    env.extend(BTreeMap::from([
        ("CI".to_string(), "true".to_string()),
        ("GITHUB_ACTIONS".into(), "true".into()),
        ("GITHUB_REPOSITORY".into(), "org/shop".into()),
        ("GITHUB_RUN_ID".into(), run_id.into()),
        ("GITHUB_RUN_ATTEMPT".into(), "1".into()),
        ("GITHUB_JOB".into(), "e2e".into()),
        ("GITHUB_SERVER_URL".into(), "https://github.com".into()),
        (
            "GITHUB_OUTPUT".into(),
            dir.join("github-output").display().to_string(),
        ),
        ("E2E_FAIL".into(), if fail_tests { "1" } else { "0" }.into()),
    ]));
    for (k, v) in job["env"].as_object().unwrap() {
        env.insert(
            k.clone(),
            github_expressions(v.as_str().unwrap(), &expressions),
        );
    }
    assert!(
        env.insert("NAMESPACE".into(), ns.into()).is_some(),
        "the workflow names its namespace in NAMESPACE"
    );

    let mut failed = false;
    let mut results = vec![];
    for step in job["steps"].as_array().unwrap() {
        let Some(script) = step["run"].as_str() else {
            assert!(step["uses"].is_string(), "a step runs or uses something");
            continue;
        };
        match step["if"].as_str() {
            None if failed => continue,
            None => {}
            Some("always()") => {}
            Some(other) => panic!("the test does not evaluate `if: {other}`"),
        }
        let script = github_expressions(script, &expressions);
        let out = run_with_env(
            "bash",
            &["--noprofile", "--norc", "-eo", "pipefail", "-c", &script],
            &env,
            dir,
        );
        failed |= !out.status.success();
        results.push((step["name"].as_str().unwrap_or("").to_string(), out));
    }
    results
}

#[tokio::test]
async fn the_curl_workflow_runs_the_tests_in_a_ready_window_and_closes_it_even_when_they_fail() {
    with_namespace(|client, ns| async move {
        backend(&client, &ns).await;
        let op = operator_with_static_token(&ns).await;
        for (run_id, fail) in [("7001", false), ("7002", true)] {
            let dir = workdir(&ns, &format!("gha-{run_id}"));
            let window = format!("gh-{run_id}-1-e2e-0");
            let steps = run_workflow(&ns, &op.api, run_id, &dir, fail);
            let names: Vec<&str> = steps.iter().map(|(n, _)| n.as_str()).collect();
            assert_eq!(
                names,
                [
                    "Open a test window",
                    "Run the end-to-end tests",
                    "Close the test window"
                ],
                "every step runs, the close also after failed tests"
            );
            let (open, tests, close) = (&steps[0].1, &steps[1].1, &steps[2].1);
            assert!(open.status.success(), "open step: {}", text(open));
            assert_eq!(tests.status.success(), !fail, "tests step: {}", text(tests));
            assert!(close.status.success(), "close step: {}", text(close));
            assert_eq!(
                seen_by_tests(&dir, &window).as_deref(),
                Some("Active True"),
                "the tests ran inside the Ready window"
            );
            let report: Value = serde_json::from_slice(&close.stdout)
                .unwrap_or_else(|e| panic!("close step prints JSON ({e}): {}", text(close)));
            assert_eq!(report["name"], window.as_str());
            assert_eq!(report["report"]["clean"], true, "{report}");
            let tw = until_closed(&ns, &window).await;
            assert_eq!(tw["spec"]["ci"]["provider"], "github");
            assert_eq!(tw["spec"]["ci"]["runId"], run_id);
        }
    })
    .await;
}

#[tokio::test]
async fn the_curl_workflow_close_step_tolerates_a_window_that_was_never_opened() {
    with_namespace(|_client, ns| async move {
        // The open step fails (a token the operator refuses); the close step must still
        // succeed and say so, and no window exists.
        let op = operator_with_static_token(&ns).await;
        let dir = workdir(&ns, "gha-refused");
        let workflow = &yaml_documents(&example("github-actions-curl/e2e.yml"))[0];
        let close = workflow["jobs"]["e2e"]["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["if"] == "always()")
            .expect("a close step with if: always()");
        let mut env = base_env(&ns);
        env.extend(BTreeMap::from([
            ("DISRUPTION_GUARD_SERVER".to_string(), op.api.clone()),
            ("DISRUPTION_GUARD_TOKEN".into(), STATIC_TOKEN.into()),
            ("NAMESPACE".into(), ns.clone()),
            ("WINDOW".into(), "gh-1-1-e2e-0".into()),
        ]));
        let out = run_with_env(
            "bash",
            &["-eo", "pipefail", "-c", close["run"].as_str().unwrap()],
            &env,
            &dir,
        );
        assert!(out.status.success(), "{}", text(&out));
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("was never opened"),
            "{}",
            text(&out)
        );
        env.insert(
            "DISRUPTION_GUARD_TOKEN".into(),
            "not-a-valid-token-at-all".into(),
        );
        let out = run_with_env(
            "bash",
            &["-eo", "pipefail", "-c", close["run"].as_str().unwrap()],
            &env,
            &dir,
        );
        assert!(!out.status.success(), "a refused close must fail the step");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("::error::"),
            "{}",
            text(&out)
        );
    })
    .await;
}

// --- GitLab CI ------------------------------------------------------------------------------

/// Runs the `e2e` job of the GitLab example: `before_script` and `script` lines with `sh -c`
/// in order until one fails, then `after_script`. Returns whether the job passed and every
/// line's output.
fn run_gitlab_job(
    ns: &str,
    server: &str,
    job_id: &str,
    dir: &Path,
    fail_tests: bool,
) -> (bool, Vec<Output>, Vec<Output>) {
    let pipeline = &yaml_documents(&example("gitlab-ci/.gitlab-ci.yml"))[0];
    let job = &pipeline["e2e"];
    let mut env = base_env(ns);
    // Predefined variables, then the project's CI/CD variables, then the job's.
    env.extend(BTreeMap::from([
        ("CI".to_string(), "true".to_string()),
        ("GITLAB_CI".into(), "true".into()),
        ("CI_PROJECT_PATH".into(), "org/shop".into()),
        ("CI_PIPELINE_ID".into(), "901".into()),
        (
            "CI_PIPELINE_URL".into(),
            "https://gitlab.example.com/org/shop/-/pipelines/901".into(),
        ),
        ("CI_JOB_ID".into(), job_id.into()),
        ("CI_COMMIT_SHORT_SHA".into(), "1a2b3c4d".into()),
        ("DISRUPTION_GUARD_SERVER".into(), server.into()),
        // The guard's audience, a CI/CD variable of the project as the example says.
        (
            "DISRUPTION_GUARD_OIDC_AUDIENCE".into(),
            support::authn::AUDIENCE.into(),
        ),
        ("E2E_FAIL".into(), if fail_tests { "1" } else { "0" }.into()),
    ]));
    // GitLab mints each `id_tokens:` entry for its `aud` into the variable it names: here the
    // real test issuer does, for the job's identity `<ns>/gitlab-job` there.
    let issuer = support::authn::trust_shared_issuer();
    for (var, spec) in job["id_tokens"].as_object().expect("the job's id_tokens") {
        let aud = spec["aud"].as_str().expect("id_tokens aud");
        assert_eq!(
            aud, "$DISRUPTION_GUARD_OIDC_AUDIENCE",
            "the example asks for the install's own audience, not the shared default"
        );
        let aud = gitlab_expand(aud, &env);
        let token = issuer.token(ns, GITLAB_JOB_IDENTITY, &aud, Duration::from_secs(600));
        env.insert(var.clone(), token);
    }
    for (k, v) in job["variables"].as_object().unwrap() {
        let value = gitlab_expand(v.as_str().unwrap(), &env);
        env.insert(k.clone(), value);
    }
    assert!(
        env.insert("DISRUPTION_GUARD_NAMESPACE".into(), ns.into())
            .is_some(),
        "the job names its namespace in DISRUPTION_GUARD_NAMESPACE"
    );
    let lines = |key: &str| -> Vec<String> {
        job[key]
            .as_array()
            .map(|a| a.iter().map(|l| l.as_str().unwrap().to_string()).collect())
            .unwrap_or_default()
    };
    let mut passed = true;
    let mut script = vec![];
    for line in lines("before_script").iter().chain(&lines("script")) {
        let out = run_with_env("sh", &["-c", line], &env, dir);
        passed = out.status.success();
        script.push(out);
        if !passed {
            break;
        }
    }
    let after = lines("after_script")
        .iter()
        .map(|line| run_with_env("sh", &["-c", line], &env, dir))
        .collect();
    (passed, script, after)
}

/// The job's identity at the test issuer (a ServiceAccount there), which the cluster's JWT
/// authenticator maps to a user RBAC lets open windows.
const GITLAB_JOB_IDENTITY: &str = "gitlab-job";

#[tokio::test]
async fn the_gitlab_job_runs_make_e2e_inside_a_window_and_closes_it() {
    support::authn::trust_shared_issuer();
    with_namespace(|client, ns| async move {
        backend(&client, &ns).await;
        let user = support::authn::user_for(&ns, GITLAB_JOB_IDENTITY);
        support::authn::grant_windows(&client, &ns, &user).await;
        let op = operator_with_static_token(&ns).await;
        for (job_id, fail) in [("5501", false), ("5502", true)] {
            let dir = workdir(&ns, &format!("gitlab-{job_id}"));
            let window = format!("gl-901-{job_id}");
            let (passed, script, after) = run_gitlab_job(&ns, &op.api, job_id, &dir, fail);
            let run = script.last().unwrap();
            assert_eq!(passed, !fail, "script: {}", text(run));
            if fail {
                assert_eq!(
                    run.status.code(),
                    Some(2),
                    "make's exit code: {}",
                    text(run)
                );
            }
            assert_eq!(
                seen_by_tests(&dir, &window).as_deref(),
                Some("Active True"),
                "make e2e ran inside the Ready window: {}",
                text(run)
            );
            let stdout = String::from_utf8_lossy(&run.stdout);
            assert!(
                stdout.contains(&format!("window {ns}/{window}: Closed")),
                "run prints the report: {}",
                text(run)
            );
            assert_eq!(after.len(), 1);
            assert!(
                after[0].status.success(),
                "after_script: {}",
                text(&after[0])
            );
            let tw = until_closed(&ns, &window).await;
            assert_eq!(tw["spec"]["ci"]["provider"], "gitlab", "{tw}");
            assert_eq!(tw["spec"]["ci"]["repository"], "org/shop");
            assert_eq!(tw["spec"]["ci"]["runId"], "901");
        }
    })
    .await;
}

#[tokio::test]
async fn the_gitlab_after_script_closes_a_window_the_script_left_open() {
    with_namespace(|client, ns| async move {
        backend(&client, &ns).await;
        let op = operator_with_static_token(&ns).await;
        // The script was killed after `run` opened the window (SIGKILL gives it no chance to
        // close): open it as `run` would, then run only after_script.
        let window = "gl-901-5503";
        let dir = workdir(&ns, "gitlab-killed");
        let mut env = base_env(&ns);
        env.extend(BTreeMap::from([
            ("DISRUPTION_GUARD_SERVER".to_string(), op.api.clone()),
            ("DISRUPTION_GUARD_TOKEN".into(), STATIC_TOKEN.into()),
            ("DISRUPTION_GUARD_NAMESPACE".into(), ns.clone()),
        ]));
        let out = run_with_env(
            "disruption-guard",
            &[
                "open",
                "--name",
                window,
                "-l",
                "tier=backend",
                "--ttl",
                "10m",
            ],
            &env,
            &dir,
        );
        assert!(out.status.success(), "{}", text(&out));
        assert_eq!(phase(&testwindow(&ns, window).unwrap()), "Active");

        let pipeline = &yaml_documents(&example("gitlab-ci/.gitlab-ci.yml"))[0];
        let job = &pipeline["e2e"];
        env.extend(BTreeMap::from([
            ("CI_PIPELINE_ID".to_string(), "901".to_string()),
            ("CI_JOB_ID".into(), "5503".into()),
        ]));
        let expanded = gitlab_expand(job["variables"]["WINDOW"].as_str().unwrap(), &env);
        env.insert("WINDOW".into(), expanded);
        for line in job["after_script"].as_array().unwrap() {
            let out = run_with_env("sh", &["-c", line.as_str().unwrap()], &env, &dir);
            assert!(out.status.success(), "{}", text(&out));
        }
        until_closed(&ns, window).await;
    })
    .await;
}

// --- Shell ----------------------------------------------------------------------------------

/// The window `disruption-guard run` reported opening on stderr.
fn opened_window(out: &Output, ns: &str) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    stderr
        .lines()
        .find_map(|l| l.strip_prefix(&format!("opened window {ns}/")))
        .unwrap_or_else(|| panic!("no `opened window` line: {}", text(out)))
        .trim()
        .to_string()
}

#[tokio::test]
async fn the_shell_script_runs_the_command_in_a_window_and_exits_with_its_code() {
    with_namespace(|client, ns| async move {
        backend(&client, &ns).await;
        let op = operator_with_static_token(&ns).await;
        let script = example("shell/ci.sh").display().to_string();
        for fail in [false, true] {
            let dir = workdir(&ns, &format!("shell-{fail}"));
            let mut env = base_env(&ns);
            env.extend(BTreeMap::from([
                ("DISRUPTION_GUARD_SERVER".to_string(), op.api.clone()),
                ("DISRUPTION_GUARD_TOKEN".into(), STATIC_TOKEN.into()),
                ("DISRUPTION_GUARD_NAMESPACE".into(), ns.clone()),
                ("SELECTOR".into(), "tier=backend".into()),
                ("TTL".into(), "10m".into()),
                ("E2E_FAIL".into(), if fail { "1" } else { "0" }.into()),
            ]));
            // No arguments: the script runs `make e2e`.
            let out = run_with_env(&script, &[], &env, &dir);
            assert_eq!(
                out.status.code(),
                Some(if fail { 2 } else { 0 }),
                "the script exits with make's code: {}",
                text(&out)
            );
            let window = opened_window(&out, &ns);
            assert_eq!(
                seen_by_tests(&dir, &window).as_deref(),
                Some("Active True"),
                "{}",
                text(&out)
            );
            assert!(
                String::from_utf8_lossy(&out.stdout)
                    .contains(&format!("window {ns}/{window}: Closed")),
                "{}",
                text(&out)
            );
            let tw = until_closed(&ns, &window).await;
            assert_eq!(tw["spec"]["reason"], "make e2e");
            assert_eq!(
                tw["spec"]["selector"]["matchLabels"]["tier"], "backend",
                "{tw}"
            );
        }

        // Misconfigured: no server, nothing opened.
        let dir = workdir(&ns, "shell-unconfigured");
        let out = run_with_env(&script, &["true"], &base_env(&ns), &dir);
        assert!(!out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("DISRUPTION_GUARD_SERVER"),
            "{}",
            text(&out)
        );
    })
    .await;
}
