//! The operator running with exactly the chart's RBAC (a token of the chart's ServiceAccount):
//! proof that the ClusterRole and Role grant every verb the code uses, that they grant no
//! more than they should (no webhook configurations created, no writes outside `namespaces`),
//! and that the chart's ValidatingAdmissionPolicy lets the operator's real writes through but
//! nothing else a stolen token could try (an image, a pod label, a node taint).

mod support;

use std::time::Duration;

use disruption_guard::resources::names::{
    CA_SAFE_TO_EVICT, CA_SCALE_DOWN_DISABLED, FIELD_MANAGER, KARPENTER_DO_NOT_DISRUPT,
    namespace_field_manager,
};
use disruption_guard::rollout::records;
use disruption_guard::rollout::target::{NodeRef, Target};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
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

/// `kubectl auth can-i <args>` as the chart's ServiceAccount (its own token): yes or no.
fn can_i(identity: &ChartIdentity, args: &[&str]) -> bool {
    let out = support::kubectl()
        .arg("--kubeconfig")
        .arg(&identity.kubeconfig)
        .args(["auth", "can-i"])
        .args(args)
        .output()
        .unwrap();
    let answer = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        answer == "yes" || answer == "no",
        "kubectl auth can-i {args:?}: {answer} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    answer == "yes"
}

#[tokio::test]
async fn the_charts_service_account_cannot_create_webhook_configurations_or_write_outside_its_namespaces()
 {
    with_namespace(|_client, ns| async move {
        let only = format!("namespaces={{{ns}}}");
        let identity = ChartIdentity::install_with(&ns, &["--set", &only]);
        let webhook = format!("validatingwebhookconfigurations/{}", identity.fullname);
        assert!(
            !can_i(&identity, &["create", "validatingwebhookconfigurations"]),
            "no create: such a token could send any object to any URL"
        );
        assert!(can_i(&identity, &["patch", &webhook]), "its own caBundle");
        assert!(!can_i(
            &identity,
            &["patch", "validatingwebhookconfigurations/other"]
        ));
        for (verb, resource) in [
            ("patch", "pods"),
            ("patch", "deployments.apps"),
            ("create", "poddisruptionbudgets.policy"),
            ("delete", "poddisruptionbudgets.policy"),
            ("patch", "testwindows.disruption-guard.io"),
        ] {
            assert!(
                can_i(&identity, &[verb, resource, "-n", &ns]),
                "{verb} {resource} in its namespace"
            );
            assert!(
                !can_i(&identity, &[verb, resource, "-n", "default"]),
                "{verb} {resource} outside its namespaces"
            );
        }
        // Cluster-scoped kinds stay cluster-wide (the admission policy narrows the patches).
        assert!(can_i(&identity, &["patch", "nodes"]));
        assert!(!can_i(&identity, &["create", "secrets", "-n", "default"]));
    })
    .await;
}

