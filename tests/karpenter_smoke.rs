//! Smoke test of the real Karpenter (KWOK provider) in the test cluster: it provisions a node
//! for a pod that fits nowhere else and consolidates the node away once it is empty.
//! Needs the cluster from `tests/cluster/up --with-karpenter` (what `make test` starts).

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use serde_json::json;
use support::{wait, with_namespace};

#[tokio::test]
async fn karpenter_provisions_a_node_for_a_pending_pod_and_removes_it_once_empty() {
    with_namespace(|client, ns| async move {
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let nodes: Api<Node> = Api::all(client.clone());
        let app: Deployment = serde_json::from_value(json!({
            "metadata": {"name": "needs-a-node"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "needs-a-node"}},
                "template": {
                    "metadata": {"labels": {"app": "needs-a-node"}},
                    "spec": {
                        "nodeSelector": {"karpenter.sh/nodepool": "default"},
                        "terminationGracePeriodSeconds": 0,
                        "containers": [{"name": "app", "image": "registry.invalid/app:1",
                                        "resources": {"requests": {"cpu": "3", "memory": "1Gi"}}}]
                    }
                }
            }
        }))
        .unwrap();
        let karpenter = support::kubectl().args(["get", "nodepool", "default"]).output().unwrap();
        assert!(
            karpenter.status.success(),
            "Karpenter is not running in this cluster: start it with tests/cluster/up --with-karpenter"
        );
        let started = Instant::now();
        deployments.create(&PostParams::default(), &app).await.unwrap();

        let node_name = wait::for_some("Karpenter to provision a node and the pod to run", Duration::from_secs(90), || async {
            let list = pods.list(&ListParams::default().labels("app=needs-a-node")).await.ok()?;
            let pod = list.items.into_iter().next()?;
            support::pods::is_ready(&pod).then(|| pod.spec?.node_name).flatten()
        })
        .await;
        let provisioned = started.elapsed();
        let node = nodes.get(&node_name).await.unwrap();
        let labels = node.metadata.labels.unwrap_or_default();
        assert_eq!(labels.get("karpenter.sh/nodepool").map(String::as_str), Some("default"));
        assert!(labels.contains_key("karpenter.kwok.sh/instance-family"), "a KWOK instance type: {labels:?}");

        deployments.delete("needs-a-node", &DeleteParams::background()).await.unwrap();
        let emptied = Instant::now();
        wait::until("Karpenter to consolidate the empty node away", Duration::from_secs(180), || async {
            nodes.get_opt(&node_name).await.unwrap().is_none()
        })
        .await;
        eprintln!(
            "karpenter: pod Ready on a new node after {provisioned:?}; empty node removed after {:?}",
            emptied.elapsed()
        );
    })
    .await;
}
