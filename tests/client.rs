//! The CI client (`disruption-guard open|get|list|renew|close|run`), as a real process, against
//! a real operator and the real cluster.
//!
//! Tests whose name says "once the controller" need the window controller (Ready, release of
//! PDBs and annotations); the others pass `--no-wait` and need only the API.

mod support;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use disruption_guard::resources::TestWindow;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use serde_json::Value;
use support::cli::{client, run_ok, stdout};
use support::fixtures::deployment;
use support::operator::{Operator, binary};
use support::{wait, with_namespace};

async fn window(client: &Client, ns: &str, name: &str) -> TestWindow {
    Api::<TestWindow>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .unwrap()
}

fn scratch(ns: &str, what: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{ns}-{what}"))
}

#[tokio::test]
async fn open_get_list_renew_and_close_print_data_on_stdout_in_the_asked_format() {
    with_namespace(|kube, ns| async move {
        let op = Operator::start(&ns, &[]).await;
        let out = run_ok(client(&op, &ns).args([
            "open",
            "--no-wait",
            "-l",
            "app=web",
            "--ttl",
            "15m",
            "--reason",
            "e2e",
            "-o",
            "name",
        ]));
        let name = stdout(&out).trim().to_string();
        assert!(name.starts_with("tw-"), "{name:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("opened window"));
        assert_eq!(window(&kube, &ns, &name).await.spec.reason, "e2e");

        let got: Value = serde_json::from_str(&stdout(&run_ok(
            client(&op, &ns).args(["get", &name, "-o", "json"]),
        )))
        .unwrap();
        assert_eq!(got["name"], name.as_str());
        assert_eq!(got["ttl"], "15m");
        let yaml = stdout(&run_ok(client(&op, &ns).args(["get", &name, "-o", "yaml"])));
        assert!(yaml.contains(&format!("name: {name}")), "{yaml}");

        let table = stdout(&run_ok(client(&op, &ns).args(["list"])));
        assert!(table.starts_with("NAME"), "{table}");
        assert!(
            table.contains(&name) && table.contains("app=web"),
            "{table}"
        );

        run_ok(client(&op, &ns).args(["renew", &name, "--ttl", "5m"]));
        assert!(window(&kube, &ns, &name).await.spec.expires_at.is_some());

        let report = stdout(&run_ok(client(&op, &ns).args([
            "close",
            &name,
            "--no-wait",
        ])));
        assert!(report.contains(&format!("window {ns}/{name}")), "{report}");
        assert!(window(&kube, &ns, &name).await.spec.closed);
    })
    .await;
}

#[tokio::test]
async fn failures_have_meaningful_exit_codes_and_messages_on_stderr() {
    with_namespace(|_kube, ns| async move {
        let op = Operator::start(&ns, &[]).await;
        let out = client(&op, &ns).args(["get", "missing"]).output().unwrap();
        assert_eq!(out.status.code(), Some(66), "not found");
        assert!(out.stdout.is_empty());
        assert!(String::from_utf8_lossy(&out.stderr).contains("404"));

        let out = client(&op, &ns)
            .args(["open", "--no-wait", "--ttl", "soon"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(65), "invalid ttl");
        assert!(String::from_utf8_lossy(&out.stderr).contains("ttl"));

        let started = std::time::Instant::now();
        let out = client(&op, &ns)
            .env("DISRUPTION_GUARD_SERVER", "http://127.0.0.1:9")
            .args(["list", "--retry-for", "2s"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(69), "unreachable server: {stderr}");
        assert!(stderr.contains("retrying in"), "it retried: {stderr}");
        assert!(stderr.contains("giving up after"), "{stderr}");
        assert!(
            started.elapsed() >= Duration::from_millis(1500)
                && started.elapsed() < Duration::from_secs(20),
            "bounded by --retry-for: {:?}",
            started.elapsed()
        );

        let out = client(&op, &ns)
            .env("DISRUPTION_GUARD_SERVER", "http://127.0.0.1:9")
            .args(["list", "--retry-for", "0s"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(69), "one attempt");
        assert!(!String::from_utf8_lossy(&out.stderr).contains("retrying"));

        let out = Command::new(binary())
            .env_clear()
            .args(["list"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(78), "no server configured");
    })
    .await;
}

#[tokio::test]
async fn run_exits_with_the_commands_code_and_closes_its_window() {
    with_namespace(|kube, ns| async move {
        let op = Operator::start(&ns, &[]).await;
        let seen = scratch(&ns, "window");
        let github_output = scratch(&ns, "github-output");
        let out = client(&op, &ns)
            .env("GITHUB_ACTIONS", "true")
            .env("GITHUB_OUTPUT", &github_output)
            .env("SEEN", &seen)
            .args(["run", "--no-wait", "-l", "app=web", "--ttl", "10m", "--"])
            .args([
                "sh",
                "-c",
                "echo \"$DISRUPTION_GUARD_WINDOW\" > \"$SEEN\"; exit 3",
            ])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{stderr}");
        let name = std::fs::read_to_string(&seen).unwrap().trim().to_string();
        assert!(!name.is_empty(), "the command saw no window name");
        let tw = window(&kube, &ns, &name).await;
        assert!(tw.spec.closed, "run must close its window");
        assert!(
            stdout(&out).contains(&format!("window {ns}/{name}")),
            "the report is printed"
        );
        assert_eq!(
            std::fs::read_to_string(&github_output).unwrap(),
            format!("window={name}\n")
        );
    })
    .await;
}

#[tokio::test]
async fn run_forwards_sigterm_to_the_command_and_closes_its_window() {
    with_namespace(|kube, ns| async move {
        let op = Operator::start(&ns, &[]).await;
        let seen = scratch(&ns, "window");
        let trapped = scratch(&ns, "trapped");
        let child = client(&op, &ns)
            .env("SEEN", &seen)
            .env("TRAPPED", &trapped)
            .args(["run", "--no-wait", "--heartbeat", "1s", "--"])
            .args([
                "sh",
                "-c",
                "trap 'echo term > \"$TRAPPED\"; exit 7' TERM; echo \"$DISRUPTION_GUARD_WINDOW\" > \"$SEEN\"; \
                 while true; do sleep 0.1; done",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait::until("the command to start", Duration::from_secs(30), || async {
            std::fs::read_to_string(&seen).is_ok_and(|s| !s.trim().is_empty())
        })
        .await;
        let name = std::fs::read_to_string(&seen).unwrap().trim().to_string();
        // Let one heartbeat renew the window.
        wait::until("a heartbeat renewal", Duration::from_secs(10), || async {
            window(&kube, &ns, &name).await.spec.expires_at.is_some()
        })
        .await;
        let pid = i32::try_from(child.id()).unwrap();
        // SAFETY: kill(2) on the child we spawned.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
        let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(7), "run exits with the command's code: {stderr}");
        assert_eq!(std::fs::read_to_string(&trapped).unwrap().trim(), "term");
        assert!(window(&kube, &ns, &name).await.spec.closed, "{stderr}");
    })
    .await;
}

/// Creates the Lease `disruption-guard` in `ns`, held by `holder` for an hour from now.
async fn hold_lease(kube: &Client, ns: &str, holder: &str) {
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(jiff::Timestamp::now());
    let lease: Lease = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "disruption-guard"},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 3600,
            "acquireTime": now,
            "renewTime": now,
        },
    }))
    .unwrap();
    Api::<Lease>::namespaced(kube.clone(), ns)
        .create(&PostParams::default(), &lease)
        .await
        .unwrap();
}

#[tokio::test]
async fn the_client_talks_to_testwindow_objects_directly_with_a_kubeconfig() {
    with_namespace(|kube, ns| async move {
        let out = run_ok(
            Command::new(binary())
                .env_clear()
                .args([
                    "open",
                    "--no-wait",
                    "-o",
                    "name",
                    "-n",
                    &ns,
                    "--name",
                    "direct",
                ])
                .arg(format!("--kubeconfig={}", support::kubeconfig().display()))
                .args(["--idempotency-key", "k-1", "-l", "app=web"]),
        );
        assert_eq!(stdout(&out).trim(), "direct");
        let tw = window(&kube, &ns, "direct").await;
        assert_eq!(tw.spec.selector.match_labels.unwrap()["app"], "web");
        run_ok(
            Command::new(binary())
                .env_clear()
                .args(["close", "direct", "--no-wait", "-n", &ns])
                .arg(format!("--kubeconfig={}", support::kubeconfig().display())),
        );
        assert!(window(&kube, &ns, "direct").await.spec.closed);
    })
    .await;
}

// Needs the window controller: direct mode waits for Ready and the release on a watch.
#[tokio::test]
async fn direct_mode_waits_for_ready_and_the_release_on_a_watch_once_the_controller_runs() {
    with_namespace(|kube, ns| async move {
        let _op = Operator::start(&ns, &[]).await;
        let direct = |args: &[&str]| {
            let mut cmd = Command::new(binary());
            cmd.env_clear()
                .args(args)
                .args(["-n", &ns, "--wait-timeout", "60s"])
                .arg(format!("--kubeconfig={}", support::kubeconfig().display()));
            cmd
        };
        let out = run_ok(&mut direct(&["open", "--name", "watched", "-o", "json"]));
        let view: Value = serde_json::from_str(&stdout(&out)).unwrap();
        assert_eq!(view["ready"], true, "{view}");
        let out = run_ok(&mut direct(&["close", "watched"]));
        assert!(stdout(&out).contains("watched"), "the report is printed");
        assert!(disruption_guard::operations::windows::is_released(
            &window(&kube, &ns, "watched").await
        ));
    })
    .await;
}

/// `kubectl config …` on the kubeconfig at `path`; its stdout.
fn kubectl_config(path: &std::path::Path, args: &[&str]) -> String {
    let out = run_ok(
        support::kubectl()
            .env("KUBECONFIG", path)
            .arg("config")
            .args(args),
    );
    stdout(&out)
}

#[tokio::test]
async fn the_client_reads_the_kubeconfig_contexts_namespace_as_kubectl_with_or_without_a_server() {
    with_namespace(|kube, ns| async move {
        // A kubeconfig whose current context names the test's namespace, and a second context
        // `elsewhere` on the same cluster naming another one.
        let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("kubeconfig-{ns}"));
        std::fs::copy(support::kubeconfig(), &path).unwrap();
        kubectl_config(
            &path,
            &["set-context", "--current", &format!("--namespace={ns}")],
        );
        let cluster = kubectl_config(
            &path,
            &["view", "-o", "jsonpath={.contexts[0].context.cluster}"],
        );
        let user = kubectl_config(
            &path,
            &["view", "-o", "jsonpath={.contexts[0].context.user}"],
        );
        kubectl_config(
            &path,
            &[
                "set-context",
                "elsewhere",
                &format!("--cluster={cluster}"),
                &format!("--user={user}"),
                "--namespace=nowhere",
            ],
        );
        let client = || {
            let mut cmd = Command::new(binary());
            cmd.env_clear().env("KUBECONFIG", &path);
            cmd
        };

        // No --server, no --kubeconfig, no -n: KUBECONFIG and its context's namespace.
        let out =
            run_ok(client().args(["open", "--no-wait", "-o", "name", "--name", "by-context"]));
        assert_eq!(stdout(&out).trim(), "by-context");
        assert_eq!(
            window(&kube, &ns, "by-context")
                .await
                .metadata
                .name
                .as_deref(),
            Some("by-context")
        );

        // --context picks another context, and so its namespace.
        let out = client()
            .args(["get", "by-context", "--context", "elsewhere"])
            .output()
            .unwrap();
        assert!(!out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("nowhere"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // An explicit -n wins over the context's namespace.
        run_ok(client().args(["get", "by-context", "--context", "elsewhere", "-n", &ns]));
        run_ok(client().args(["close", "by-context", "--no-wait"]));
        assert!(window(&kube, &ns, "by-context").await.spec.closed);

        // Through the API too: a kubeconfig that is there names the namespace.
        let op = Operator::start(&ns, &[]).await;
        let out = run_ok(client().args([
            "--server",
            &op.api,
            "open",
            "--no-wait",
            "-o",
            "name",
            "--name",
            "by-server",
        ]));
        assert_eq!(stdout(&out).trim(), "by-server");
        assert!(!window(&kube, &ns, "by-server").await.spec.closed);
        // Without one, `default`.
        let home = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("home-{ns}"));
        std::fs::create_dir_all(&home).unwrap();
        let out = Command::new(binary())
            .env_clear()
            .env("HOME", &home)
            .args(["--server", &op.api, "--retry-for", "0s", "get", "by-server"])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("does not serve namespace default"), "{err}");
    })
    .await;
}

