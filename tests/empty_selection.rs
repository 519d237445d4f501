//! A window whose selector selects no pod, against a real operator and the real cluster: it is
//! kept Ready, and says so everywhere a user looks — `Ready`'s reason `NoPodsSelected` (kubectl),
//! one Warning Event, a warning line on the CLI's stderr — and `requirePods` (`--require-pods`
//! on the CLI, a field of the open with `?wait=true` for curl) turns it into a refused open
//! whose window is closed again.

mod support;

use std::process::{Command, Output};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::Value;
use support::cli::client;
use support::fixtures::deployment;
use support::operator::Operator;
use support::window_fields::{field as window_field, ready};
use support::{wait, with_namespace};

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

/// How many times the operator published the Warning `reason` on the window `name` (an Event
/// repeated by the recorder is one object whose series counts the repeats).
async fn warnings(kube: &Client, ns: &str, name: &str, reason: &str) -> i32 {
    support::drain::events_about(kube, ns, name)
        .await
        .iter()
        .filter(|e| e.reason.as_deref() == Some(reason) && e.type_.as_deref() == Some("Warning"))
        .map(|e| e.series.as_ref().map_or(1, |s| s.count))
        .sum()
}

/// `curl` posting `body` to the windows of `ns`; the answer's body, status and content type.
fn curl_open(op: &Operator, ns: &str, query: &str, body: &str) -> (Value, u16, String) {
    let out = Command::new("curl")
        .args(["-sS", "-X", "POST", "-H", "Content-Type: application/json"])
        .args(["-w", "\n%{http_code} %{content_type}", "-d", body])
        .arg(format!("{}/v1/namespaces/{ns}/windows{query}", op.api))
        .output()
        .expect("curl runs");
    let out = text(&out.stdout);
    let (body, meta) = out.rsplit_once('\n').expect("curl's -w line");
    let (code, content_type) = meta.split_once(' ').unwrap_or((meta, ""));
    let json = serde_json::from_str(body).unwrap_or_else(|_| panic!("JSON: {body}"));
    (json, code.parse().unwrap(), content_type.to_string())
}

#[tokio::test]
async fn a_window_over_no_pod_is_ready_says_so_once_and_protects_pods_that_appear_later() {
    with_namespace(|kube, ns| async move {
        let op = Operator::start(&ns, &[]).await;
        // A typo: the pods are labelled tier=backend.
        let out = client(&op, &ns)
            .args(["open", "-l", "tier=backnd", "--ttl", "10m", "-o", "name"])
            .output()
            .unwrap();
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "a window over no pod opens: {stderr}");
        let name = text(&out.stdout).trim().to_string();
        assert!(
            stderr.contains(&format!(
                "warning: window {name} selects no pod in {ns}: check -l tier=backnd;"
            )),
            "stderr: {stderr}"
        );
        assert!(!stderr.contains("protection is in effect"), "{stderr}");
        assert_eq!(ready(&ns, &name), "True NoPodsSelected");
        let message = window_field(
            &ns,
            &name,
            r#"{.status.conditions[?(@.type=="Ready")].message}"#,
        );
        assert!(message.contains("nothing is protected"), "{message}");
        support::drain::until_event(
            &kube,
            &ns,
            &name,
            Some("Warning"),
            "NoPodsSelected",
            "no pod in",
        )
        .await;

        // More passes over the window (a renewal is one, with its own Event): no second warning.
        let out = client(&op, &ns)
            .args(["renew", &name, "--ttl", "20m"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        support::drain::until_event(&kube, &ns, &name, None, "Renewed", "").await;
        assert_eq!(warnings(&kube, &ns, &name, "NoPodsSelected").await, 1);

        // The deploy the window was opened before: its pod is protected, Ready never wavered.
        let deployments: Api<Deployment> = Api::namespaced(kube.clone(), &ns);
        let backend = deployment("backend").label("tier", "backnd").build();
        deployments
            .create(&PostParams::default(), &backend)
            .await
            .unwrap();
        wait::until(
            "the window to protect the new pod",
            Duration::from_secs(60),
            || async {
                ready(&ns, &name) == "True Protected"
                    && window_field(&ns, &name, "{.status.protected.pods}") == "1"
            },
        )
        .await;
        assert_eq!(warnings(&kube, &ns, &name, "NoPodsSelected").await, 1);
    })
    .await;
}

#[tokio::test]
async fn require_pods_refuses_an_open_over_no_pod_and_closes_its_window_for_the_cli_and_curl() {
    with_namespace(|kube, ns| async move {
        let deployments: Api<Deployment> = Api::namespaced(kube.clone(), &ns);
        deployments
            .create(&PostParams::default(), &deployment("api").build())
            .await
            .unwrap();
        let op = Operator::start(&ns, &[]).await;

        let out: Output = client(&op, &ns)
            .args(["open", "-l", "app=apj", "--require-pods", "--ttl", "10m"])
            .args(["--name", "typo"])
            .output()
            .unwrap();
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(65), "refused: {stderr}");
        assert!(
            stderr.contains("422") && stderr.contains("requirePods: window typo selects no pod"),
            "{stderr}"
        );
        assert_eq!(window_field(&ns, "typo", "{.spec.closed}"), "true");
        wait::until("the refused window to end", Duration::from_secs(30), || {
            let ns = ns.clone();
            async move { window_field(&ns, "typo", "{.status.phase}") == "Closed" }
        })
        .await;

        // curl: the field of the open, honoured with ?wait=true.
        let body =
            r#"{"selector": "app=missing", "ttl": "10m", "requirePods": true, "name": "by-curl"}"#;
        let (problem, code, content_type) = curl_open(&op, &ns, "", body);
        assert_eq!(
            (code, content_type.as_str()),
            (422, "application/problem+json")
        );
        assert!(
            problem["detail"]
                .as_str()
                .unwrap()
                .starts_with("requirePods: needs ?wait=true"),
            "{problem}"
        );
        assert_eq!(
            window_field(&ns, "by-curl", "{.metadata.name}"),
            "",
            "nothing opened"
        );
        let (problem, code, content_type) = curl_open(&op, &ns, "?wait=true&timeout=60s", body);
        assert_eq!(
            (code, content_type.as_str()),
            (422, "application/problem+json"),
            "{problem}"
        );
        assert!(
            problem["type"]
                .as_str()
                .unwrap()
                .ends_with("/no-pods-selected"),
            "{problem}"
        );
        let detail = problem["detail"].as_str().unwrap();
        assert!(
            detail.starts_with("requirePods: window by-curl selects no pod in")
                && detail.contains("check the selector app=missing")
                && detail.ends_with("it was closed"),
            "{detail}"
        );
        assert_eq!(problem["window"]["name"], "by-curl");
        assert_eq!(problem["window"]["closed"], true);
        assert_eq!(window_field(&ns, "by-curl", "{.spec.closed}"), "true");

        // Over pods, the same flag opens as usual.
        let out = client(&op, &ns)
            .args(["open", "-l", "app=api", "--require-pods", "--ttl", "10m"])
            .args(["-o", "name"])
            .output()
            .unwrap();
        let stderr = text(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(!stderr.contains("warning"), "{stderr}");
        let name = text(&out.stdout).trim().to_string();
        assert_eq!(ready(&ns, &name), "True Protected");
    })
    .await;
}
