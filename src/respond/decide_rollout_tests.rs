//! Cases for [`super::super::decide`] once the rollout is made: progress reports, completion,
//! the timeout, and a pod on no node.

use super::*;

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
        deployment: Some(deployment(
            json!({}),
            status(2, 1),
            Some("2026-03-01T12:00:01Z"),
        )),
        ..case()
    };
    assert!(matches!(run(&c), Step::Complete { .. }));
    // Not before the controller saw the rollout's generation.
    let c = Case {
        deployment: Some(deployment(
            json!({}),
            status(1, 1),
            Some("2026-03-01T12:00:01Z"),
        )),
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
    assert_times_out_after_a_minute(Case {
        deployment: rolled.clone(),
        ..case()
    });
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
fn a_pod_on_no_node_is_handed_over_and_a_rollout_never_made_times_out_too() {
    let mut pending = pod(json!({}));
    pending.spec.as_mut().unwrap().node_name = None;
    let c = Case {
        pod: Some(pending),
        ..case()
    };
    assert_eq!(run(&c), Step::StepAside(Aside::NotScheduled));
    assert_times_out_after_a_minute(case());
}

/// `c` with a hold timeout of a minute, a minute after its rollout: given up.
fn assert_times_out_after_a_minute(c: Case) {
    let c = Case {
        timeout: Some(Duration::from_secs(60)),
        now: "2026-03-01T12:01:00Z",
        ..c
    };
    assert_eq!(
        run(&c),
        Step::StepAside(Aside::TimedOut(Duration::from_secs(60)))
    );
}
