//! `POST /evictions` end to end through the router (tower `oneshot`), with real AdmissionReview
//! bodies, caches filled from fixtures and a recording stand-in for the rollout.

use super::*;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{Value, json};
use std::sync::Mutex;
use tower::ServiceExt;

/// Records what a deny or a timeout would set going.
#[derive(Default)]
struct Recorded {
    rollouts: Mutex<Vec<Key>>,
    holds: Mutex<Vec<(Key, Timestamp)>>,
    timeouts: Mutex<Vec<String>>,
    skips: Mutex<Vec<(String, SkipReason)>>,
}

impl Actions for Recorded {
    fn start_rollout(&self, _hold: &Hold, key: Key) {
        self.rollouts.lock().unwrap().push(key);
    }
    fn record_hold(&self, _hold: &Hold, key: Key, since: Timestamp) {
        self.holds.lock().unwrap().push((key, since));
    }
    fn report_timeout(&self, hold: &Hold, _since: Timestamp) {
        self.timeouts.lock().unwrap().push(hold.target.pod.clone());
    }
    fn report_skip(&self, pod: &ObjectReference, reason: SkipReason) {
        let name = pod.name.clone().unwrap_or_default();
        self.skips.lock().unwrap().push((name, reason));
    }
}

use crate::testing::store;

fn pod(name: &str, uid: &str) -> Value {
    json!({
        "metadata": {"name": name, "namespace": "ns", "uid": uid,
            "creationTimestamp": "2026-03-01T10:00:00Z",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-rs",
                "uid": "rs-uid", "controller": true}]},
        "spec": {"nodeName": "n1"},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    })
}

struct Fixture {
    state: InterceptState,
    actions: Arc<Recorded>,
}

fn fixture(strategy: Value, opted_out_namespace: bool) -> Fixture {
    let mut lone = pod("web-abc", "pod-uid");
    lone["metadata"]["annotations"] = json!({});
    let pods = Pods::holding(
        [lone, {
            let mut p = pod("opted-out", "other-uid");
            p["metadata"]["annotations"] = json!({INTERCEPT_EVICTIONS: "false"});
            p
        }]
        .into_iter()
        .map(|p| serde_json::from_value(p).unwrap())
        .collect(),
    );
    let nodes = store::<Node>(vec![json!({"metadata": {"name": "n1", "uid": "node-uid"},
        "spec": {"unschedulable": true}})]);
    let replica_sets = store::<ReplicaSet>(vec![json!({"metadata": {"name": "web-rs",
        "namespace": "ns", "uid": "rs-uid",
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
            "uid": "deploy-uid", "controller": true}]}})]);
    let deployments = store::<Deployment>(vec![json!({"metadata": {"name": "web",
        "namespace": "ns", "uid": "deploy-uid"},
        "spec": {"replicas": 1, "selector": {}, "template": {}, "strategy": strategy}})]);
    let label = if opted_out_namespace { "false" } else { "true" };
    let namespaces = store::<PartialObjectMeta<Namespace>>(vec![json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "ns", "labels": {INTERCEPT_EVICTIONS: label}}})]);
    let actions = Arc::new(Recorded::default());
    let state = InterceptState {
        stores: Stores {
            pods,
            nodes,
            replica_sets,
            deployments,
            namespaces,
        },
        settings: Arc::new(Settings {
            signals: crate::k8s::signals::DEFAULT_SIGNALS
                .split(',')
                .map(|s| s.parse().unwrap())
                .collect(),
            max_replicas: 1,
            timeout: Some(Duration::from_secs(60)),
            namespaces: Arc::from(Vec::new()),
            namespace_selector: None,
            replica: Arc::from("guard-0"),
        }),
        denials: Arc::default(),
        skips: Arc::default(),
        metrics: Arc::default(),
        actions: actions.clone(),
        synced: Arc::new(AtomicBool::new(true)),
        limiter: Arc::new(super::super::limit::ReviewLimiter::new(0, 1)),
    };
    Fixture { state, actions }
}

fn rolling() -> Value {
    json!({"type": "RollingUpdate"})
}

use crate::testing::{REVIEW_UID, eviction_review as body};

async fn post(state: &InterceptState, body: Vec<u8>) -> Value {
    post_from(state, body, None).await
}