#[tokio::test]
async fn list_filters_by_window_label_and_across_namespaces_as_kubectl_get_does() {
    with_namespace(|_kube, ns| async move {
        with_namespace(move |_kube, other| async move {
            let op = Operator::start(&ns, &[]).await;
            let direct = |args: &[&str]| {
                let mut cmd = Command::new(binary());
                cmd.env_clear()
                    .arg(format!("--kubeconfig={}", support::kubeconfig().display()))
                    .args(args);
                cmd
            };
            for name in ["a", "b"] {
                run_ok(client(&op, &ns).args(["open", "--no-wait", "--name", name]));
            }
            run_ok(&mut direct(&[
                "open",
                "--no-wait",
                "-n",
                &other,
                "--name",
                "c",
            ]));
            // A label only this test uses, on a and c.
            let label = format!("dg-list={ns}");
            for (namespace, name) in [(&ns, "a"), (&other, "c")] {
                run_ok(support::kubectl().args([
                    "label",
                    "testwindows.disruption-guard.io",
                    name,
                    &label,
                    "-n",
                    namespace,
                ]));
            }

            // Through the API: the labels in the namespace; -A spans only the namespaces it serves.
            let out =
                run_ok(client(&op, &ns).args(["list", "--window-selector", &label, "-o", "name"]));
            assert_eq!(stdout(&out), "a\n");
            let names_everywhere = ["list", "-A", "--window-selector", &label, "-o", "name"];
            let out = run_ok(client(&op, &ns).args(names_everywhere));
            assert_eq!(stdout(&out), format!("{ns}/a\n"), "{other} is not served");
            let out = run_ok(client(&op, &ns).args(["list", "-A", "--window-selector", &label]));
            let table = stdout(&out);
            let cells = |line: &str| {
                line.split_whitespace()
                    .take(2)
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            let mut lines = table.lines();
            assert_eq!(cells(lines.next().unwrap()), "NAMESPACE NAME", "{table}");
            assert_eq!(cells(lines.next().unwrap()), format!("{ns} a"), "{table}");
            assert_eq!(lines.next(), None, "{table}");
            let out = run_ok(client(&op, &ns).args(["list"]));
            assert_eq!(
                stdout(&out).lines().count(),
                3,
                "header, a and b:\n{}",
                stdout(&out)
            );

            // Directly: -A is every namespace the kubeconfig's user may list.
            let out = run_ok(&mut direct(&names_everywhere));
            let mut names: Vec<String> = stdout(&out).lines().map(String::from).collect();
            names.sort();
            let mut want = vec![format!("{ns}/a"), format!("{other}/c")];
            want.sort();
            assert_eq!(names, want);

            // A malformed selector is refused, naming the field.
            let out = client(&op, &ns)
                .args(["list", "--window-selector", "app in (web"])
                .output()
                .unwrap();
            assert!(!out.status.success());
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains("labelSelector") && err.contains("400"),
                "{err}"
            );

            // -l selects pods, as in open and run: the windows over pods it selects (a and b
            // select every pod).
            run_ok(client(&op, &ns).args(["open", "--no-wait", "--name", "d", "-l", "app=db"]));
            let by_pods = |selector: &str| {
                stdout(&run_ok(
                    client(&op, &ns).args(["list", "-l", selector, "-o", "name"]),
                ))
            };
            assert_eq!(by_pods("app=web"), "a\nb\n");
            assert_eq!(by_pods("app in (db,cache)"), "a\nb\nd\n");
            let out = client(&op, &ns)
                .args(["list", "-l", "app in (web"])
                .output()
                .unwrap();
            assert_eq!(out.status.code(), Some(65), "{out:?}");
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains("selector (-l)") && err.contains("400"),
                "{err}"
            );
        })
        .await;
    })
    .await;
}

