//! Cases for [`super::decide`]: whose turn it is, withdrawal, the pod gone, what a rollout
//! cannot save, the rollout, progress reports, completion and the timeout.

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

fn rolling() -> Value {
    json!({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 1, "availableReplicas": 1})
}

fn done() -> Value {
    json!({"observedGeneration": 2, "replicas": 1, "updatedReplicas": 1, "availableReplicas": 1})
}

struct Case {
    eviction: Eviction,
    pod: Option<Pod>,
    deployment: Option<Deployment>,
    now: &'static str,
    timeout: Option<Duration>,
}

fn case() -> Case {
    Case {
        eviction: active(),
        pod: Some(pod(json!({}))),
        deployment: Some(deployment(json!({}), json!({}), None)),
        now: "2026-03-01T12:00:01Z",
        timeout: None,
    }
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
        in_scope: true,
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
    assert_eq!(
        run(&Case {
            eviction: e,
            ..case()
        }),
        Step::Withdrawn
    );
    let e = eviction("Canceled", json!({}), json!([]));
    assert_eq!(
        run(&Case {
            eviction: e,
            ..case()
        }),
        Step::Withdrawn
    );
    let evicted = json!([{"type": "TargetEvicted", "status": "True", "reason": "PodDeleted"}]);
    let e = eviction("Active", json!({}), evicted);
    assert_eq!(
        run(&Case {
            eviction: e,
            ..case()
        }),
        Step::Idle
    );
    let failed = json!([{"type": "Failed", "status": "True", "reason": "NoFurtherResponder"}]);
    let e = eviction("Active", json!({}), failed);
    assert_eq!(
        run(&Case {
            eviction: e,
            ..case()
        }),
        Step::Idle
    );
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
    let stateful = pod(
        json!({"ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet",
        "name": "db", "uid": "s", "controller": true}]}),
    );
    let c = Case {
        pod: Some(stateful),
        ..case()
    };
    assert_eq!(
        run(&c),
        Step::StepAside(Aside::Cannot(SkipReason::StatefulSet))
    );
    let bare = pod(json!({"ownerReferences": []}));
    let c = Case {
        pod: Some(bare),
        ..case()
    };
    assert_eq!(run(&c), Step::StepAside(Aside::Cannot(SkipReason::BarePod)));
    let job = pod(
        json!({"ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
        "name": "j", "uid": "j", "controller": true}]}),
    );
    let c = Case {
        pod: Some(job),
        ..case()
    };
    assert_eq!(run(&c), Step::StepAside(Aside::NotADeployment));
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
fn progress_is_reported_at_most_every_twenty_seconds() {
    let rolled = || {
        Some(deployment(
            json!({}),
            rolling(),
            Some("2026-03-01T12:00:01Z"),
        ))
    };
    let soon = Case {
        deployment: rolled(),
        now: "2026-03-01T12:00:19Z",
        ..case()
    };
    assert_eq!(run(&soon), Step::Wait);
    let due = Case {
        deployment: rolled(),
        now: "2026-03-01T12:00:20Z",
        ..case()
    };
    let Step::Heartbeat(p) = run(&due) else {
        panic!("{:?}", run(&due))
    };
    assert!(
        p.message.contains("1/1 updated, 1 available, 2 in all"),
        "{}",
        p.message
    );
    let beat = eviction(
        "Active",
        json!({"heartbeatTime": "2026-03-01T12:00:30Z"}),
        json!([]),
    );
    let after_beat = Case {
        eviction: beat,
        deployment: rolled(),
        now: "2026-03-01T12:00:45Z",
        ..case()
    };
    assert_eq!(run(&after_beat), Step::Wait);
}

#[test]
fn the_response_completes_once_the_new_pod_is_ready_and_no_old_one_is_counted() {
    let c = Case {
        deployment: Some(deployment(json!({}), done(), Some("2026-03-01T12:00:01Z"))),
        ..case()
    };
    assert!(matches!(run(&c), Step::Complete { .. }));
    // Not before the controller saw the rollout's generation.
    let stale = json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "availableReplicas": 1});
    let c = Case {
        deployment: Some(deployment(json!({}), stale, Some("2026-03-01T12:00:01Z"))),
        now: "2026-03-01T12:00:05Z",
        ..case()
    };
    assert_eq!(run(&c), Step::Wait);
}

#[test]
fn a_rollout_past_the_hold_timeout_is_given_up() {
    let rolled = Some(deployment(
        json!({}),
        rolling(),
        Some("2026-03-01T12:00:01Z"),
    ));
    let c = Case {
        deployment: rolled.clone(),
        timeout: Some(Duration::from_secs(60)),
        now: "2026-03-01T12:01:00Z",
        ..case()
    };
    assert_eq!(
        run(&c),
        Step::StepAside(Aside::TimedOut(Duration::from_secs(60)))
    );
    assert_eq!(
        Aside::TimedOut(Duration::from_secs(60)).outcome(),
        "timed_out"
    );
    let own_deadline = Case {
        deployment: Some(deployment(
            json!({"progressDeadlineSeconds": 30}),
            rolling(),
            Some("2026-03-01T12:00:01Z"),
        )),
        now: "2026-03-01T12:00:31Z",
        ..case()
    };
    assert_eq!(
        run(&own_deadline),
        Step::StepAside(Aside::TimedOut(Duration::from_secs(30)))
    );
}

#[test]
fn a_namespace_outside_the_scope_is_handed_over() {
    let c = case();
    let rs = replica_set();
    let pod = c.pod.as_ref().unwrap();
    let step = decide(&Facts {
        eviction: &c.eviction,
        pod: Some(pod),
        owner: workload::owner(pod, Some(&rs.metadata), c.deployment.as_ref()),
        in_scope: false,
        max_replicas: 1,
        timeout: None,
        now: at(c.now),
    });
    assert_eq!(step, Step::StepAside(Aside::OutOfScope));
}

#[test]
fn a_pod_on_no_node_is_handed_over_and_a_rollout_never_made_times_out_too() {
    let mut pending = pod(json!({}));
    pending.spec.as_mut().unwrap().node_name = None;
    let c = Case {
        pod: Some(pending),
        ..case()
    };
    assert_eq!(run(&c), Step::StepAside(Aside::NotScheduled));
    let c = Case {
        timeout: Some(Duration::from_secs(60)),
        now: "2026-03-01T12:01:00Z",
        ..case()
    };
    assert_eq!(
        run(&c),
        Step::StepAside(Aside::TimedOut(Duration::from_secs(60)))
    );
}
