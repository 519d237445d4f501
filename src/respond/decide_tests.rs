//! Cases for [`super::decide`]: whose turn it is, withdrawal, the pod gone, what a rollout
//! cannot save, the rollout; the fixtures [`rollout`] shares.

use super::*;
use k8s_openapi::api::apps::v1::ReplicaSet;
use serde_json::{Value, json};

fn at(text: &str) -> Timestamp {
    text.parse().unwrap()
}

const START: &str = "2026-03-01T12:00:00Z";

fn eviction(state: &str, entry: Value, conditions: Value) -> Eviction {
    let mut entry_obj = json!({"name": RESPONDER, "startTime": START});
    entry_obj
        .as_object_mut()
        .unwrap()
        .extend(entry.as_object().unwrap().clone());
    serde_json::from_value(json!({
        "metadata": {"name": "pod-1-web", "namespace": "ci"},
        "spec": {"target": {"pod": {"name": "web-1", "uid": "pod-uid"}}},
        "status": {
            "conditions": conditions,
            "targetResponders": [
                {"name": RESPONDER, "priority": 10000, "state": state},
                {"name": "imperative-eviction.k8s.io/evictor", "priority": 100, "state": "Inactive"},
            ],
            "responders": [entry_obj],
        }
    }))
    .unwrap()
}

fn active() -> Eviction {
    eviction("Active", json!({}), json!([]))
}

fn pod(extra: Value) -> Pod {
    let mut metadata = json!({
        "name": "web-1", "namespace": "ci", "uid": "pod-uid",
        "creationTimestamp": "2026-03-01T11:00:00Z",
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-abc",
            "uid": "rs-uid", "controller": true}],
    });
    metadata
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    serde_json::from_value(
        json!({"metadata": metadata, "spec": {"nodeName": "n1", "containers": []}}),
    )
    .unwrap()
}

fn replica_set() -> ReplicaSet {
    serde_json::from_value(json!({"metadata": {"name": "web-abc", "uid": "rs-uid",
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
            "uid": "d-uid", "controller": true}]}}))
    .unwrap()
}

fn deployment(spec: Value, status: Value, restarted: Option<&str>) -> Deployment {
    let annotations = match restarted {
        Some(t) => json!({RESTARTED_AT: t}),
        None => json!({}),
    };
    let mut d = json!({
        "metadata": {"name": "web", "namespace": "ci", "uid": "d-uid", "generation": 2},
        "spec": {"replicas": 1, "selector": {}, "template": {"metadata": {"annotations": annotations}}},
        "status": status,
    });
    d["spec"]
        .as_object_mut()
        .unwrap()
        .extend(spec.as_object().unwrap().clone());
    serde_json::from_value(d).unwrap()
}

/// A Deployment status: observed generation and replicas in all (updated and available: 1).
fn status(generation: i64, replicas: i32) -> Value {
    json!({"observedGeneration": generation, "replicas": replicas, "updatedReplicas": 1, "availableReplicas": 1})
}

fn rolling() -> Value {
    status(2, 2)
}

struct Case {
    eviction: Eviction,
    pod: Option<Pod>,
    deployment: Option<Deployment>,
    now: &'static str,
    timeout: Option<Duration>,
    in_scope: bool,
}

fn case() -> Case {
    Case {
        eviction: active(),
        pod: Some(pod(json!({}))),
        deployment: Some(deployment(json!({}), json!({}), None)),
        now: "2026-03-01T12:00:01Z",
        timeout: None,
        in_scope: true,
    }
}

/// The step the default case takes for `eviction`.
fn for_eviction(eviction: Eviction) -> Step {
    run(&Case { eviction, ..case() })
}

fn run(c: &Case) -> Step {
    let rs = replica_set();
    let owner = match c.pod.as_ref() {
        Some(p) => workload::owner(p, Some(&rs.metadata), c.deployment.as_ref()),
        None => Owner::None,
    };
    decide(&Facts {
        eviction: &c.eviction,
        pod: c.pod.as_ref(),
        owner,
        in_scope: c.in_scope,
        max_replicas: 1,
        timeout: c.timeout,
        now: at(c.now),
    })
}

#[test]
fn only_the_active_started_and_unfinished_responder_acts() {
    for state in ["Inactive", "Interrupted", "Completed", ""] {
        let c = Case {
            eviction: eviction(state, json!({}), json!([])),
            ..case()
        };
        assert_eq!(run(&c), Step::Idle, "{state}");
    }
    let not_started: Eviction = {
        let mut e = active();
        e.status.as_mut().unwrap().responders[0].start_time = None;
        e
    };
    let completed = eviction("Active", json!({"completionTime": START}), json!([]));
    for e in [not_started, completed] {
        assert_eq!(
            run(&Case {
                eviction: e,
                ..case()
            }),
            Step::Idle
        );
    }
}

