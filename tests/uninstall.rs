//! Uninstalling leaves nothing behind: with a window open (a PDB, annotations on its pod and
//! node) and the eviction webhook on (its registration, its certificate Secret), the
//! documented uninstall — delete every TestWindow while the operator runs, `helm uninstall`,
//! delete both CRDs — leaves no guard PDB, no guard annotation or field manager on any pod or
//! node, no webhook registration or Secret, and none of the chart's cluster-wide objects.
//!
//! Its own test binary: it deletes the CRD, which other tests of the same process rely on
//! (test binaries run one after another; the next one installs the CRD again).

mod support;

use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use kube::api::{ListParams, PostParams};
use support::chart_identity::ChartIdentity;
use support::fixtures::deployment;
use support::operator::Operator;
use support::pods::ready_pods;
use support::windows::{
    DND, SAFE_TO_EVICT, SCALE_DOWN_DISABLED, guard_managers, open, protected, until_ready, window,
};
use support::{create_ready_node, wait, with_namespace};

const CRD: &str = "customresourcedefinition/testwindows.disruption-guard.io";
const CITRUST_CRD: &str = "customresourcedefinition/citrusts.disruption-guard.io";

fn helm(args: &[&str]) {
    let out = Command::new(support::cached_tool("helm-v", "helm"))
        .args(args)
        .env("KUBECONFIG", support::kubeconfig())
        .output()
        .expect("running helm");
    assert!(
        out.status.success(),
        "helm {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs kubectl and fails the test with its stderr unless it succeeds.
fn kubectl_ok(args: &[&str]) {
    let out = support::kubectl()
        .args(args)
        .output()
        .expect("running kubectl");
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

/// Whether `kubectl get` finds the object.
fn kubectl_finds(args: &[&str]) -> bool {
    support::kubectl()
        .arg("get")
        .args(args)
        .output()
        .expect("running kubectl")
        .status
        .success()
}

/// Guard traces anywhere in the cluster: PDBs labelled as ours, and pods or nodes that carry a
/// guard field manager or one of the annotations only the guard sets in this cluster.
async fn traces(client: &kube::Client) -> Vec<String> {
    let mut found = Vec::new();
    let ours = ListParams::default().labels("app.kubernetes.io/managed-by=disruption-guard");
    for pdb in Api::<PodDisruptionBudget>::all(client.clone())
        .list(&ours)
        .await
        .unwrap()
    {
        found.push(format!("PDB {:?}", pdb.metadata.name));
    }
    let guard_keys = [DND, SAFE_TO_EVICT, SCALE_DOWN_DISABLED];
    let marked = |meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        !guard_managers(meta).is_empty()
            || meta
                .annotations
                .iter()
                .flatten()
                .any(|(k, _)| guard_keys.contains(&k.as_str()))
    };
    for pod in Api::<Pod>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
    {
        if marked(&pod.metadata) {
            found.push(format!("pod {:?}", pod.metadata.name));
        }
    }
    for node in Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
    {
        if marked(&node.metadata) {
            found.push(format!("node {:?}", node.metadata.name));
        }
    }
    found
}

#[tokio::test]
async fn helm_uninstall_and_crd_removal_leave_no_pdb_and_no_guard_annotation() {
    with_namespace(|client, ns| async move {
        support::operator::ensure_crd();
        let release = format!("guard-{}", &ns[ns.len() - 8..]);
        let chart = support::repo_root().join("charts/disruption-guard");
        // --take-ownership: the CRD is already installed (by ensure_crd, as by a user who
        // applied it before installing the chart).
        helm(&[
            "install",
            &release,
            "--namespace",
            &ns,
            "--take-ownership",
            chart.to_str().unwrap(),
        ]);

        // The chart's pods cannot run here (no container runtime): the operator runs as a
        // local process with the chart's ServiceAccount, cluster-wide like the chart's default,
        // with the eviction webhook on as the chart runs it (its registration is the chart's).
        let identity = ChartIdentity::of_release(&ns, &release);
        let fullname = identity.fullname.clone();
        let secret = format!("{fullname}-webhook-tls");
        let mut operator = Operator::start_as(
            &ns,
            vec![
                "--insecure-no-auth".into(),
                "--intercept=true".into(),
                format!("--intercept-namespace={ns}"),
                format!("--intercept-webhook={fullname}"),
                format!("--intercept-secret={secret}"),
            ],
            identity.kubeconfig.clone(),
        )
        .await;
        wait::until(
            "the operator to publish its CA in the chart's webhook registration",
            Duration::from_secs(30),
            || async {
                operator
                    .log_text()
                    .contains("eviction webhook registered and serving")
            },
        )
        .await;
        assert!(
            kubectl_finds(&["secret", &secret, "-n", &ns]),
            "the webhook's Secret exists"
        );

        let node = format!("{ns}-n");
        create_ready_node(&client, &ns, &node).await;
        let d = deployment("app")
            .node_selector("disruption-guard.io/test-node", &node)
            .build();
        Api::<Deployment>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &d)
            .await
            .unwrap();
        let pod = wait::for_some("the pod to be Ready", Duration::from_secs(60), || async {
            ready_pods(&client, &ns, "app").await.pop()
        })
        .await;
        let pod = pod.metadata.name.unwrap();
        open(
            &client,
            &ns,
            &window("ci", "app", "30m", serde_json::json!({})),
        )
        .await;
        until_ready(&client, &ns, "ci", Duration::from_secs(30)).await;
        assert!(protected(&client, &ns, &pod, &node).await);
        assert!(
            !traces(&client).await.is_empty(),
            "the open window left traces to remove"
        );

        // 1. Delete every window while the operator runs: its finalizer releases them.
        kubectl_ok(&[
            "delete",
            "testwindows",
            "--all",
            "--all-namespaces",
            "--wait",
            "--timeout=60s",
        ]);
        // 2. helm uninstall (here: stop the local operator process, then uninstall the release).
        operator.stop();
        helm(&["uninstall", &release, "--namespace", &ns, "--wait"]);
        // 3. Delete both CRDs (the chart keeps them on uninstall: crds.keep).
        kubectl_ok(&["delete", CRD, CITRUST_CRD, "--wait", "--timeout=60s"]);

        wait::until_empty(
            "garbage collection of the window's PDB, and no other guard trace",
            Duration::from_secs(30),
            || traces(&client),
        )
        .await;
        for crd in [CRD, CITRUST_CRD] {
            assert!(
                !kubectl_finds(&[crd]),
                "{crd} is gone (kubectl get finds nothing)"
            );
        }
        for kind in [
            "clusterrole",
            "clusterrolebinding",
            "validatingwebhookconfiguration",
            "validatingadmissionpolicy",
            "validatingadmissionpolicybinding",
        ] {
            assert!(
                !kubectl_finds(&[kind, &fullname]),
                "{kind} {fullname} is removed by helm uninstall"
            );
        }
        wait::until(
            "garbage collection of the webhook's Secret (owned by the registration)",
            Duration::from_secs(30),
            || async { !kubectl_finds(&["secret", &secret, "-n", &ns]) },
        )
        .await;
        let selector = format!("app.kubernetes.io/instance={release}");
        let kinds = "all,pdb,role,rolebinding,serviceaccount,configmap,secret,networkpolicy";
        wait::until(
            "every object of the release in its namespace to go",
            Duration::from_secs(60),
            || async {
                let left = support::kubectl()
                    .args(["get", kinds, "-n", &ns, "-l", &selector, "-o", "name"])
                    .output()
                    .unwrap();
                left.status.success() && left.stdout.iter().all(u8::is_ascii_whitespace)
            },
        )
        .await;
    })
    .await;
}
