//! Cases for [`super`]: verbs from methods and paths, codes, and the layer over a fake service.

use super::*;

fn encoded(m: &RequestMetrics) -> String {
    crate::testing::encode_registered(|r| m.register(r))
}

#[test]
fn reads_of_collections_and_objects_are_lists_and_gets() {
    for (path, query, expected) in [
        ("/api/v1/pods", Some("limit=500"), "list"),
        ("/api/v1/namespaces/ci/pods", None, "list"),
        ("/api/v1/namespaces/ci/pods/runner-1", None, "get"),
        ("/api/v1/nodes", None, "list"),
        ("/api/v1/nodes/node-a", None, "get"),
        ("/api/v1/namespaces", None, "list"),
        ("/api/v1/namespaces/ci", None, "get"),
        ("/apis/apps/v1/namespaces/ci/deployments", None, "list"),
        (
            "/apis/apps/v1/namespaces/ci/deployments/web/status",
            None,
            "get",
        ),
        (
            "/apis/disruption-guard.io/v1alpha1/testwindows",
            None,
            "list",
        ),
        (
            "/apis/coordination.k8s.io/v1/namespaces/ci/leases/guard",
            None,
            "get",
        ),
        // Discovery and non-resource paths are plain reads.
        ("/version", None, "get"),
        ("/api", None, "get"),
        ("/apis/apps/v1", None, "get"),
        ("/openapi/v2", None, "get"),
    ] {
        assert_eq!(verb(&Method::GET, path, query), expected, "{path}");
    }
}

#[test]
fn a_watch_is_its_own_verb_whichever_way_it_is_asked_for() {
    for (path, query) in [
        ("/api/v1/pods", Some("watch=true&resourceVersion=10")),
        (
            "/api/v1/namespaces/ci/pods",
            Some("allowWatchBookmarks=true&watch=1"),
        ),
        (
            "/apis/disruption-guard.io/v1alpha1/testwindows",
            Some("fieldSelector=metadata.name%3Dw&watch=true"),
        ),
        ("/api/v1/watch/namespaces/ci/pods", None),
        ("/apis/apps/v1/watch/deployments", None),
    ] {
        assert_eq!(verb(&Method::GET, path, query), "watch", "{path} {query:?}");
    }
    // Other values of the parameter, and parameters that only contain the word, are not.
    assert_eq!(
        verb(&Method::GET, "/api/v1/pods", Some("watch=false")),
        "list"
    );
    assert_eq!(
        verb(
            &Method::GET,
            "/api/v1/pods",
            Some("allowWatchBookmarks=true")
        ),
        "list"
    );
    assert_eq!(verb(&Method::GET, "/api/v1/namespaces/watch", None), "get");
}

#[test]
fn writes_are_named_by_their_method_and_deletes_by_their_target() {
    let pods = "/api/v1/namespaces/ci/pods";
    let pod = "/api/v1/namespaces/ci/pods/runner-1";
    assert_eq!(verb(&Method::POST, pods, None), "create");
    assert_eq!(
        verb(&Method::POST, &format!("{pod}/eviction"), None),
        "create"
    );
    assert_eq!(verb(&Method::PUT, pod, None), "update");
    assert_eq!(
        verb(&Method::PATCH, pod, Some("fieldManager=guard&force=true")),
        "patch"
    );
    assert_eq!(verb(&Method::DELETE, pod, None), "delete");
    assert_eq!(verb(&Method::DELETE, pods, None), "deletecollection");
    assert_eq!(verb(&Method::HEAD, pod, None), "other");
    assert_eq!(verb(&Method::OPTIONS, "/version", None), "other");
}

#[test]
fn the_code_is_the_status_or_error_and_stays_bounded() {
    assert_eq!(code(Some(200)), "200");
    assert_eq!(code(Some(429)), "429");
    assert_eq!(code(None), "error");
    assert_eq!(code(Some(42)), "other");
    assert_eq!(code(Some(999)), "other");
}

#[test]
fn a_fresh_registry_exports_the_latency_of_every_verb_and_no_request() {
    let out = encoded(&RequestMetrics::default());
    for verb in VERBS {
        let line =
            format!("disruption_guard_kube_request_duration_seconds_count{{verb=\"{verb}\"}} 0\n");
        assert!(out.contains(&line), "missing {line} in\n{out}");
    }
    assert!(
        !out.contains("disruption_guard_kube_requests_total"),
        "{out}"
    );
}

/// Answers every request with the status in its `x-status` header; without one, fails as a
/// refused connection does.
#[derive(Clone)]
struct Fake;

impl Service<Request<()>> for Fake {
    type Response = Response<()>;
    type Error = &'static str;
    type Future = std::future::Ready<Result<Response<()>, &'static str>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<()>) -> Self::Future {
        let status = request.headers().get("x-status").cloned();
        std::future::ready(match status {
            Some(status) => Ok(Response::builder()
                .status(status.to_str().unwrap().parse::<u16>().unwrap())
                .body(())
                .unwrap()),
            None => Err("connection refused"),
        })
    }
}

fn request(method: Method, uri: &str, status: Option<u16>) -> Request<()> {
    let mut builder = Request::builder().method(method).uri(uri);
    if let Some(status) = status {
        builder = builder.header("x-status", status.to_string());
    }
    builder.body(()).unwrap()
}

#[tokio::test]
async fn the_layer_counts_each_request_by_verb_and_code_behind_a_proxy_prefix() {
    let metrics = RequestMetrics::default();
    let mut service = metrics.layer("/k8s/clusters/c-1/").layer(Fake);
    let base = "https://proxy.example:443/k8s/clusters/c-1";
    let calls = [
        (
            Method::GET,
            "/api/v1/namespaces/ci/pods?limit=500",
            Some(200),
        ),
        (
            Method::GET,
            "/api/v1/namespaces/ci/pods?watch=true",
            Some(200),
        ),
        (
            Method::PATCH,
            "/apis/apps/v1/namespaces/ci/deployments/web?fieldManager=g",
            Some(409),
        ),
        (
            Method::PATCH,
            "/apis/apps/v1/namespaces/ci/deployments/web?fieldManager=g",
            Some(200),
        ),
        (Method::GET, "/api/v1/nodes/node-a", None),
    ];
    for (method, path, status) in calls {
        let result = service
            .call(request(method, &format!("{base}{path}"), status))
            .await;
        assert_eq!(result.is_ok(), status.is_some());
    }
    let out = encoded(&metrics);
    for line in [
        "kube_requests_total{verb=\"list\",code=\"200\"} 1",
        "kube_requests_total{verb=\"watch\",code=\"200\"} 1",
        "kube_requests_total{verb=\"patch\",code=\"409\"} 1",
        "kube_requests_total{verb=\"patch\",code=\"200\"} 1",
        "kube_requests_total{verb=\"get\",code=\"error\"} 1",
        "kube_request_duration_seconds_count{verb=\"patch\"} 2",
        "kube_request_duration_seconds_count{verb=\"watch\"} 1",
        "kube_request_duration_seconds_count{verb=\"delete\"} 0",
    ] {
        let line = format!("disruption_guard_{line}\n");
        assert!(out.contains(&line), "missing {line} in\n{out}");
    }
    assert_eq!(
        out.matches("disruption_guard_kube_requests_total{").count(),
        5
    );
}
