//! `disruption-guard check-webhook` against the real API server: the dry-run eviction it sends
//! reaches the operator's webhook (registered as the chart registers it) through the API
//! server, which passes the webhook's answer back — also as the chart's `helm test` Pod runs it,
//! with its arguments and only the RBAC the chart gives it; and the check fails, saying what to check,
//! when no webhook is registered for the namespace, when the registered webhook cannot be
//! reached (the registration fails open), and when its user may not evict.

mod support;

use std::path::Path;
use std::process::Output;

use support::operator::{Operator, binary};
use support::{kubectl, with_namespace};

/// Runs `check-webhook` with `args`, as the user of `kubeconfig`.
fn check(kubeconfig: &Path, args: &[&str]) -> Output {
    let out = std::process::Command::new(binary())
        .env("KUBECONFIG", kubeconfig)
        .arg("check-webhook")
        .args(args)
        .output()
        .expect("disruption-guard check-webhook");
    eprintln!(
        "check-webhook {args:?}: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[tokio::test]
async fn the_check_passes_when_the_webhook_answers_the_dry_run_eviction_and_nothing_is_held() {
    with_namespace(|_client, ns| async move {
        let op = Operator::intercepting(&ns, &[]).await;
        let out = check(support::kubeconfig(), &["-n", &ns, "--timeout", "30s"]);
        assert!(out.status.success());
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("answered by") && stdout.contains(&ns),
            "{stdout}"
        );
        assert!(op.log_text().contains("answering the webhook probe"));
        let metrics = op.metrics().await;
        assert!(
            metrics.contains("disruption_guard_intercept_denied_total 0\n"),
            "the probe is no deny:\n{metrics}"
        );
    })
    .await;
}

#[tokio::test]
async fn the_check_fails_when_no_webhook_is_registered_for_the_namespace() {
    with_namespace(|_client, ns| async move {
        let out = check(support::kubeconfig(), &["-n", &ns, "--timeout", "3s"]);
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("did not see a dry-run eviction") && stderr.contains("docs/eks.md"),
            "{stderr}"
        );
    })
    .await;
}

#[tokio::test]
async fn the_check_fails_when_the_api_server_cannot_reach_the_registered_webhook() {
    with_namespace(|_client, ns| async move {
        let mut op = Operator::intercepting(&ns, &[]).await;
        assert!(
            check(support::kubeconfig(), &["-n", &ns, "--timeout", "30s"])
                .status
                .success()
        );
        // The registration stays, failing open; the API server finds nothing listening.
        op.kill();
        let out = check(support::kubeconfig(), &["-n", &ns, "--timeout", "4s"]);
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("cannot reach the webhook"));
    })
    .await;
}

#[tokio::test]
async fn the_check_ends_at_once_when_its_user_may_not_evict() {
    with_namespace(|_client, ns| async move {
        let created = kubectl()
            .args(["create", "serviceaccount", "checker", "-n", &ns])
            .output()
            .unwrap();
        assert!(created.status.success());
        let kubeconfig = support::chart_identity::token_kubeconfig(&ns, "checker");
        let started = std::time::Instant::now();
        // No -n: the kubeconfig context's namespace.
        let out = check(&kubeconfig, &["--timeout", "60s"]);
        assert!(!out.status.success());
        assert!(started.elapsed() < std::time::Duration::from_secs(20));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("(403)") && stderr.contains("pods/eviction") && stderr.contains(&ns),
            "{stderr}"
        );
    })
    .await;
}

#[tokio::test]
async fn the_charts_helm_test_passes_with_its_own_arguments_and_rbac() {
    with_namespace(|_client, ns| async move {
        let _op = Operator::intercepting(&ns, &[]).await;
        let rendered = std::process::Command::new(support::cached_tool("helm-v", "helm"))
            .args([
                "template",
                "guard",
                "--namespace",
                &ns,
                "--kube-version",
                "1.36.3",
            ])
            .arg(support::repo_root().join("charts/disruption-guard"))
            .args(["--show-only", "templates/tests/check-webhook.yaml"])
            .output()
            .expect("helm template");
        assert!(
            rendered.status.success(),
            "{}",
            String::from_utf8_lossy(&rendered.stderr)
        );
        let objects: Vec<serde_json::Value> =
            serde_saphyr::from_slice_multiple(&rendered.stdout).unwrap();
        let (pods, rbac): (Vec<_>, Vec<_>) = objects
            .into_iter()
            .filter(|o| !o.is_null())
            .partition(|o| o["kind"] == "Pod");
        // The ServiceAccount, Role and RoleBinding as the chart makes them (kwok runs no
        // container: the Pod's command runs here, as its ServiceAccount).
        let manifest = serde_json::to_vec(
            &serde_json::json!({"apiVersion": "v1", "kind": "List", "items": rbac}),
        )
        .unwrap();
        let applied = support::run_with_input(
            {
                let mut apply = kubectl();
                apply.args(["apply", "-f", "-"]);
                apply
            },
            &manifest,
        );
        assert!(
            applied.status.success(),
            "{}",
            String::from_utf8_lossy(&applied.stderr)
        );
        let pod = &pods[0]["spec"];
        let account = pod["serviceAccountName"].as_str().unwrap();
        let kubeconfig = support::chart_identity::token_kubeconfig(&ns, account);
        let args: Vec<String> =
            serde_json::from_value(pod["containers"][0]["args"].clone()).unwrap();
        assert_eq!(args[1], format!("--namespace={ns}"));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = std::process::Command::new(binary())
            .env("KUBECONFIG", &kubeconfig)
            .args(&args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    })
    .await;
}
