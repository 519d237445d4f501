//! Helpers for window tests: TestWindow builders, waiting for Ready, and checks that no trace
//! of the guard is left on pods, nodes and PDBs.

use std::time::Duration;

use disruption_guard::resources::TestWindow;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{EvictParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

use super::fixtures::deployment;
use super::pods::ready_pod;
use super::{create_ready_node, wait};

pub const DND: &str = "karpenter.sh/do-not-disrupt";
pub const SAFE_TO_EVICT: &str = "cluster-autoscaler.kubernetes.io/safe-to-evict";
pub const SCALE_DOWN_DISABLED: &str = "cluster-autoscaler.kubernetes.io/scale-down-disabled";

/// A TestWindow over `app=<app>` with `ttl`, plus extra spec fields merged in.
pub fn window(name: &str, app: &str, ttl: &str, extra: Value) -> TestWindow {
    let mut spec = json!({"selector": {"matchLabels": {"app": app}}, "ttl": ttl, "reason": "test"});
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    serde_json::from_value(json!({
        "apiVersion": "disruption-guard.io/v1alpha1",
        "kind": "TestWindow",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .expect("window fixture")
}

/// Creates a window and returns it.
pub async fn open(client: &Client, ns: &str, window: &TestWindow) -> TestWindow {
    Api::<TestWindow>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), window)
        .await
        .expect("creating a TestWindow")
}

/// Whether the window's Ready condition is True.
pub fn is_ready(w: &TestWindow) -> bool {
    w.status.as_ref().is_some_and(|s| s.is_ready())
}

/// Whether the window has ended and its status says its protection is gone.
pub fn is_released(w: &TestWindow) -> bool {
    w.status.as_ref().is_some_and(|s| s.is_released())
}

/// Waits until the window's status says it ended and released its protection.
pub async fn until_status_released(
    client: &Client,
    ns: &str,
    name: &str,
    limit: Duration,
) -> TestWindow {
    let api = Api::<TestWindow>::namespaced(client.clone(), ns);
    wait::for_some("the window's status to say released", limit, || async {
        api.get(name).await.ok().filter(is_released)
    })
    .await
}

/// The resourceVersion of the first write to the object `name`, after version `from`, that
/// leaves it in a state where `holds` is true. On the test cluster (one etcd) a resourceVersion
/// is the store's global revision, so the versions of two objects order their writes: this is
/// how a test checks which of two writes the operator made first. Kubernetes does not promise
/// this in general; only tests rely on it.
pub async fn first_version_where<K>(
    api: Api<K>,
    name: String,
    from: String,
    holds: impl Fn(&K) -> bool,
) -> u64
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    use futures::{StreamExt, TryStreamExt};
    use kube::api::{WatchEvent, WatchParams};
    let params = WatchParams::default().fields(&format!("metadata.name={name}"));
    let mut events = api.watch(&params, &from).await.expect("watching").boxed();
    while let Some(event) = events.try_next().await.expect("a watch event") {
        match event {
            WatchEvent::Added(o) | WatchEvent::Modified(o) if holds(&o) => {
                let version = o.meta().resource_version.as_deref().unwrap_or_default();
                return version.parse().expect("a numeric resourceVersion");
            }
            WatchEvent::Error(e) => panic!("watching {name}: {e:?}"),
            _ => {}
        }
    }
    panic!("the watch of {name} ended");
}

/// Waits until the window is Ready.
pub async fn until_ready(client: &Client, ns: &str, name: &str, limit: Duration) -> TestWindow {
    let api = Api::<TestWindow>::namespaced(client.clone(), ns);
    wait::for_some("the window to become Ready", limit, || async {
        api.get(name).await.ok().filter(is_ready)
    })
    .await
}

/// Sets `spec.closed = true`.
pub async fn close(client: &Client, ns: &str, name: &str) {
    Api::<TestWindow>::namespaced(client.clone(), ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"closed": true}})),
        )
        .await
        .expect("closing the window");
}

/// Sets an annotation the way a person would (`kubectl annotate`).
pub async fn annotate_as_person<K>(api: &Api<K>, name: &str, key: &str, value: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = PatchParams {
        field_manager: Some("kubectl-annotate".into()),
        ..Default::default()
    };
    api.patch(
        name,
        &params,
        &Patch::Merge(json!({"metadata": {"annotations": {key: value}}})),
    )
    .await
    .expect("annotating as a person");
}