#[test]
fn a_withdrawn_eviction_stops_the_responder_and_a_decided_one_is_left_alone() {
    let canceled = json!([{"type": "Failed", "status": "True", "reason": CANCELED}]);
    let e = eviction("Active", json!({}), canceled);
    assert_eq!(for_eviction(e), Step::Withdrawn);
    let e = eviction("Canceled", json!({}), json!([]));
    assert_eq!(for_eviction(e), Step::Withdrawn);
    let evicted = json!([{"type": "TargetEvicted", "status": "True", "reason": "PodDeleted"}]);
    let e = eviction("Active", json!({}), evicted);
    assert_eq!(for_eviction(e), Step::Idle);
    let failed = json!([{"type": "Failed", "status": "True", "reason": "NoFurtherResponder"}]);
    let e = eviction("Active", json!({}), failed);
    assert_eq!(for_eviction(e), Step::Idle);
}

#[test]
fn a_pod_gone_replaced_or_terminating_completes_at_once() {
    let gone = Case {
        pod: None,
        ..case()
    };
    let other = Case {
        pod: Some(pod(json!({"uid": "another"}))),
        ..case()
    };
    let terminating = Case {
        pod: Some(pod(json!({"deletionTimestamp": START}))),
        ..case()
    };
    for c in [gone, other, terminating] {
        assert!(matches!(run(&c), Step::Complete { .. }), "{:?}", run(&c));
    }
}

#[test]
fn what_a_rollout_cannot_save_is_handed_over_at_once_saying_why() {
    let cases = [
        (
            json!({"strategy": {"rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}}),
            SkipReason::MaxSurgeZero,
        ),
        (json!({"replicas": 2}), SkipReason::TooManyReplicas),
        (json!({"paused": true}), SkipReason::Paused),
        (
            json!({"strategy": {"type": "Recreate"}}),
            SkipReason::Recreate,
        ),
    ];
    for (spec, reason) in cases {
        let c = Case {
            deployment: Some(deployment(spec, json!({}), None)),
            ..case()
        };
        let step = run(&c);
        assert_eq!(step, Step::StepAside(Aside::Cannot(reason)));
        assert!(Aside::Cannot(reason).explain().contains(reason.as_str()));
    }
    let owned_by = |api: &str, kind: &str| {
        let owner =
            json!({"apiVersion": api, "kind": kind, "name": "o", "uid": "o", "controller": true});
        Case {
            pod: Some(pod(json!({"ownerReferences": [owner]}))),
            ..case()
        }
    };
    let stateful = owned_by("apps/v1", "StatefulSet");
    assert_eq!(
        run(&stateful),
        Step::StepAside(Aside::Cannot(SkipReason::StatefulSet))
    );
    let bare = Case {
        pod: Some(pod(json!({"ownerReferences": []}))),
        ..case()
    };
    assert_eq!(
        run(&bare),
        Step::StepAside(Aside::Cannot(SkipReason::BarePod))
    );
    assert_eq!(
        run(&owned_by("batch/v1", "Job")),
        Step::StepAside(Aside::NotADeployment)
    );
    let c = Case {
        deployment: None,
        ..case()
    };
    assert_eq!(run(&c), Step::StepAside(Aside::OwnerGone));
}

#[test]
fn a_lone_replica_is_rolled_out_once_expected_within_the_hold_timeout() {
    let Step::RollOut(progress) = run(&case()) else {
        panic!("{:?}", run(&case()));
    };
    assert_eq!(progress.deployment, "web");
    // The Deployment's default progress deadline (600 s), from the start of the response.
    assert_eq!(progress.expected, at("2026-03-01T12:10:00Z"));
    // A rollout made before the pod was created does not replace it: roll out again.
    let c = Case {
        deployment: Some(deployment(
            json!({}),
            rolling(),
            Some("2026-03-01T10:00:00Z"),
        )),
        ..case()
    };
    assert!(matches!(run(&c), Step::RollOut(_)));
}

#[test]
fn a_namespace_outside_the_scope_is_handed_over() {
    let c = Case {
        in_scope: false,
        ..case()
    };
    assert_eq!(run(&c), Step::StepAside(Aside::OutOfScope));
}

#[path = "decide_rollout_tests.rs"]
mod rollout;
