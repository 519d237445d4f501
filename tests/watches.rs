//! The operator's load on the API server, counted by the API server itself: it holds exactly
//! one watch of each kind it caches, however many of its parts read that kind, and watches
//! pods only where they matter: one watch per namespace that has a window, one per node being
//! disrupted, none for the rest of the cluster.
//!
//! Counted with the API server's own gauge `apiserver_longrunning_requests{verb="WATCH"}`,
//! per resource, with the operator running minus without it. This file holds one test, so no
//! other operator of the test suite starts or stops meanwhile; the cluster's own components
//! keep their watches open (they re-open each one every 5–10 minutes, for milliseconds), once
//! they settled after the last change of the TestWindow CRD.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use disruption_guard::resources::TestWindow;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;
use support::operator::{Operator, ensure_crd};
use support::windows::{open, until_ready, window};
use support::{create_ready_node, wait, with_namespace};

/// Open watches per resource, as the API server counts them.
async fn open_watches(client: &Client) -> BTreeMap<String, i64> {
    let request = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = client
        .request_text(request)
        .await
        .expect("the API server's metrics");
    let mut counts = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_longrunning_requests{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        if !labels.contains("verb=\"WATCH\"") {
            continue;
        }
        let resource = labels
            .split(',')
            .find_map(|l| l.strip_prefix("resource=\""))
            .map(|r| r.trim_end_matches('"').to_string())
            .unwrap_or_default();
        *counts.entry(resource).or_insert(0) += value.trim().parse::<f64>().unwrap() as i64;
    }
    counts
}

fn difference(
    with: &BTreeMap<String, i64>,
    without: &BTreeMap<String, i64>,
) -> BTreeMap<String, i64> {
    with.keys()
        .chain(without.keys())
        .map(|r| {
            let d = with.get(r).unwrap_or(&0) - without.get(r).unwrap_or(&0);
            (r.clone(), d)
        })
        .filter(|(_, d)| *d != 0)
        .collect()
}

/// How long after a change of a CRD the cluster's own controllers (garbage collector, quota)
/// may still close and re-open their watch of its resource: they find resources by discovery,
/// every 30 s.
const CRD_SETTLES: Duration = Duration::from_secs(40);

/// Waits until the TestWindow CRD has been unchanged for [`CRD_SETTLES`]: a test binary that
/// ran just before may have replaced or re-created it (`tests/uninstall.rs`,
/// `tests/older_crd.rs`), and the cluster's watches of `testwindows` move meanwhile.
async fn until_the_crd_settled(client: &Client) {
    ensure_crd();
    let crd = Api::<CustomResourceDefinition>::all(client.clone())
        .get("testwindows.disruption-guard.io")
        .await
        .expect("the TestWindow CRD");
    let changed = crd
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.time.as_ref())
        .map(|t| t.0)
        .max()
        .expect("a time in the CRD's managedFields");
    let since =
        Duration::try_from(jiff::Timestamp::now().duration_since(changed)).unwrap_or_default();
    if since < CRD_SETTLES {
        let left = CRD_SETTLES - since;
        eprintln!(
            "the TestWindow CRD changed {since:?} ago: waiting {left:?} for the cluster's watches"
        );
        tokio::time::sleep(left).await;
    }
}

/// Nodes of the cluster the operator counts as being disrupted with its default signals
/// (cordoned, tainted by Karpenter or Cluster Autoscaler, or being deleted): each has its pods
/// watched.
async fn disrupted_nodes(client: &Client) -> i64 {
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    nodes
        .items
        .iter()
        .filter(|n| {
            let spec = n.spec.as_ref();
            n.metadata.deletion_timestamp.is_some()
                || spec.and_then(|s| s.unschedulable).unwrap_or(false)
                || spec.and_then(|s| s.taints.as_ref()).is_some_and(|taints| {
                    taints.iter().any(|t| {
                        t.key == "karpenter.sh/disrupted"
                            || t.key == "ToBeDeletedByClusterAutoscaler"
                    })
                })
        })
        .count() as i64
}

