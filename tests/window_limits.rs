//! The admin's limits on windows against the real cluster: `protect.daemonSets` refused to an
//! identity `--allow-daemon-sets-for` does not name (403 problem+json from the HTTP API,
//! `Ready=False` and no protection for a window applied with kubectl), and
//! `--max-nodes-per-namespace` keeping a namespace's windows from holding more nodes than
//! allowed while what they hold stays held.

mod support;

use std::io::Write as _;
use std::process::Stdio;
use std::time::Duration;

use disruption_guard::resources::TestWindow;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::json;
use support::fixtures::deployment;
use support::operator::Operator;
use support::pods::ready_pods;
use support::windows::*;
use support::{create_ready_node, kubectl, wait, with_namespace};

const LIMIT: Duration = Duration::from_secs(30);

/// The window's Ready condition as (status, reason, message), once it has one.
async fn ready_condition(
    client: &Client,
    ns: &str,
    name: &str,
) -> Option<(String, String, String)> {
    let w = Api::<TestWindow>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .ok()??;
    let c = w.status?.ready_condition()?.clone();
    Some((c.status, c.reason, c.message))
}

/// Waits until the window is `Ready=False` with `reason`; its message.
async fn until_refused(client: &Client, ns: &str, name: &str, reason: &str) -> String {
    wait::for_some(
        &format!("{name} to be Ready=False ({reason})"),
        LIMIT,
        || async {
            let (status, got, message) = ready_condition(client, ns, name).await?;
            (status == "False" && got == reason).then_some(message)
        },
    )
    .await
}

/// `kubectl apply` of a window manifest in `ns`.
fn kubectl_apply(ns: &str, window: &serde_json::Value) {
    let mut apply = kubectl()
        .args(["apply", "-n", ns, "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    apply
        .stdin
        .take()
        .unwrap()
        .write_all(window.to_string().as_bytes())
        .unwrap();
    assert!(apply.wait().unwrap().success(), "kubectl apply");
}

#[tokio::test]
async fn protect_daemon_sets_is_refused_to_an_identity_the_admin_did_not_name() {
    with_namespace(|client, ns| async move {
        // The default: nobody but CITrusts that allow it.
        let op = Operator::start(&ns, &[]).await;
        let (node, pod) = lone_pod_on_private_node(&client, &ns, "api").await;
        let pod = pod.metadata.name.unwrap();

        // Through the HTTP API: a 403 problem naming the field, and nothing created.
        let resp = reqwest::Client::new()
            .post(format!("{}/v1/namespaces/{ns}/windows", op.api))
            .json(
                &json!({"name": "agents", "selector": "app=api", "ttl": "10m",
                "protect": {"daemonSets": true}}),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 403);
        assert_eq!(
            resp.headers()["content-type"],
            "application/problem+json",
            "{:?}",
            resp.headers()
        );
        let problem: serde_json::Value = resp.json().await.unwrap();
        let detail = problem["detail"].as_str().unwrap_or_default();
        assert!(detail.starts_with("protect.daemonSets: "), "{problem}");
        let windows: Api<TestWindow> = Api::namespaced(client.clone(), &ns);
        assert!(windows.get_opt("agents").await.unwrap().is_none());

        // Applied with kubectl: the controller refuses it, Ready=False with the reason, and
        // protects nothing of what it selects.
        kubectl_apply(
            &ns,
            &json!({"apiVersion": "disruption-guard.io/v1alpha1", "kind": "TestWindow",
                "metadata": {"name": "applied"},
                "spec": {"selector": {"matchLabels": {"app": "api"}}, "ttl": "10m",
                    "protect": {"daemonSets": true}}}),
        );
        let message = until_refused(&client, &ns, "applied", "DaemonSetsNotAllowed").await;
        assert!(message.starts_with("protect.daemonSets: "), "{message}");
        // The status is written after the reconcile's writes: none protected anything.
        assert_released(&client, &ns, &pod, &node).await;

        // The same window without the opt-in protects its pod.
        open(&client, &ns, &window("plain", "api", "10m", json!({}))).await;
        until_ready(&client, &ns, "plain", LIMIT).await;
        assert!(protected(&client, &ns, &pod, &node).await);
    })
    .await;
}

/// Three private nodes, each with a one-replica Deployment `app-<i>` on it; their pods' names.
async fn three_lone_pods(client: &Client, ns: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for i in 1..=3 {
        let node = format!("{ns}-n{i}");
        create_ready_node(client, ns, &node).await;
        let app = format!("app-{i}");
        Api::<Deployment>::namespaced(client.clone(), ns)
            .create(
                &PostParams::default(),
                &deployment(&app)
                    .node_selector("disruption-guard.io/test-node", &node)
                    .build(),
            )
            .await
            .unwrap();
        out.push((node, app));
    }
    let mut pods = Vec::new();
    for (node, app) in out {
        let pod: Pod = wait::for_some("the pod to be Ready", Duration::from_secs(60), || async {
            ready_pods(client, ns, &app).await.pop()
        })
        .await;
        pods.push((node, pod.metadata.name.unwrap()));
    }
    pods
}

#[tokio::test]
async fn a_namespace_past_its_node_cap_gets_no_more_and_keeps_what_it_holds() {
    with_namespace(|client, ns| async move {
        let _op = Operator::start(&ns, &["--max-nodes-per-namespace=2"]).await;
        let pods = three_lone_pods(&client, &ns).await;
        let selecting = |name: &str, apps: &[&str]| {
            window(
                name,
                "unused",
                "10m",
                json!({"selector": {"matchExpressions": [
                    {"key": "app", "operator": "In", "values": apps}]}}),
            )
        };

        // Two nodes: within the cap.
        open(&client, &ns, &selecting("first", &["app-1", "app-2"])).await;
        until_ready(&client, &ns, "first", LIMIT).await;
        // A third node would pass it: refused, with the reason, and nothing of it protected.
        open(&client, &ns, &selecting("second", &["app-3"])).await;
        let message = until_refused(&client, &ns, "second", "NodeLimit").await;
        assert!(message.contains("--max-nodes-per-namespace=2"), "{message}");
        assert!(message.contains("Deployment/app-3"), "{message}");
        let (third_node, third_pod) = &pods[2];
        let left: Vec<String> = traces(&client, &ns, third_pod, third_node)
            .await
            .into_iter()
            .filter(|t| !["PDB app-1-dg", "PDB app-2-dg"].contains(&t.as_str()))
            .collect();
        assert!(left.is_empty(), "the refused window wrote: {left:?}");
        // What the namespace held stays held, and the first window stays Ready.
        for (node, pod) in &pods[..2] {
            assert!(protected(&client, &ns, pod, node).await, "{pod} on {node}");
        }
        let first = Api::<TestWindow>::namespaced(client.clone(), &ns)
            .get("first")
            .await
            .unwrap();
        assert!(is_ready(&first), "{:?}", first.status);

        // Once the first window ends, the second fits and gets its protection.
        close(&client, &ns, "first").await;
        until_ready(&client, &ns, "second", LIMIT).await;
        assert!(protected(&client, &ns, third_pod, third_node).await);
    })
    .await;
}
