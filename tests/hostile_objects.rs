//! A tenant's object that the operator cannot represent costs only itself, against the real API
//! server: namespace A's objects are given the edge values a namespace editor can store (a
//! managedFields time of year 9999, past what Kubernetes' time type represents; a leap second;
//! year 0001; a TestWindow `expiresAt` of year 9999), in every cache the operator holds of that
//! namespace and on A's node, while the operator runs (its watches read the changes) and across
//! a restart (its lists read them). Each time a window in namespace B opens, becomes Ready and
//! releases; A's own window, whose times were clamped, keeps protecting and releases too.
//!
//! The objects are read and written here as raw JSON: a typed client (this test's, as the
//! operator's was) cannot read them either.

mod support;

use std::time::Duration;

use kube::Client;
use serde_json::{Value, json};
use support::drain::metric;
use support::operator::{Operator, ensure_crd};
use support::windows::{DND, close, lone_pod_on_private_node, until_ready, until_released, window};
use support::{wait, with_namespace};

/// A managedFields time past the last instant Kubernetes' time type (and `jiff`) represents.
const YEAR_9999: &str = "9999-12-31T23:59:59Z";

/// An object's JSON as the API server holds it.
async fn raw(client: &Client, path: &str) -> Value {
    let request = http::Request::get(path).body(Vec::new()).unwrap();
    client.request::<Value>(request).await.expect(path)
}

/// Sends `patch` (a JSON patch) to `path`; the API server's answer: Ok, or its status code and
/// message.
async fn json_patch(client: &Client, path: &str, patch: Value) -> Result<(), (u16, String)> {
    let request = http::Request::patch(path)
        .header("content-type", "application/json-patch+json")
        .body(serde_json::to_vec(&patch).unwrap())
        .unwrap();
    match client.request::<Value>(request).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) => Err((status.code, status.message)),
        Err(other) => panic!("patching {path}: {other}"),
    }
}

/// Writes a label on the object at `path` as the field manager `tenant`, then sets the time of
/// that manager's managedFields entry to `time`, as a namespace editor can with
/// `kubectl patch --type=json`. The API server keeps the stored times when a write changes
/// nothing but them, so the second patch also changes a label, under another manager. No
/// other writer takes these labels over (a Deployment's annotations, unlike its labels, are
/// copied to its ReplicaSets by their controller), so the entry keeps the time.
async fn set_managed_time(client: &Client, path: &str, time: &str) -> Result<(), (u16, String)> {
    merge_patch(
        client,
        &format!("{path}?fieldManager=tenant"),
        json!({"metadata": {"labels": {"tenant": "x"}}}),
    )
    .await
    .unwrap_or_else(|e| panic!("labelling {path} as the tenant: {e}"));
    let object = raw(client, path).await;
    let index = object["metadata"]["managedFields"]
        .as_array()
        .and_then(|entries| entries.iter().position(|e| e["manager"] == "tenant"))
        .unwrap_or_else(|| panic!("no managedFields entry of the tenant on {path}: {object}"));
    let patch = json!([
        {"op": "replace", "path": format!("/metadata/managedFields/{index}/time"), "value": time},
        {"op": "add", "path": "/metadata/labels/edge-time", "value": time.replace(':', "-")},
    ]);
    json_patch(client, &format!("{path}?fieldManager=edge"), patch).await
}

/// Sends `patch` (a JSON merge patch) to `path`.
async fn merge_patch(client: &Client, path: &str, patch: Value) -> Result<Value, kube::Error> {
    let request = http::Request::patch(path)
        .header("content-type", "application/merge-patch+json")
        .body(serde_json::to_vec(&patch).unwrap())
        .unwrap();
    client.request::<Value>(request).await
}

/// Clears the object's managedFields (the API server rebuilds them on the next write), so
/// that the clean-up and later tests read it with typed clients again.
async fn clear_managed_fields(client: &Client, path: &str) {
    let _ = merge_patch(client, path, json!({"metadata": {"managedFields": [{}]}})).await;
}

/// Whether the pod at `path` carries the guard's do-not-disrupt annotation.
async fn annotated(client: &Client, path: &str) -> bool {
    raw(client, path).await["metadata"]["annotations"][DND] == "true"
}

/// Opens a window over `app` in `ns`, waits until it is Ready, closes it and waits until every
/// trace of it is gone from the pod and its node.
async fn window_cycle(client: &Client, ns: &str, name: &str, app: &str, pod: &str, node: &str) {
    support::windows::open(client, ns, &window(name, app, "10m", json!({}))).await;
    until_ready(client, ns, name, Duration::from_secs(30)).await;
    assert!(support::windows::protected(client, ns, pod, node).await);
    close(client, ns, name).await;
    until_released(client, ns, pod, node, Duration::from_secs(30)).await;
}

#[tokio::test]
async fn objects_with_edge_values_in_one_namespace_blind_no_cache_and_cost_only_themselves() {
    ensure_crd();
    with_namespace(
        |_, a| async move { with_namespace(|client, b| edge_values(client, a, b)).await },
    )
    .await;
}

