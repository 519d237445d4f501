//! Following a pod's owner chain through the caches: its controlling ReplicaSet, and that
//! ReplicaSet's controlling Deployment, each only when the cached object is the one the owner
//! reference names (same uid: a re-created object of the same name is another object).

use std::sync::Arc;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::k8s::references::controller_of;

/// The cached ReplicaSet and Deployment controlling `pod`, as far as the stores know them.
pub fn owner_chain(
    replica_sets: &Store<ReplicaSet>,
    deployments: &Store<Deployment>,
    pod: &Pod,
) -> (Option<Arc<ReplicaSet>>, Option<Arc<Deployment>>) {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let rs = controller_of(&pod.metadata)
        .filter(|o| o.kind == "ReplicaSet")
        .and_then(|o| {
            let rs = replica_sets.get(&ObjectRef::new(&o.name).within(&ns))?;
            (rs.metadata.uid.as_deref() == Some(&o.uid)).then_some(rs)
        });
    let deployment = rs.as_ref().and_then(|rs| {
        let o = controller_of(&rs.metadata).filter(|o| o.kind == "Deployment")?;
        let d = deployments.get(&ObjectRef::new(&o.name).within(&ns))?;
        (d.metadata.uid.as_deref() == Some(&o.uid)).then_some(d)
    });
    (rs, deployment)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    use crate::testing::store;

    fn owned_by(kind: &str, name: &str, uid: &str) -> serde_json::Value {
        json!([{"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": uid,
            "controller": true}])
    }

    #[test]
    fn the_chain_is_followed_only_through_the_objects_the_references_name() {
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p",
            "namespace": "ns", "ownerReferences": owned_by("ReplicaSet", "rs", "rs-uid")}}))
        .unwrap();
        let replica_sets = store(vec![json!({"metadata": {"name": "rs", "namespace": "ns",
            "uid": "rs-uid", "ownerReferences": owned_by("Deployment", "d", "d-uid")}})]);
        let deployments = store(vec![json!({"metadata": {"name": "d", "namespace": "ns",
            "uid": "d-uid"}})]);
        let (rs, d) = owner_chain(&replica_sets, &deployments, &pod);
        assert!(rs.is_some() && d.is_some());
        let recreated = store(vec![json!({"metadata": {"name": "d", "namespace": "ns",
            "uid": "new-uid"}})]);
        let (rs, d) = owner_chain(&replica_sets, &recreated, &pod);
        assert!(rs.is_some() && d.is_none());
    }
}