/// A client authenticated as the chart's ServiceAccount.
async fn client_as(identity: &ChartIdentity) -> Client {
    let kubeconfig = Kubeconfig::read_from(&identity.kubeconfig).unwrap();
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

/// The status of a write refused by the API server (panics if it went through).
fn refused<T: std::fmt::Debug>(result: Result<T, kube::Error>, what: &str) -> kube::core::Status {
    match result {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("{what} went through: {other:?}"),
    }
}

const POLICY: &str = "ValidatingAdmissionPolicy";

#[tokio::test]
async fn the_admission_policy_lets_the_operator_roll_out_and_annotate_but_change_nothing_else() {
    with_namespace(|client, ns| async move {
        let identity = ChartIdentity::install(&ns);
        let node = format!("{ns}-n0");
        let created = create_ready_node(&client, &ns, &node).await;
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
        let operator = client_as(&identity).await;
        let deployments: Api<Deployment> = Api::namespaced(operator.clone(), &ns);
        let pod_api: Api<Pod> = Api::namespaced(operator.clone(), &ns);
        let nodes: Api<Node> = Api::all(operator.clone());
        let merge = PatchParams::default();

        // The API server loads a new policy within a second or so. Until then a label patch
        // of the Deployment goes through (a different value each time; it starts no rollout,
        // so the pod stays): wait until the policy refuses it.
        let mut tries = 0;
        wait::for_some(
            "the policy to refuse the operator's label patch",
            Duration::from_secs(30),
            || {
                tries += 1;
                let patch = serde_json::json!({"metadata": {"labels": {"probe": tries.to_string()}}});
                let deployments = deployments.clone();
                async move {
                    match deployments.patch("api", &PatchParams::default(), &Patch::Merge(&patch)).await {
                        Err(kube::Error::Api(s)) if s.message.contains(POLICY) => Some(()),
                        _ => None,
                    }
                }
            },
        )
        .await;
        let image = serde_json::json!({"spec": {"template": {"spec": {"containers": [
            {"name": "app", "image": "evil.example/miner:1"}]}}}});
        let denied = refused(
            deployments
                .patch("api", &merge, &Patch::Strategic(&image))
                .await,
            "an image patch",
        );
        eprintln!("image patch: {} {}", denied.code, denied.message);
        assert_eq!(denied.code, 403);
        assert!(
            denied.message.contains(POLICY)
                && denied.message.contains("only by the rollout annotation"),
            "{}",
            denied.message
        );

        // Pods: the window's do-not-disrupt annotations (server-side apply, as the window
        // controller writes them) go through; a label does not.
        let manager = namespace_field_manager(&ns);
        let pod_uid = Api::<Pod>::namespaced(client.clone(), &ns)
            .get(&pod)
            .await
            .unwrap()
            .metadata
            .uid;
        let annotate = serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod, "namespace": ns, "uid": pod_uid, "annotations": {
                KARPENTER_DO_NOT_DISRUPT: "true", CA_SAFE_TO_EVICT: "false"}}});
        pod_api
            .patch(&pod, &PatchParams::apply(&manager), &Patch::Apply(&annotate))
            .await
            .expect("the pod's do-not-disrupt annotations are allowed");
        let status = refused(
            pod_api
                .patch(&pod, &merge, &Patch::Merge(serde_json::json!({"metadata": {"labels": {"app": "other"}}})))
                .await,
            "a pod label",
        );
        assert!(status.message.contains("labels"), "{}", status.message);
        let status = refused(
            pod_api
                .patch(&pod, &merge, &Patch::Merge(serde_json::json!({"metadata": {"annotations": {"other.io/x": "1"}}})))
                .await,
            "another pod annotation",
        );
        assert!(status.message.contains(POLICY), "{}", status.message);

        // Nodes: the do-not-disrupt annotations go through; a taint does not.
        let annotate = serde_json::json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node, "uid": created.metadata.uid, "annotations": {
                KARPENTER_DO_NOT_DISRUPT: "true", CA_SCALE_DOWN_DISABLED: "true"}}});
        nodes
            .patch(&node, &PatchParams::apply(&manager), &Patch::Apply(&annotate))
            .await
            .expect("the node's do-not-disrupt annotations are allowed");
        let status = refused(
            nodes
                .patch(&node, &merge, &Patch::Merge(serde_json::json!({"spec": {"taints": [
                    {"key": "x", "effect": "NoSchedule"}]}})))
                .await,
            "a node taint",
        );
        assert!(status.message.contains("spec of pods, nodes"), "{}", status.message);
        // Releasing (an empty apply by the same manager) removes them again.
        let release = serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}});
        nodes
            .patch(&node, &PatchParams::apply(&manager), &Patch::Apply(&release))
            .await
            .expect("removing the annotations is allowed");
        // The drain watcher's rollout, exactly as the code builds it, goes through.
        let current = Api::<Deployment>::namespaced(client.clone(), &ns)
            .get("api")
            .await
            .unwrap();
        let target = Target {
            namespace: ns.clone(),
            deployment: "api".into(),
            deployment_uid: current.metadata.uid.clone().unwrap(),
            replica_set: String::new(),
            pod: pod.clone(),
            node: NodeRef {
                name: node.clone(),
                uid: created.metadata.uid.clone().unwrap(),
            },
        };
        let patch = records::patch(&target, &current, jiff::Timestamp::now());
        deployments
            .patch("api", &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&patch))
            .await
            .expect("the rollout patch is allowed");

        // Other Deployment changes: replicas, a template label, an owner reference.
        for (what, patch) in [
            ("replicas", serde_json::json!({"spec": {"replicas": 3}})),
            (
                "a template label",
                serde_json::json!({"spec": {"template": {"metadata": {"labels": {"x": "y"}}}}}),
            ),
            (
                "an owner reference",
                serde_json::json!({"metadata": {"ownerReferences": [{"apiVersion": "v1",
                    "kind": "ConfigMap", "name": "gone", "uid": "00000000-0000-0000-0000-000000000000"}]}}),
            ),
        ] {
            let status = refused(deployments.patch("api", &merge, &Patch::Merge(&patch)).await, what);
            assert!(status.message.contains(POLICY), "{what}: {}", status.message);
        }

    })
    .await;
}