#[tokio::test]
async fn the_operator_holds_one_watch_of_each_kind_it_caches_and_of_pods_only_where_they_matter() {
    with_namespace(|client, ns| async move {
        until_the_crd_settled(&client).await;
        let without = open_watches(&client).await;
        let mut op = Operator::start(&ns, &[]).await;
        let shared = [
            "nodes",
            "replicasets",
            "deployments",
            "poddisruptionbudgets",
        ];
        // Ready means every cache has listed; the watches follow their lists at once.
        wait::until(
            "the operator's watches to be open",
            Duration::from_secs(10),
            || async {
                let delta = difference(&open_watches(&client).await, &without);
                shared
                    .iter()
                    .all(|r| delta.get(*r).copied().unwrap_or(0) >= 1)
            },
        )
        .await;
        let with = open_watches(&client).await;
        let delta = difference(&with, &without);
        eprintln!("watches the operator holds, by resource: {delta:?}");
        for resource in shared.iter().chain(&["testwindows", "statefulsets"]) {
            assert_eq!(
                delta.get(*resource).copied(),
                Some(1),
                "{resource}: the operator's watches {delta:?}"
            );
        }
        for (resource, count) in delta.iter().filter(|(r, _)| *r != "pods") {
            assert_eq!(*count, 1, "{resource} is watched {count} times: {delta:?}");
        }
        // Pods: one watch per node of the cluster being disrupted, one per namespace with a
        // window, none for the rest. The disrupted nodes are counted afresh each time: nodes
        // Karpenter is still removing after earlier tests come and go meanwhile.
        let pod_watches = |namespaces: i64, what: &'static str| {
            let (client, without) = (client.clone(), without.clone());
            async move {
                wait::until(what, Duration::from_secs(10), || async {
                    let delta = difference(&open_watches(&client).await, &without);
                    let nodes = disrupted_nodes(&client).await;
                    delta.get("pods").copied().unwrap_or(0) == nodes + namespaces
                })
                .await;
            }
        };
        pod_watches(0, "a pod watch for each disrupted node and no other").await;
        // A window: the pods of its namespace.
        open(&client, &ns, &window("w", "api", "10m", json!({}))).await;
        pod_watches(1, "a pod watch for the window's namespace").await;
        // A second window in the same namespace: the same watch.
        open(&client, &ns, &window("w2", "web", "10m", json!({}))).await;
        until_ready(&client, &ns, "w2", Duration::from_secs(10)).await;
        pod_watches(1, "still one pod watch for the namespace").await;

        // A cordoned node: its pods, while it is cordoned.
        let node = format!("{ns}-n");
        create_ready_node(&client, &ns, &node).await;
        let nodes: Api<Node> = Api::all(client.clone());
        let cordon = |on: bool| {
            let nodes = nodes.clone();
            let node = node.clone();
            async move {
                nodes
                    .patch(
                        &node,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"spec": {"unschedulable": on}})),
                    )
                    .await
                    .unwrap();
            }
        };
        cordon(true).await;
        pod_watches(1, "a pod watch for the cordoned node").await;
        cordon(false).await;
        pod_watches(1, "the node's pod watch gone once uncordoned").await;

        // The namespace's last window gone: its pod watch goes too.
        let windows: Api<TestWindow> = Api::namespaced(client.clone(), &ns);
        for name in ["w", "w2"] {
            windows
                .delete(name, &DeleteParams::default())
                .await
                .unwrap();
        }
        wait::until(
            "the windows to be gone",
            Duration::from_secs(20),
            || async {
                windows
                    .list(&ListParams::default())
                    .await
                    .unwrap()
                    .items
                    .is_empty()
            },
        )
        .await;
        pod_watches(0, "no pod watch once the namespace has no window").await;
        op.kill();
        nodes.delete(&node, &DeleteParams::default()).await.unwrap();
    })
    .await;
}
