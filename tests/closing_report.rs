//! `disruption-guard run`'s closing report, against a real operator and the real cluster: after
//! the release, which clears what the window protects now, the report still says what it
//! protected while it was open and what it blocked — on run's stdout, in the API's report and in
//! the window's status as kubectl shows it.

mod support;

use std::process::Command;

use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use support::operator::{Operator, binary};
use support::window_fields::field as window_field;
use support::windows::lone_pod_on_private_node;
use support::{kubeconfig, kubernetes_bin, with_namespace};

/// The command `run` wraps: a drain starts (the pod's node is cordoned), and the tests go on
/// until the window has seen the eviction it blocks (at most 30 s).
const DRAIN_DURING_THE_TESTS: &str = r#"
"$KUBECTL" cordon "$NODE" >/dev/null || exit 9
for _ in $(seq 150); do
  seen=$("$KUBECTL" get tw "$DISRUPTION_GUARD_WINDOW" -n "$DISRUPTION_GUARD_NAMESPACE" \
    -o jsonpath='{.status.report.evictionsBlocked}')
  [ "$seen" = 1 ] && exit 0
  sleep 0.2
done
exit 8
"#;

#[tokio::test]
async fn runs_closing_report_says_what_the_window_protected_and_blocked_after_the_release() {
    with_namespace(|kube, ns| async move {
        let op = Operator::start(&ns, &[]).await;
        let (node, _pod) = lone_pod_on_private_node(&kube, &ns, "api").await;
        // This test is about the report: keep the drain watcher from rolling the Deployment out
        // on the cordon.
        let opt_out =
            json!({"metadata": {"annotations": {"disruption-guard.io/rollout-on-drain": "false"}}});
        Api::<Deployment>::namespaced(kube.clone(), &ns)
            .patch("api", &PatchParams::default(), &Patch::Merge(opt_out))
            .await
            .unwrap();

        let out = Command::new(binary())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("DISRUPTION_GUARD_SERVER", &op.api)
            .env("DISRUPTION_GUARD_NAMESPACE", &ns)
            .env("KUBECTL", kubernetes_bin("kubectl"))
            .env("KUBECONFIG", kubeconfig())
            .env("NODE", &node)
            .args(["run", "-l", "app=api", "--ttl", "10m", "--"])
            .args(["sh", "-c", DRAIN_DURING_THE_TESTS])
            .output()
            .unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
        let name = stderr
            .lines()
            .find_map(|l| l.strip_prefix(&format!("closed window {ns}/")))
            .unwrap_or_else(|| panic!("run closed its window: {stderr}"))
            .to_string();
        assert!(
            stdout.contains(&format!("window {ns}/{name}: Closed\n")),
            "{stdout}"
        );
        assert!(
            stdout.contains(
                "  protected while open: at most 1 workload, 1 pod, 1 node at once (now released)\n"
            ),
            "what it protected survives the release: {stdout}"
        );
        assert!(
            stdout.contains("  blocked: 1 eviction; rollouts: 0\n"),
            "{stdout}"
        );
        assert!(!stdout.contains("0 workloads, 0 pods, 0 nodes"), "{stdout}");

        // The API's report and the status say the same once protection is released.
        let got = Command::new(binary())
            .env_clear()
            .env("DISRUPTION_GUARD_SERVER", &op.api)
            .env("DISRUPTION_GUARD_NAMESPACE", &ns)
            .args(["get", &name, "-o", "json"])
            .output()
            .unwrap();
        let view: Value = serde_json::from_slice(&got.stdout).unwrap();
        assert_eq!(view["protected"]["pods"], 0, "released: {view}");
        assert_eq!(
            view["report"]["peakProtected"],
            json!({"workloads": 1, "pods": 1, "nodes": 1}),
            "{view}"
        );
        assert_eq!(view["report"]["evictionsBlocked"], 1, "{view}");
        assert_eq!(
            window_field(
                &ns,
                &name,
                "{.status.report.peakProtected.pods} {.status.protected.pods}"
            ),
            "1 0"
        );
    })
    .await;
}