/// `kubectl <args>` as `user` (impersonated by the test's admin), with `stdin`: its exit
/// status and stderr.
fn kubectl_as(user: &str, args: &[&str], stdin: &str) -> (bool, String) {
    let mut child = support::kubectl()
        .arg(format!("--as={user}"))
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A TestWindow manifest; `opened_by` is its `spec.openedBy` (none when null).
fn window_manifest(ns: &str, name: &str, opened_by: serde_json::Value) -> String {
    let mut spec = json!({"selector": {"matchLabels": {"app": "none"}}, "ttl": "10m"});
    if !opened_by.is_null() {
        spec["openedBy"] = opened_by;
    }
    json!({
        "apiVersion": "disruption-guard.io/v1alpha1",
        "kind": "TestWindow",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    })
    .to_string()
}

#[tokio::test]
async fn a_namespace_editor_cannot_forge_who_opened_a_window() {
    support::operator::ensure_crd();
    with_namespace(|client, ns| async move {
        let identity = ChartIdentity::install(&ns);
        service_account_bound_to(&ns, "dev", "edit");
        let dev = format!("system:serviceaccount:{ns}:dev");
        let forged = json!({
            "name": "oidc:https://token.actions.githubusercontent.com#repo:shop/shop:ref:refs/heads/main",
            "issuer": "https://token.actions.githubusercontent.com",
            "repository": "shop/shop",
            "trust": "shop/shop-main",
        });

        // RBAC aggregation (edit gains testwindows) and the policy both take a moment to
        // load: try until the policy is what refuses. A forged window that got in before
        // the policy loaded is deleted and the next try uses another name.
        let mut tries = 0;
        let refusal = wait::for_some(
            "the policy to refuse a forged openedBy",
            Duration::from_secs(30),
            || {
                tries += 1;
                let name = format!("forged-{tries}");
                let manifest = window_manifest(&ns, &name, forged.clone());
                let (ns, dev) = (ns.clone(), dev.clone());
                async move {
                    let (ok, stderr) = kubectl_as(&dev, &["apply", "-f", "-"], &manifest);
                    if ok {
                        let _ = support::kubectl()
                            .args(["delete", "tw", &name, "-n", &ns])
                            .output();
                    }
                    stderr.contains(POLICY).then_some(stderr)
                }
            },
        )
        .await;
        eprintln!("forged create: {refusal}");
        assert!(
            refusal.contains("spec.openedBy is written by the disruption-guard API"),
            "{refusal}"
        );

        // The editor may still create a window without openedBy, and cannot add one later.
        let (ok, stderr) = kubectl_as(
            &dev,
            &["apply", "-f", "-"],
            &window_manifest(&ns, "plain", serde_json::Value::Null),
        );
        assert!(ok, "an editor creates a window without openedBy: {stderr}");
        let patch = json!({"spec": {"openedBy": forged}}).to_string();
        let (ok, stderr) = kubectl_as(
            &dev,
            &[
                "patch", "tw", "plain", "-n", &ns, "--type=merge", "-p", &patch,
            ],
            "",
        );
        assert!(!ok, "openedBy added by a patch went through");
        assert!(
            stderr.contains("spec.openedBy is written once"),
            "{stderr}"
        );

        // The operator's own API, as the chart's ServiceAccount, writes openedBy; after that
        // nobody changes it, not even a cluster admin.
        let op = Operator::start_as(
            &ns,
            vec![format!("--namespaces={ns}"), "--insecure-no-auth".into()],
            identity.kubeconfig.clone(),
        )
        .await;
        let resp = reqwest::Client::new()
            .post(format!("{}/v1/namespaces/{ns}/windows", op.api))
            .json(&json!({"name": "real", "selector": "app=none", "ttl": "10m"}))
            .send()
            .await
            .unwrap();
        let status = resp.status();
        assert!(status.is_success(), "{status} {}", resp.text().await.unwrap());
        let real = Api::<disruption_guard::resources::testwindow::TestWindow>::namespaced(
            client.clone(),
            &ns,
        )
        .get("real")
        .await
        .unwrap();
        assert!(real.spec.opened_by.is_some(), "the API wrote openedBy");
        let changed = refused(
            Api::<disruption_guard::resources::testwindow::TestWindow>::namespaced(
                client.clone(),
                &ns,
            )
            .patch(
                "real",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"openedBy": {"name": "someone-else"}}})),
            )
            .await,
            "a change of openedBy",
        );
        assert_eq!(changed.code, 422, "{}", changed.message);
        assert_nothing_forbidden(&op);
    })
    .await;
}