/// The value of an annotation.
pub fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

/// Field managers of the guard's windows on an object.
pub fn guard_managers(meta: &ObjectMeta) -> Vec<String> {
    meta.managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.clone())
        .filter(|m| m.starts_with("disruption-guard/"))
        .collect()
}

/// Whether a pod and its node carry the guard's full protection.
pub async fn protected(client: &Client, ns: &str, pod: &str, node: &str) -> bool {
    let Ok(p) = Api::<Pod>::namespaced(client.clone(), ns).get(pod).await else {
        return false;
    };
    let Ok(n) = Api::<Node>::all(client.clone()).get(node).await else {
        return false;
    };
    annotation(&p.metadata, DND) == Some("true")
        && annotation(&p.metadata, SAFE_TO_EVICT) == Some("false")
        && annotation(&n.metadata, DND) == Some("true")
        && annotation(&n.metadata, SCALE_DOWN_DISABLED) == Some("true")
}

/// Guard PDBs (labelled as the operator's) in the namespace.
pub async fn guard_pdbs(client: &Client, ns: &str) -> Vec<PodDisruptionBudget> {
    Api::<PodDisruptionBudget>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels("app.kubernetes.io/managed-by=disruption-guard"))
        .await
        .expect("listing PDBs")
        .items
}

/// What of the guard is left on the pod, its node and the namespace: guard PDBs, guard field
/// managers and the annotations only the guard sets here (empty: nothing).
pub async fn traces(client: &Client, ns: &str, pod: &str, node: &str) -> Vec<String> {
    let p = Api::<Pod>::namespaced(client.clone(), ns)
        .get(pod)
        .await
        .expect("pod");
    let n = Api::<Node>::all(client.clone())
        .get(node)
        .await
        .expect("node");
    let mut left: Vec<String> = guard_pdbs(client, ns)
        .await
        .into_iter()
        .map(|p| format!("PDB {}", p.metadata.name.unwrap_or_default()))
        .collect();
    left.extend(
        guard_managers(&p.metadata)
            .into_iter()
            .map(|m| format!("pod manager {m}")),
    );
    left.extend(
        guard_managers(&n.metadata)
            .into_iter()
            .map(|m| format!("node manager {m}")),
    );
    if annotation(&p.metadata, SAFE_TO_EVICT).is_some() {
        left.push(format!("pod annotation {SAFE_TO_EVICT}"));
    }
    if annotation(&n.metadata, SCALE_DOWN_DISABLED).is_some() {
        left.push(format!("node annotation {SCALE_DOWN_DISABLED}"));
    }
    left
}

/// Waits until no trace of the guard is left on the pod, its node and the namespace.
pub async fn until_released(client: &Client, ns: &str, pod: &str, node: &str, limit: Duration) {
    wait::until_empty("every trace of the guard to go", limit, || {
        traces(client, ns, pod, node)
    })
    .await;
}

/// Asserts that no trace of the guard is left on the pod, its node and the namespace now.
pub async fn assert_released(client: &Client, ns: &str, pod: &str, node: &str) {
    let left = traces(client, ns, pod, node).await;
    assert!(left.is_empty(), "the guard left: {left:?}");
}

/// The Eviction API's answer for a pod: 200 or the error code.
pub async fn evict(client: &Client, ns: &str, pod: &str) -> u16 {
    match Api::<Pod>::namespaced(client.clone(), ns)
        .evict(pod, &EvictParams::default())
        .await
    {
        Ok(_) => 200,
        Err(kube::Error::Api(status)) => status.code,
        Err(other) => panic!("eviction failed without an API answer: {other}"),
    }
}

/// A private node and a 1-replica Deployment `app` pinned to it; returns (node, pod).
pub async fn lone_pod_on_private_node(client: &Client, ns: &str, app: &str) -> (String, Pod) {
    let node = format!("{ns}-n");
    create_ready_node(client, ns, &node).await;
    Api::<Deployment>::namespaced(client.clone(), ns)
        .create(
            &PostParams::default(),
            &deployment(app)
                .node_selector("disruption-guard.io/test-node", &node)
                .build(),
        )
        .await
        .unwrap();
    let pod = ready_pod(client, ns, app).await;
    (node, pod)
}
