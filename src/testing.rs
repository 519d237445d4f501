//! Helpers the unit tests of several layers share (compiled for tests only): the metrics a
//! component registers, encoded as Prometheus scrapes them, the API server's answers as kube
//! returns them, caches filled with objects, and the AdmissionReviews it sends.

use prometheus_client::registry::Registry;

/// `registry` in the OpenMetrics text format.
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, registry).expect("writing to a String");
    out
}

/// What `register` adds to a fresh registry with the operator's prefix (`disruption_guard`),
/// encoded.
pub fn encode_registered(register: impl FnOnce(&mut Registry)) -> String {
    let mut registry = Registry::with_prefix("disruption_guard");
    register(&mut registry);
    encode(&registry)
}

/// An answer of the API server with HTTP `code`, as kube returns it.
pub fn api_error(code: u16) -> kube::Error {
    let status: kube::core::Status = serde_json::from_value(serde_json::json!({
        "status": "Failure", "reason": "Refused", "code": code, "message": "refused"
    }))
    .unwrap();
    kube::Error::Api(Box::new(status))
}

/// A reflector store holding `objects`, as a watch would have filled it.
pub fn store<K>(objects: Vec<serde_json::Value>) -> kube::runtime::reflector::Store<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + 'static,
{
    use kube::runtime::{reflector, watcher};
    let (store, mut writer) = reflector::store();
    for o in objects {
        writer.apply_watcher_event(&watcher::Event::Apply(serde_json::from_value(o).unwrap()));
    }
    store
}

/// The uid of every AdmissionReview [`eviction_review`] makes.
pub const REVIEW_UID: &str = "705ab4f5-6393-11e8-b7cc-42010a800002";

/// An AdmissionReview of an Eviction of pod `name` in `ns`, as the API server sends it.
pub fn eviction_review(
    version: &str,
    name: &str,
    delete_options: serde_json::Value,
    dry_run: bool,
) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": REVIEW_UID,
            "kind": {"group": "policy", "version": version, "kind": "Eviction"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "subResource": "eviction",
            "requestKind": {"group": "policy", "version": version, "kind": "Eviction"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "requestSubResource": "eviction",
            "name": name, "namespace": "ns", "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:karpenter:karpenter",
                "groups": ["system:serviceaccounts", "system:authenticated"]},
            "object": {"apiVersion": format!("policy/{version}"), "kind": "Eviction",
                "metadata": {"name": name, "namespace": "ns", "creationTimestamp": null},
                "deleteOptions": delete_options},
            "oldObject": null,
            "dryRun": dry_run,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}
        }
    }))
    .unwrap()
}
