//! `disruption-guard check-webhook` against the real API server: the dry-run eviction it sends
//! reaches the operator's webhook (registered as the chart registers it) through the API
//! server, which passes the webhook's answer back; and the check fails, saying what to check,
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
