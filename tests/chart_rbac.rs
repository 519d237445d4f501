//! The operator running with exactly the chart's RBAC (a token of the chart's ServiceAccount):
//! proof that the ClusterRole and Role grant every verb the code uses.

mod support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use support::chart_identity::ChartIdentity;
use support::fixtures::deployment;
use support::operator::Operator;
use support::{create_ready_node, drain, pods, wait, windows, with_namespace};

/// The operator for `ns`, authenticated as the chart's ServiceAccount, leading its own Lease.
async fn operator_as_chart(ns: &str, identity: &ChartIdentity) -> Operator {
    Operator::start_as(
        ns,
        vec![
            format!("--namespaces={ns}"),
            "--insecure-no-auth".into(),
            "--leader-election".into(),
            format!("--leader-election-namespace={ns}"),
            "--leader-election-identity=chart-sa".into(),
        ],
        identity.kubeconfig.clone(),
    )
    .await
}

fn assert_nothing_forbidden(op: &Operator) {
    let log = op.log_text();
    assert!(
        !log.to_lowercase().contains("forbidden"),
        "a request was forbidden:\n{log}"
    );
}

#[tokio::test]
async fn the_operator_starts_and_takes_the_lease_as_the_charts_service_account() {
    with_namespace(|_client, ns| async move {
        let identity = ChartIdentity::install(&ns);
        let op = operator_as_chart(&ns, &identity).await;
        wait::until(
            "the chart's ServiceAccount to hold the Lease",
            Duration::from_secs(15),
            || async {
                op.metrics()
                    .await
                    .lines()
                    .any(|l| l.trim() == "disruption_guard_leader 1")
            },
        )
        .await;
        assert_nothing_forbidden(&op);
    })
    .await;
}

#[tokio::test]
async fn a_window_protects_and_releases_with_only_the_charts_rbac() {
    with_namespace(|client, ns| async move {
        let identity = ChartIdentity::install(&ns);
        let node = format!("{ns}-n0");
        create_ready_node(&client, &ns, &node).await;
        let app = deployment("api")
            .node_selector("disruption-guard.io/test-node", &node)
            .build();
        Api::<Deployment>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &app)
            .await
            .unwrap();
        let pod = wait::for_some("the pod to be Ready", Duration::from_secs(30), || async {
            pods::ready_pods(&client, &ns, "api")
                .await
                .first()
                .and_then(|p| p.metadata.name.clone())
        })
        .await;
        let op = operator_as_chart(&ns, &identity).await;

        windows::open(
            &client,
            &ns,
            &windows::window("ci", "api", "10m", json!({})),
        )
        .await;
        windows::until_ready(&client, &ns, "ci", Duration::from_secs(20)).await;
        assert!(
            windows::protected(&client, &ns, &pod, &node).await,
            "pod and node carry the annotations"
        );
        wait::until(
            "the window's PDB to block the eviction",
            Duration::from_secs(20),
            || async { windows::evict(&client, &ns, &pod).await == 429 },
        )
        .await;

        windows::close(&client, &ns, "ci").await;
        windows::until_released(&client, &ns, &pod, &node, Duration::from_secs(20)).await;
        assert_nothing_forbidden(&op);
    })
    .await;
}

#[tokio::test]
async fn the_drain_watcher_rolls_out_with_only_the_charts_rbac() {
    with_namespace(|client, ns| async move {
        let identity = ChartIdentity::install(&ns);
        let first = format!("{ns}-a");
        create_ready_node(&client, &ns, &first).await;
        drain::deploy_lone(&client, &ns, drain::lone(&ns, "db"), &first).await;
        let second = format!("{ns}-b");
        create_ready_node(&client, &ns, &second).await;
        let op = operator_as_chart(&ns, &identity).await;

        let (finished, seconds, stderr) = drain::drain(&first, "60s").await;
        assert!(
            finished,
            "the drain finishes after the watcher's rollout ({seconds:.1}s): {stderr}"
        );
        let moved = pods::ready_pods(&client, &ns, "db").await;
        assert_eq!(moved.len(), 1);
        assert_eq!(
            drain::node_of(&moved[0]).as_deref(),
            Some(second.as_str()),
            "the pod moved to the other node"
        );
        assert_nothing_forbidden(&op);
    })
    .await;
}

/// A ServiceAccount `sa` in `ns` bound (RoleBinding in `ns`) to the ClusterRole `role`.
fn service_account_bound_to(ns: &str, sa: &str, role: &str) {
    for args in [
        vec!["create", "serviceaccount", sa, "-n", ns],
        vec![
            "create",
            "rolebinding",
            sa,
            "-n",
            ns,
            &format!("--clusterrole={role}"),
            &format!("--serviceaccount={ns}:{sa}"),
        ],
    ] {
        let out = support::kubectl().args(&args).output().unwrap();
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[tokio::test]
async fn ci_and_namespace_editors_use_the_api_through_the_charts_roles() {
    with_namespace(|_client, ns| async move {
        let identity = ChartIdentity::install(&ns);
        // CI bound to the chart's -ci ClusterRole; people with the built-in edit and view
        // roles, which the chart's roles are aggregated into.
        service_account_bound_to(&ns, "ci", &format!("{}-ci", identity.fullname));
        service_account_bound_to(&ns, "dev", "edit");
        service_account_bound_to(&ns, "viewer", "view");
        // The API authenticates and authorizes with the chart's ServiceAccount's own rights
        // (TokenReview, SubjectAccessReview).
        let op = Operator::start_as(
            &ns,
            vec![format!("--namespaces={ns}")],
            identity.kubeconfig.clone(),
        )
        .await;
        let http = reqwest::Client::new();
        let windows = format!("{}/v1/namespaces/{ns}/windows", op.api);
        let token = |sa: &str| support::service_account_token(&ns, sa, "disruption-guard");

        for sa in ["ci", "dev"] {
            let bearer = token(sa);
            let body = json!({"name": sa, "selector": "app=none", "ttl": "10m", "reason": "rbac"});
            // The aggregation controller adds the chart's rules to `edit` shortly after they
            // are created.
            wait::until(
                &format!("{sa} to open a window"),
                Duration::from_secs(30),
                || async {
                    let resp = http
                        .post(&windows)
                        .bearer_auth(&bearer)
                        .json(&body)
                        .send()
                        .await
                        .unwrap();
                    resp.status().is_success()
                },
            )
            .await;
            let window = format!("{windows}/{sa}");
            for (what, request) in [
                ("list", http.get(&windows)),
                ("get", http.get(&window)),
                (
                    "renew",
                    http.post(format!("{window}/renew"))
                        .json(&json!({"ttl": "20m"})),
                ),
                ("close", http.delete(&window)),
            ] {
                let resp = request.bearer_auth(&bearer).send().await.unwrap();
                let status = resp.status();
                assert!(
                    status.is_success(),
                    "{sa} may {what}: {status} {}",
                    resp.text().await.unwrap()
                );
            }
        }

        let bearer = token("viewer");
        wait::until("view to list windows", Duration::from_secs(30), || async {
            let resp = http
                .get(&windows)
                .bearer_auth(&bearer)
                .send()
                .await
                .unwrap();
            resp.status().is_success()
        })
        .await;
        let resp = http
            .post(&windows)
            .bearer_auth(&bearer)
            .json(&json!({"selector": "app=none", "ttl": "10m"}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 403, "view may not open a window");
    })
    .await;
}
