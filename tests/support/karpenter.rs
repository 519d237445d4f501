//! Helpers of the tests that run with the real Karpenter (`tests/cluster/up --with-karpenter`):
//! its presence, its nodes, and its NodeClaims.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Node;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::{Api, Client};

use super::wait;

/// Fails the test, saying how to start Karpenter, when its NodePool `default` is missing.
pub fn require() {
    let karpenter = super::kubectl()
        .args(["get", "nodepool", "default"])
        .output()
        .unwrap();
    assert!(
        karpenter.status.success(),
        "Karpenter is not running in this cluster: start it with tests/cluster/up --with-karpenter"
    );
}

/// Names of the NodePool's nodes that are not being deleted.
pub async fn node_names(client: &Client) -> BTreeSet<String> {
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .list(&ListParams::default().labels("karpenter.sh/nodepool=default"))
        .await
        .map(|l| {
            l.items
                .into_iter()
                .filter(|n| n.metadata.deletion_timestamp.is_none())
                .filter_map(|n| n.metadata.name)
                .collect()
        })
        .unwrap_or_default()
}

/// Waits until Karpenter has removed every node of the pool (nodes of an earlier test must
/// not host this one).
pub async fn until_no_nodes(client: &Client) {
    wait::until(
        "Karpenter to remove leftover nodes",
        Duration::from_secs(180),
        || async { node_names(client).await.is_empty() },
    )
    .await;
}

/// Karpenter's NodeClaims.
pub fn node_claims(client: &Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("karpenter.sh", "v1", "NodeClaim");
    Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk))
}

/// The nodes tainted `karpenter.sh/disrupted`: being drained.
pub async fn tainted(client: &Client) -> BTreeSet<String> {
    let nodes: Api<Node> = Api::all(client.clone());
    let Ok(nodes) = nodes.list(&ListParams::default()).await else {
        return BTreeSet::new();
    };
    nodes
        .items
        .into_iter()
        .filter(|n| {
            n.spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|t| t.iter().any(|t| t.key == "karpenter.sh/disrupted"))
        })
        .filter_map(|n| n.metadata.name)
        .collect()
}

/// The nodes Karpenter could disrupt now, seen from outside the operator: those whose
/// NodeClaim says `Consolidatable`, and those it has tainted `karpenter.sh/disrupted`.
pub async fn candidates(client: &Client) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    if let Ok(claims) = node_claims(client).list(&ListParams::default()).await {
        for claim in claims.items {
            let consolidatable = claim.data["status"]["conditions"]
                .as_array()
                .is_some_and(|c| {
                    c.iter()
                        .any(|c| c["type"] == "Consolidatable" && c["status"] == "True")
                });
            if let (true, Some(node)) = (consolidatable, claim.data["status"]["nodeName"].as_str())
            {
                out.insert(node.to_string());
            }
        }
    }
    out.extend(tainted(client).await);
    out
}

/// The name of the NodeClaim whose node is `node`.
pub async fn node_claim_of(client: &Client, node: &str) -> Option<String> {
    let claims = node_claims(client)
        .list(&ListParams::default())
        .await
        .ok()?;
    claims
        .items
        .into_iter()
        .find(|c| c.data["status"]["nodeName"].as_str() == Some(node))
        .and_then(|c| c.metadata.name)
}

/// `api`: one replica needing most of a small node (1.5 CPU) of the NodePool's `c` family,
/// Ready 3 s after it starts; its node is Karpenter's alone.
pub fn lone_app() -> Deployment {
    app("api", "1500m", serde_json::json!({}))
}

/// `anchor`: one replica of 2.1 CPU that Karpenter may not disrupt (`karpenter.sh/do-not-disrupt`),
/// so its node is the bigger `c` kind (4 CPU) with room for `api` beside it, and Karpenter
/// never picks that node for consolidation.
pub fn anchor() -> Deployment {
    app(
        "anchor",
        "2100m",
        serde_json::json!({"karpenter.sh/do-not-disrupt": "true"}),
    )
}

/// One replica of `cpu` on the NodePool's `c` family, Ready 3 s after it starts, with extra
/// pod annotations.
fn app(name: &str, cpu: &str, annotations: serde_json::Value) -> Deployment {
    let mut pod_annotations = serde_json::json!({"pod-ready.stage.kwok.x-k8s.io/delay": "3s"});
    pod_annotations
        .as_object_mut()
        .unwrap()
        .extend(annotations.as_object().unwrap().clone());
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}, "annotations": pod_annotations},
                "spec": {
                    "nodeSelector": {"karpenter.sh/nodepool": "default", "karpenter.kwok.sh/instance-family": "c"},
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "app", "image": format!("registry.invalid/{name}:1"),
                                    "resources": {"requests": {"cpu": cpu, "memory": "512Mi"}}}]
                }
            }
        }
    }))
    .unwrap()
}
