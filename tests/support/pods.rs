//! Pods as the tests wait for them: Ready (the Ready condition True) and not being deleted.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, Client};

use super::wait;

/// How long [`ready_pod`] waits.
const LIMIT: Duration = Duration::from_secs(30);

/// Whether the pod's Ready condition is True and it is not being deleted.
pub fn is_ready(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The Ready pods in `ns` matching the label selector `selector` (none when listing fails).
pub async fn ready_pods_matching(client: &Client, ns: &str, selector: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(selector))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(is_ready)
        .collect()
}

/// The Ready pods labelled `app=<app>` in `ns`.
pub async fn ready_pods(client: &Client, ns: &str, app: &str) -> Vec<Pod> {
    ready_pods_matching(client, ns, &format!("app={app}")).await
}

/// Waits (30 s at most) until exactly one pod labelled `app=<app>` is Ready, and returns it.
pub async fn ready_pod(client: &Client, ns: &str, app: &str) -> Pod {
    wait::for_some("a Ready pod", LIMIT, || async {
        let mut ready = ready_pods(client, ns, app).await;
        (ready.len() == 1).then(|| ready.remove(0))
    })
    .await
}
