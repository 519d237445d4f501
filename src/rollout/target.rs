//! What a rollout is for, as data: the disrupted node ([`NodeRef`]) and the Deployment with the
//! chain to the pod that should move ([`Target`]).

use k8s_openapi::api::core::v1::ObjectReference;

/// The node whose disruption is being handled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRef {
    /// Node name.
    pub name: String,
    /// Node uid (a node re-created with the same name is another node).
    pub uid: String,
}

impl NodeRef {
    /// The value of the Deployment annotation recording a rollout for this node.
    pub fn marker(&self) -> String {
        format!("{}/{}", self.name, self.uid)
    }

    /// A reference to the node, for an Event.
    pub fn reference(&self) -> ObjectReference {
        ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(self.name.clone()),
            uid: Some(self.uid.clone()),
            ..Default::default()
        }
    }
}

/// A rollout to make: the Deployment, the chain to the pod it should move, and the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Namespace of the Deployment and the pod.
    pub namespace: String,
    /// Deployment name.
    pub deployment: String,
    /// Deployment uid.
    pub deployment_uid: String,
    /// The ReplicaSet between the pod and the Deployment.
    pub replica_set: String,
    /// The pod that should move.
    pub pod: String,
    /// The disrupted node.
    pub node: NodeRef,
}

impl Target {
    /// A reference to the Deployment, for an Event.
    pub fn deployment_reference(&self) -> ObjectReference {
        ObjectReference {
            api_version: Some("apps/v1".into()),
            kind: Some("Deployment".into()),
            name: Some(self.deployment.clone()),
            namespace: Some(self.namespace.clone()),
            uid: Some(self.deployment_uid.clone()),
            ..Default::default()
        }
    }
}
