//! Builders for the objects integration tests create: `deployment("api").replicas(1).build()`.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde_json::{Value, json};

/// A Deployment builder; pods get the label `app=<name>` and tolerate nothing special.
pub struct DeploymentBuilder {
    name: String,
    replicas: i32,
    labels: BTreeMap<String, String>,
    node_selector: BTreeMap<String, String>,
    strategy: Value,
    paused: bool,
    annotations: BTreeMap<String, String>,
    pod_annotations: BTreeMap<String, String>,
}

/// Starts a Deployment named `name` with one replica.
pub fn deployment(name: &str) -> DeploymentBuilder {
    DeploymentBuilder {
        name: name.to_string(),
        replicas: 1,
        labels: BTreeMap::from([("app".to_string(), name.to_string())]),
        node_selector: BTreeMap::new(),
        strategy: json!({"type": "RollingUpdate"}),
        paused: false,
        annotations: BTreeMap::new(),
        pod_annotations: BTreeMap::new(),
    }
}

impl DeploymentBuilder {
    pub fn replicas(mut self, replicas: i32) -> Self {
        self.replicas = replicas;
        self
    }

    /// Adds a label to the pod template (the selector stays `app=<name>`).
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// Pins the pods to nodes with this label.
    pub fn node_selector(mut self, key: &str, value: &str) -> Self {
        self.node_selector.insert(key.into(), value.into());
        self
    }

    pub fn recreate(mut self) -> Self {
        self.strategy = json!({"type": "Recreate"});
        self
    }

    pub fn rolling(mut self, max_surge: Value, max_unavailable: Value) -> Self {
        self.strategy = json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": max_surge, "maxUnavailable": max_unavailable}});
        self
    }

    pub fn paused(mut self) -> Self {
        self.paused = true;
        self
    }

    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.annotations.insert(key.into(), value.into());
        self
    }

    /// Its pods become Ready `delay` (e.g. `"1s"`) after they start, like a container that takes
    /// time to start (the test cluster's kwok stage reads the annotation).
    pub fn starts_in(mut self, delay: &str) -> Self {
        self.pod_annotations
            .insert("pod-ready.stage.kwok.x-k8s.io/delay".into(), delay.into());
        self
    }

    pub fn build(self) -> Deployment {
        serde_json::from_value(json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": self.name, "annotations": self.annotations},
            "spec": {
                "replicas": self.replicas,
                "paused": self.paused,
                "strategy": self.strategy,
                "selector": {"matchLabels": {"app": self.name}},
                "template": {
                    "metadata": {"labels": self.labels, "annotations": self.pod_annotations},
                    "spec": {
                        "nodeSelector": self.node_selector,
                        "terminationGracePeriodSeconds": 0,
                        "containers": [{"name": "app", "image": "registry.invalid/app:1"}]
                    }
                }
            }
        }))
        .expect("deployment fixture")
    }
}

/// A PDB over `app=<app>` with `maxUnavailable: 0`.
pub fn pdb_max_unavailable_zero(name: &str, app: &str) -> PodDisruptionBudget {
    serde_json::from_value(json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": app}}}
    }))
    .expect("pdb fixture")
}

/// A fake node that kwok manages and makes Ready, labelled `disruption-guard.io/test-node=<name>`
/// and owned (for clean-up) by the test namespace `ns`.
pub fn kwok_node(name: &str, ns: &str) -> Node {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                "disruption-guard.io/test-node": name,
                super::TEST_NAMESPACE_LABEL: ns
            }
        },
        "status": {
            "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
            "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"}
        }
    }))
    .expect("node fixture")
}