async fn edge_values(client: Client, a: String, b: String) {
    let (a_node, a_pod) = lone_pod_on_private_node(&client, &a, "edge").await;
    let (b_node, b_pod) = lone_pod_on_private_node(&client, &b, "app").await;
    let a_pod = a_pod.metadata.name.unwrap();
    let b_pod = b_pod.metadata.name.unwrap();
    let mut operator = Operator::start_with(
        &a,
        vec![format!("--namespaces={a},{b}"), "--insecure-no-auth".into()],
    )
    .await;
    support::windows::open(&client, &a, &window("a", "edge", "10m", json!({}))).await;
    until_ready(&client, &a, "a", Duration::from_secs(30)).await;

    // The CRD refuses a window that would end in year 9999.
    let far = json!({
        "apiVersion": "disruption-guard.io/v1alpha1", "kind": "TestWindow",
        "metadata": {"name": "far"},
        "spec": {"ttl": "10m", "expiresAt": YEAR_9999},
    });
    let request = http::Request::post(format!(
        "/apis/disruption-guard.io/v1alpha1/namespaces/{a}/testwindows"
    ))
    .header("content-type", "application/json")
    .body(serde_json::to_vec(&far).unwrap())
    .unwrap();
    match client.request::<Value>(request).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 422, "{}", status.message);
            assert!(status.message.contains("expiresAt"), "{}", status.message);
        }
        other => panic!("a window ending in year 9999 was stored: {other:?}"),
    }

    // Every object of A the operator caches, and A's node, get a time of year 9999.
    let rs = raw(
        &client,
        &format!("/apis/apps/v1/namespaces/{a}/replicasets?labelSelector=app%3Dedge"),
    )
    .await["items"][0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let guard_pdb = support::windows::guard_pdbs(&client, &a).await[0]
        .metadata
        .name
        .clone()
        .unwrap();
    // A StatefulSet (scaled to zero), which the window controller caches too.
    let sts = json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
        "spec": {"replicas": 0, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                 "template": {"metadata": {"labels": {"app": "db"}},
                              "spec": {"containers": [{"name": "db", "image": "registry.invalid/db:1"}]}}},
    });
    let request = http::Request::post(format!("/apis/apps/v1/namespaces/{a}/statefulsets"))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&sts).unwrap())
        .unwrap();
    client
        .request::<Value>(request)
        .await
        .expect("creating a StatefulSet");
    let poisoned = [
        format!("/apis/apps/v1/namespaces/{a}/statefulsets/db"),
        format!("/api/v1/namespaces/{a}/pods/{a_pod}"),
        format!("/apis/apps/v1/namespaces/{a}/deployments/edge"),
        format!("/apis/apps/v1/namespaces/{a}/replicasets/{rs}"),
        format!("/apis/policy/v1/namespaces/{a}/poddisruptionbudgets/{guard_pdb}"),
        format!("/apis/disruption-guard.io/v1alpha1/namespaces/{a}/testwindows/a"),
        format!("/api/v1/nodes/{a_node}"),
    ];
    for path in &poisoned {
        set_managed_time(&client, path, YEAR_9999)
            .await
            .unwrap_or_else(|e| panic!("the API server refused year 9999 on {path}: {e:?}"));
    }
    // A leap second: the API server's own time parser decides whether it is stored.
    let leap = set_managed_time(
        &client,
        &format!("/apis/apps/v1/namespaces/{a}/replicasets/{rs}"),
        "2016-12-31T23:59:60Z",
    )
    .await;
    let leap = leap.map_err(|(code, message)| {
        (
            code,
            message
                .chars()
                .rev()
                .take(80)
                .collect::<String>()
                .chars()
                .rev()
                .collect::<String>(),
        )
    });
    eprintln!("a managedFields time of 23:59:60: {leap:?}");
    // Year 0001 is representable: the object stays as it is, in B.
    set_managed_time(
        &client,
        &format!("/apis/apps/v1/namespaces/{b}/deployments/app"),
        "0001-01-01T00:00:00Z",
    )
    .await
    .expect("year 0001");

    // Read by the running watches: B's windows open, protect and release.
    window_cycle(&client, &b, "b1", "app", &b_pod, &b_node).await;
    // Read by the lists of a new process.
    operator.restart().await;
    window_cycle(&client, &b, "b2", "app", &b_pod, &b_node).await;

    // A's own objects were kept with their times clamped: A's window still protects its
    // pod and releases it when closed.
    let a_pod_path = format!("/api/v1/namespaces/{a}/pods/{a_pod}");
    assert!(
        annotated(&client, &a_pod_path).await,
        "A's pod lost its protection"
    );
    let a_window = format!("/apis/disruption-guard.io/v1alpha1/namespaces/{a}/testwindows/a");
    merge_patch(&client, &a_window, json!({"spec": {"closed": true}}))
        .await
        .expect("closing A's window");
    wait::until(
        "A's pod to be released",
        Duration::from_secs(30),
        || async { !annotated(&client, &a_pod_path).await },
    )
    .await;

    // Reported, by the lists after the restart: counted per cache, and a Warning Event on
    // the Deployment. Pods are read as digests that never decode another manager's entry.
    let metrics = operator.metrics().await;
    for cache in [
        "deployments",
        "replicasets",
        "poddisruptionbudgets",
        "nodes",
        "testwindows",
        "statefulsets",
    ] {
        let series = format!(
            "disruption_guard_objects_refused_total{{cache=\"{cache}\",outcome=\"clamped\"}}"
        );
        assert!(
            metric(&metrics, &series) >= 1.0,
            "{series} not counted:\n{metrics}"
        );
    }
    wait::until("an ObjectClamped Event on the Deployment", Duration::from_secs(30), || async {
            let events = raw(
                &client,
                &format!("/apis/events.k8s.io/v1/namespaces/{a}/events?fieldSelector=reason%3DObjectClamped"),
            )
            .await;
            events["items"].as_array().is_some_and(|items| {
                items.iter().any(|e| e["regarding"]["kind"] == "Deployment" && e["regarding"]["name"] == "edge")
            })
        })
        .await;

    for path in &poisoned {
        clear_managed_fields(&client, path).await;
    }
}