/// As [`post`], from client address `peer` (as the HTTPS server hands it on) when given.
async fn post_from(
    state: &InterceptState,
    body: Vec<u8>,
    peer: Option<std::net::SocketAddr>,
) -> Value {
    let mut request = Request::post(PATH)
        .header("content-type", "application/json")
        .body(Body::from(body))
        .unwrap();
    if let Some(peer) = peer {
        request.extensions_mut().insert(ConnectInfo(peer));
    }
    let response = router(state.clone()).oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    let review: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(review["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(review["kind"], "AdmissionReview");
    review["response"].clone()
}

fn metrics(state: &InterceptState) -> String {
    crate::testing::encode_registered(|r| state.metrics.register(r))
}

#[tokio::test]
async fn a_v1_eviction_of_the_lone_replica_is_denied_with_429_and_rolls_out_once() {
    let f = fixture(rolling(), false);
    let options = json!({"preconditions": {"uid": "pod-uid"}});
    let response = post(&f.state, body("v1", "web-abc", options.clone(), false)).await;
    assert_eq!(response["uid"], REVIEW_UID);
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 429);
    assert_eq!(response["status"]["reason"], "TooManyRequests");
    let message = response["status"]["message"].as_str().unwrap();
    assert!(message.contains("Deployment web"), "{message}");
    assert!(response["status"].get("details").is_none());
    let again = post(&f.state, body("v1", "web-abc", options, false)).await;
    assert_eq!(again["allowed"], false);
    let rollouts = f.actions.rollouts.lock().unwrap().clone();
    assert_eq!(rollouts, [("deploy-uid".into(), "node-uid".into())]);
    // The first deny is recorded on the Deployment once, dated by the first answer.
    let holds = f.actions.holds.lock().unwrap().clone();
    assert_eq!(holds.len(), 1);
    assert_eq!(holds[0].0, ("deploy-uid".into(), "node-uid".into()));
    let out = metrics(&f.state);
    assert!(
        out.contains("disruption_guard_intercept_denied_total 2\n"),
        "{out}"
    );
    assert!(
        out.contains("disruption_guard_intercept_reviews_total 2\n"),
        "{out}"
    );
    assert!(
        out.contains("disruption_guard_intercept_answer_seconds_count 2\n"),
        "{out}"
    );
}

#[tokio::test]
async fn a_v1beta1_eviction_is_held_the_same_way() {
    let f = fixture(rolling(), false);
    let response = post(&f.state, body("v1beta1", "web-abc", Value::Null, false)).await;
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 429);
    assert_eq!(f.actions.rollouts.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn the_probe_is_answered_with_the_replicas_name_even_before_the_caches_sync() {
    let f = fixture(rolling(), false);
    f.state
        .synced
        .store(false, std::sync::atomic::Ordering::Release);
    let probe = super::super::probe::POD;
    let response = post(&f.state, body("v1", probe, json!({}), true)).await;
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 400);
    let message = response["status"]["message"].as_str().unwrap();
    assert!(message.contains("answered by guard-0"), "{message}");
    // Not a deny: nothing held, counted or set going.
    assert!(metrics(&f.state).contains("intercept_denied_total 0\n"));
    assert!(f.actions.rollouts.lock().unwrap().is_empty());
    // A real eviction of a pod so named is no probe.
    let response = post(&f.state, body("v1", probe, json!({}), false)).await;
    assert_eq!(response["allowed"], true);
}

#[tokio::test]
async fn an_eviction_in_a_namespace_the_selector_leaves_out_is_allowed_and_starts_nothing() {
    let mut f = fixture(rolling(), false);
    let mut settings = (*f.state.settings).clone();
    settings.namespace_selector =
        Some(serde_json::from_value(json!({"matchLabels": {"team": "shop"}})).unwrap());
    f.state.settings = Arc::new(settings.clone());
    let response = post(&f.state, body("v1", "web-abc", json!({}), false)).await;
    assert_eq!(response["allowed"], true);
    assert!(f.actions.rollouts.lock().unwrap().is_empty());
    assert!(metrics(&f.state).contains("intercept_allowed_total{reason=\"out_of_scope\"} 1\n"));
    // The namespace's own labels selected: held as without a selector.
    settings.namespace_selector = Some(
        serde_json::from_value(json!({"matchLabels": {INTERCEPT_EVICTIONS: "true"}})).unwrap(),
    );
    f.state.settings = Arc::new(settings);
    let response = post(&f.state, body("v1", "web-abc", json!({}), false)).await;
    assert_eq!(response["allowed"], false);
}

#[tokio::test]
async fn a_dry_run_is_allowed_and_starts_no_rollout() {
    let f = fixture(rolling(), false);
    let response = post(&f.state, body("v1", "web-abc", json!({}), true)).await;
    assert_eq!(response["allowed"], true);
    let response = post(
        &f.state,
        body("v1", "web-abc", json!({"dryRun": ["All"]}), false),
    )
    .await;
    assert_eq!(response["allowed"], true);
    assert!(f.actions.rollouts.lock().unwrap().is_empty());
    assert!(metrics(&f.state).contains("intercept_allowed_total{reason=\"dry_run\"} 2\n"));
}

#[tokio::test]
async fn a_malformed_body_is_allowed_and_counted() {
    let f = fixture(rolling(), false);
    for bad in [
        b"not json".to_vec(),
        br#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u-1", "name": 7}}"#
            .to_vec(),
    ] {
        let response = post(&f.state, bad).await;
        assert_eq!(response["allowed"], true);
    }
    let out = metrics(&f.state);
    assert!(
        out.contains("intercept_allowed_total{reason=\"malformed\"} 2\n"),
        "{out}"
    );
}

#[tokio::test]
async fn gone_mismatched_and_opted_out_pods_are_allowed_without_a_rollout() {
    let f = fixture(rolling(), false);
    let gone = post(&f.state, body("v1", "nobody", json!({}), false)).await;
    let other_uid = json!({"preconditions": {"uid": "old-uid"}});
    let mismatch = post(&f.state, body("v1", "web-abc", other_uid, false)).await;
    let opted_out = post(&f.state, body("v1", "opted-out", json!({}), false)).await;
    for response in [gone, mismatch, opted_out] {
        assert_eq!(response["allowed"], true);
    }
    assert!(f.actions.rollouts.lock().unwrap().is_empty());
    let out = metrics(&f.state);
    for reason in ["pod_gone", "uid_mismatch", "pod_opted_out"] {
        assert!(
            out.contains(&format!(
                "intercept_allowed_total{{reason=\"{reason}\"}} 1\n"
            )),
            "{reason} in {out}"
        );
    }
}

#[tokio::test]
async fn an_opted_out_namespace_and_a_recreate_deployment_are_allowed() {
    let f = fixture(rolling(), true);
    let response = post(&f.state, body("v1", "web-abc", json!({}), false)).await;
    assert_eq!(response["allowed"], true);
    let f = fixture(json!({"type": "Recreate"}), false);
    let response = post(&f.state, body("v1", "web-abc", json!({}), false)).await;
    assert_eq!(response["allowed"], true);
    assert!(metrics(&f.state).contains("intercept_allowed_total{reason=\"recreate\"} 1\n"));
    // One Event per pod and reason, however often the drainer retries; none for a dry run.
    post(&f.state, body("v1", "web-abc", json!({}), false)).await;
    post(&f.state, body("v1", "web-abc", json!({}), true)).await;
    assert_eq!(
        *f.actions.skips.lock().unwrap(),
        [("web-abc".to_string(), SkipReason::Recreate)]
    );
}

#[tokio::test]
async fn a_dry_run_of_a_pod_a_rollout_cannot_save_reports_nothing() {
    let f = fixture(json!({"type": "Recreate"}), false);
    let response = post(&f.state, body("v1", "web-abc", json!({}), true)).await;
    assert_eq!(response["allowed"], true);
    assert!(f.actions.skips.lock().unwrap().is_empty());
}

#[tokio::test]
async fn before_the_caches_synced_every_eviction_is_allowed() {
    let f = fixture(rolling(), false);
    f.state.synced.store(false, Ordering::Release);
    let response = post(&f.state, body("v1", "web-abc", json!({}), false)).await;
    assert_eq!(response["allowed"], true);
    assert!(metrics(&f.state).contains("intercept_allowed_total{reason=\"not_synced\"} 1\n"));
}

#[tokio::test]
async fn past_the_timeout_the_eviction_is_allowed_and_reported_once() {
    let f = fixture(rolling(), false);
    let key = ("deploy-uid".to_string(), "node-uid".to_string());
    let long_ago = Timestamp::now() - jiff::SignedDuration::from_secs(61);
    f.state.denials.deny(&key, long_ago, true, true);
    for _ in 0..2 {
        let response = post(&f.state, body("v1", "web-abc", json!({}), false)).await;
        assert_eq!(response["allowed"], true);
    }
    assert_eq!(*f.actions.timeouts.lock().unwrap(), ["web-abc"]);
    let out = metrics(&f.state);
    assert!(
        out.contains("disruption_guard_intercept_timeouts_total 1\n"),
        "{out}"
    );
    assert!(
        out.contains("intercept_allowed_total{reason=\"timeout\"} 2\n"),
        "{out}"
    );
}

#[tokio::test]
async fn a_client_over_the_rate_limit_is_allowed_untouched_and_counted() {
    let mut f = fixture(rolling(), false);
    f.state.limiter = Arc::new(super::super::limit::ReviewLimiter::new(1, 1));
    let forger: std::net::SocketAddr = "10.1.2.3:40000".parse().unwrap();
    let options = json!({"preconditions": {"uid": "pod-uid"}});
    let first = post_from(
        &f.state,
        body("v1", "web-abc", options.clone(), false),
        Some(forger),
    )
    .await;
    assert_eq!(
        first["allowed"], false,
        "within the limit the eviction is held"
    );
    f.actions.rollouts.lock().unwrap().clear();
    f.state
        .denials
        .forget(&("deploy-uid".to_string(), "node-uid".to_string()));
    let second = post_from(
        &f.state,
        body("v1", "web-abc", options.clone(), false),
        Some(forger),
    )
    .await;
    assert_eq!(second["allowed"], true, "over the limit: fail open");
    assert_eq!(second["uid"], REVIEW_UID);
    assert!(
        f.actions.rollouts.lock().unwrap().is_empty(),
        "nothing is set going over the limit"
    );
    let apiserver: std::net::SocketAddr = "10.0.0.1:50000".parse().unwrap();
    let other = post_from(
        &f.state,
        body("v1", "web-abc", options, false),
        Some(apiserver),
    )
    .await;
    assert_eq!(
        other["allowed"], false,
        "another address has its own bucket"
    );
    let out = metrics(&f.state);
    assert!(
        out.contains("intercept_allowed_total{reason=\"rate_limited\"} 1\n"),
        "{out}"
    );
}

/// `body` as sent for `username`.
fn as_user(body: Vec<u8>, username: &str) -> Vec<u8> {
    let mut v: Value = serde_json::from_slice(&body).unwrap();
    v["request"]["userInfo"]["username"] = json!(username);
    serde_json::to_vec(&v).unwrap()
}

#[tokio::test]
async fn a_flood_of_evictions_of_pods_the_cache_does_not_hold_costs_no_token() {
    let mut f = fixture(rolling(), false);
    f.state.limiter = Arc::new(super::super::limit::ReviewLimiter::new(1, 2));
    let apiserver: std::net::SocketAddr = "10.0.0.1:50000".parse().unwrap();
    for i in 0..100 {
        let flood = as_user(
            body("v1", &format!("no-such-pod-{i}"), json!({}), false),
            "system:serviceaccount:ns:tenant",
        );
        let answer = post_from(&f.state, flood, Some(apiserver)).await;
        assert_eq!(answer["allowed"], true);
    }
    let held = post_from(
        &f.state,
        body("v1", "web-abc", json!({}), false),
        Some(apiserver),
    )
    .await;
    assert_eq!(held["allowed"], false, "the real eviction is still held");
    assert_eq!(f.actions.rollouts.lock().unwrap().len(), 1);
    let out = metrics(&f.state);
    assert!(
        out.contains("intercept_allowed_total{reason=\"pod_gone\"} 100\n"),
        "{out}"
    );
    assert!(
        out.contains("intercept_allowed_total{reason=\"rate_limited\"} 0\n"),
        "{out}"
    );
}

#[tokio::test]
async fn one_users_flood_of_holds_drains_only_its_own_bucket() {
    let mut f = fixture(rolling(), false);
    f.state.limiter = Arc::new(super::super::limit::ReviewLimiter::new(1, 2));
    let apiserver: std::net::SocketAddr = "10.0.0.1:50000".parse().unwrap();
    let flood = || {
        as_user(
            body("v1", "web-abc", json!({}), false),
            "system:serviceaccount:ns:tenant",
        )
    };
    for _ in 0..2 {
        let answer = post_from(&f.state, flood(), Some(apiserver)).await;
        assert_eq!(answer["allowed"], false, "within its burst: held");
    }
    let over = post_from(&f.state, flood(), Some(apiserver)).await;
    assert_eq!(over["allowed"], true, "over its limit: fail open");
    let drainer = post_from(
        &f.state,
        body("v1", "web-abc", json!({}), false),
        Some(apiserver),
    )
    .await;
    assert_eq!(
        drainer["allowed"], false,
        "the drainer, through the same API server, has a bucket of its own"
    );
}

#[tokio::test]
async fn a_review_whose_eviction_names_another_pod_holds_nothing_and_starts_nothing() {
    let f = fixture(rolling(), false);
    let mut forged: Value =
        serde_json::from_slice(&body("v1", "web-abc", json!({}), false)).unwrap();
    forged["request"]["object"]["metadata"]["name"] = json!("decoy");
    let answer = post(&f.state, serde_json::to_vec(&forged).unwrap()).await;
    assert_eq!(answer["allowed"], true);
    assert!(f.actions.rollouts.lock().unwrap().is_empty());
    assert!(f.actions.holds.lock().unwrap().is_empty());
    let out = metrics(&f.state);
    assert!(
        out.contains("intercept_allowed_total{reason=\"malformed\"} 1\n"),
        "{out}"
    );
}