// Needs the window controller: Ready before the command, PDBs and annotations removed after.
#[tokio::test]
async fn run_leaves_no_active_window_pdb_or_annotation_once_the_controller_runs() {
    with_namespace(|kube, ns| async move {
        let deployments = Api::namespaced(kube.clone(), &ns);
        deployments
            .create(&PostParams::default(), &deployment("web").build())
            .await
            .unwrap();
        let pods: Api<Pod> = Api::namespaced(kube.clone(), &ns);
        wait::until("a running pod", Duration::from_secs(60), || async {
            pods.list(&ListParams::default().labels("app=web"))
                .await
                .is_ok_and(|l| !l.items.is_empty())
        })
        .await;
        let op = Operator::start(&ns, &[]).await;
        let pdbs_seen = scratch(&ns, "pdbs");
        let out = client(&op, &ns)
            .env("PDBS", &pdbs_seen)
            .args([
                "run",
                "-l",
                "app=web",
                "--ttl",
                "10m",
                "--wait-timeout",
                "60s",
                "--",
            ])
            .args(["sh", "-c", "touch \"$PDBS\"; exit 3"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{stderr}");
        assert!(stderr.contains("is Ready"), "{stderr}");
        assert!(!stderr.contains("not yet released"), "{stderr}");
        let windows = Api::<TestWindow>::namespaced(kube.clone(), &ns)
            .list(&ListParams::default())
            .await
            .unwrap();
        assert_eq!(windows.items.len(), 1);
        let phase = windows.items[0].status.as_ref().map(|s| s.phase);
        assert_ne!(phase, Some(disruption_guard::resources::Phase::Active));
        wait::until(
            "PDBs to be garbage-collected",
            Duration::from_secs(30),
            || async {
                Api::<PodDisruptionBudget>::namespaced(kube.clone(), &ns)
                    .list(&ListParams::default())
                    .await
                    .is_ok_and(|l| l.items.is_empty())
            },
        )
        .await;
        for pod in pods.list(&ListParams::default()).await.unwrap() {
            let annotations = pod.metadata.annotations.unwrap_or_default();
            assert!(
                !annotations.contains_key("karpenter.sh/do-not-disrupt"),
                "{annotations:?}"
            );
        }
    })
    .await;
}

#[tokio::test]
async fn a_sigterm_while_run_waits_for_ready_closes_the_window_and_runs_nothing() {
    with_namespace(|kube, ns| async move {
        // Another replica holds the Lease for an hour: this operator serves the API but never
        // writes a status, so nothing becomes Ready and run is still waiting when signalled.
        hold_lease(&kube, &ns, "another-replica").await;
        let op = Operator::start(
            &ns,
            &[
                "--leader-election",
                &format!("--leader-election-namespace={ns}"),
                "--leader-election-identity=client-test",
            ],
        )
        .await;
        let ran = scratch(&ns, "ran");
        let child = client(&op, &ns)
            .env("RAN", &ran)
            .args([
                "run",
                "--wait-timeout",
                "60s",
                "--",
                "sh",
                "-c",
                "touch \"$RAN\"",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let windows: Api<TestWindow> = Api::namespaced(kube.clone(), &ns);
        let name = wait::for_some(
            "run to open its window",
            Duration::from_secs(30),
            || async {
                windows
                    .list(&ListParams::default())
                    .await
                    .ok()?
                    .items
                    .first()
                    .map(|w| w.metadata.name.clone().unwrap())
            },
        )
        .await;
        let pid = i32::try_from(child.id()).unwrap();
        // SAFETY: kill(2) on the child we spawned.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
        let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(143), "{stderr}");
        assert!(stderr.contains("interrupted by SIGTERM"), "{stderr}");
        assert!(!ran.exists(), "the command must not run");
        let w = window(&kube, &ns, &name).await;
        assert!(w.spec.closed, "{stderr}");
        assert!(
            w.status.is_none(),
            "the follower wrote no status: {:?}",
            w.status
        );
    })
    .await;
}

/// The count `disruption_guard_api_requests_total` has for `method` on `route` answered `code`.
fn requests(metrics: &str, method: &str, route: &str, code: u16) -> u64 {
    let series = format!(
        r#"disruption_guard_api_requests_total{{method="{method}",route="{route}",code="{code}"}} "#
    );
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&series))
        .map_or(0, |n| n.trim().parse().unwrap())
}

// Needs the window controller: Ready after the open, the release after the close.
#[tokio::test]
async fn open_and_close_wait_with_one_request_each_and_never_poll_once_the_controller_runs() {
    with_namespace(|kube, ns| async move {
        let op = Operator::start(&ns, &[]).await;
        let out = run_ok(client(&op, &ns).args([
            "open",
            "--name",
            "waited",
            "--wait-timeout",
            "60s",
            "-o",
            "json",
        ]));
        let view: Value = serde_json::from_str(&stdout(&out)).unwrap();
        assert_eq!(view["ready"], true, "{view}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!("opened window {ns}/waited")),
            "{stderr}"
        );
        let out = run_ok(client(&op, &ns).args(["close", "waited", "--wait-timeout", "60s"]));
        assert!(stdout(&out).contains("waited"), "the report is printed");
        assert!(disruption_guard::operations::windows::is_released(
            &window(&kube, &ns, "waited").await
        ));

        let metrics = op.metrics().await;
        let (windows, one) = (
            "/v1/namespaces/{namespace}/windows",
            "/v1/namespaces/{namespace}/windows/{name}",
        );
        assert_eq!(
            (
                requests(&metrics, "POST", windows, 201),
                requests(&metrics, "POST", windows, 200),
                requests(&metrics, "DELETE", one, 200),
            ),
            (1, 1, 2),
            "the open, its wait (the same open again), the close and its wait:\n{metrics}"
        );
        for code in [200, 404, 429, 503] {
            assert_eq!(
                requests(&metrics, "GET", one, code),
                0,
                "no read of the window: {metrics}"
            );
        }
    })
    .await;
}

#[tokio::test]
async fn a_wait_over_the_identitys_cap_is_retried_after_retry_after_and_one_that_runs_out_exits_75()
{
    with_namespace(|kube, ns| async move {
        // Another replica holds the Lease: nothing becomes Ready, every wait lasts its timeout.
        hold_lease(&kube, &ns, "another-replica").await;
        let op = Operator::start(
            &ns,
            &[
                "--leader-election",
                &format!("--leader-election-namespace={ns}"),
                "--leader-election-identity=client-test",
                "--max-waits-per-identity=1",
            ],
        )
        .await;
        // Another wait of the same identity (every client is one without authentication)
        // holds the only place for 3 s.
        let held = reqwest::Client::new()
            .post(format!(
                "{}/v1/namespaces/{ns}/windows?wait=true&timeout=3s",
                op.api
            ))
            .json(&serde_json::json!({"name": "held"}))
            .send();
        let held = tokio::spawn(held);
        wait::until(
            "the other wait to hold its place",
            Duration::from_secs(10),
            || async { window_exists(&kube, &ns, "held").await },
        )
        .await;
        let started = std::time::Instant::now();
        let out = client(&op, &ns)
            .args(["open", "--name", "capped", "--wait-timeout", "8s"])
            .args(["--retry-for", "30s"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(75), "{stderr}");
        assert!(
            stderr.contains("429 Too Many Requests: wait: ")
                && stderr.contains("--max-waits-per-identity=1")
                && stderr.contains("retrying in"),
            "the refused wait was retried: {stderr}"
        );
        assert!(
            stderr
                .contains(r#"504 Gateway Timeout: window "capped" was not Ready within 8s (phase"#),
            "{stderr}"
        );
        assert!(stderr.contains("opened window"), "{stderr}");
        let took = started.elapsed();
        assert!(
            took >= Duration::from_secs(7) && took < Duration::from_secs(20),
            "the wait keeps its timeout: {took:?}"
        );
        assert_eq!(
            held.await.unwrap().unwrap().status(),
            reqwest::StatusCode::GATEWAY_TIMEOUT
        );
    })
    .await;
}

async fn window_exists(kube: &Client, ns: &str, name: &str) -> bool {
    Api::<TestWindow>::namespaced(kube.clone(), ns)
        .get_opt(name)
        .await
        .is_ok_and(|w| w.is_some())
}

/// The expiry a renewal last set on the window, if any.
async fn expires_at(kube: &Client, ns: &str, name: &str) -> Option<jiff::Timestamp> {
    window(kube, ns, name).await.spec.expires_at.map(|t| t.0)
}

// Needs the window controller: Ready before the command, the release after the close.
#[tokio::test]
async fn run_survives_operator_restarts_in_the_middle_and_still_renews_and_closes_once_the_controller_runs()
 {
    with_namespace(|kube, ns| async move {
        let mut op = Operator::start(&ns, &[]).await;
        let (seen, go, done) = (
            scratch(&ns, "window"),
            scratch(&ns, "go"),
            scratch(&ns, "done"),
        );
        let child = client(&op, &ns)
            .env("SEEN", &seen)
            .env("GO", &go)
            .env("DONE", &done)
            .args([
                "run",
                "--ttl",
                "10m",
                "--heartbeat",
                "1s",
                "--wait-timeout",
                "60s",
            ])
            .args(["--retry-for", "60s", "--"])
            .args([
                "sh",
                "-c",
                "echo \"$DISRUPTION_GUARD_WINDOW\" > \"$SEEN\"; \
                 while [ ! -e \"$GO\" ]; do sleep 0.1; done; echo done > \"$DONE\"",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait::until("the command to start", Duration::from_secs(60), || async {
            std::fs::read_to_string(&seen).is_ok_and(|s| !s.trim().is_empty())
        })
        .await;
        let name = std::fs::read_to_string(&seen).unwrap().trim().to_string();

        // A rolling update while the command runs: the operator is gone for a few seconds, so
        // renewals fail and are retried; it comes back and the next renewal goes through.
        assert!(op.stop().success(), "the operator exits cleanly on SIGTERM");
        tokio::time::sleep(Duration::from_secs(4)).await;
        op.restart().await;
        let before = expires_at(&kube, &ns, &name).await;
        wait::until(
            "a renewal after the restart",
            Duration::from_secs(30),
            || async { expires_at(&kube, &ns, &name).await > before },
        )
        .await;

        // Another one while the command ends: the close waits for the operator to come back.
        assert!(op.stop().success());
        std::fs::write(&go, "").unwrap();
        wait::until("the command to end", Duration::from_secs(10), || async {
            done.exists()
        })
        .await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(
            !window(&kube, &ns, &name).await.spec.closed,
            "nobody could close it yet"
        );
        op.restart().await;

        let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(0),
            "the job does not fail: {stderr}"
        );
        // Ready over the namespace's pods: none, which run says instead of "protection is in
        // effect".
        assert!(
            stderr.contains(&format!("warning: window {name} selects no pod in {ns}")),
            "{stderr}"
        );
        assert!(
            stderr.contains("retrying in"),
            "calls were retried: {stderr}"
        );
        assert!(
            !stderr.lines().any(|l| l.starts_with("error:")),
            "nothing failed for good: {stderr}"
        );
        assert!(!stderr.contains("not yet released"), "{stderr}");
        assert!(
            stdout(&out).contains(&format!("window {ns}/{name}")),
            "the report is printed"
        );
        let tw = window(&kube, &ns, &name).await;
        assert!(tw.spec.closed, "run closed its window: {stderr}");
        assert!(
            disruption_guard::operations::windows::is_released(&tw),
            "{:?}",
            tw.status
        );
    })
    .await;
}

#[tokio::test]
async fn run_with_fail_open_runs_the_command_unprotected_when_the_guard_is_unreachable() {
    with_namespace(|_kube, ns| async move {
        let unreachable = |fail_open: Option<&str>| {
            let mut cmd = Command::new(binary());
            cmd.env_clear()
                .env("PATH", std::env::var_os("PATH").unwrap_or_default())
                .env("DISRUPTION_GUARD_SERVER", "http://127.0.0.1:9")
                .env("DISRUPTION_GUARD_NAMESPACE", &ns)
                .env("GITHUB_ACTIONS", "true");
            if let Some(v) = fail_open {
                cmd.env("DISRUPTION_GUARD_FAIL_OPEN", v);
            }
            cmd.args(["run", "--retry-for", "1s", "--"]).args([
                "sh",
                "-c",
                "echo \"unprotected=$DISRUPTION_GUARD_UNPROTECTED window=$DISRUPTION_GUARD_WINDOW\"; exit 4",
            ]);
            cmd.output().unwrap()
        };

        let out = unreachable(None);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(69), "off by default: {stderr}");
        assert!(stdout(&out).is_empty(), "the command did not run");

        let out = unreachable(Some("true"));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(4), "the command's code: {stderr}");
        assert_eq!(stdout(&out), "unprotected=1 window=\n");
        assert!(stderr.contains("WITHOUT PROTECTION"), "{stderr}");
        assert!(
            stderr.contains("::warning title=disruption-guard: running unprotected::"),
            "{stderr}"
        );

        // --fail-open is for the guard being down, not for being refused.
        let op = Operator::start_with(&ns, vec![format!("--namespaces={ns}")]).await;
        let out = client(&op, &ns)
            .args(["run", "--fail-open", "--", "true"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(77), "no token: {}", String::from_utf8_lossy(&out.stderr));
    })
    .await;
}
