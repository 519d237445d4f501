//! Fixtures and cases for [`super::decide`]: pod states, opt-outs, node signals, owner chains,
//! strategies, dry runs and the timeout.

use super::*;
use crate::k8s::signals::DEFAULT_SIGNALS;
use crate::resources::names::{EVICTION_HELD_SINCE, RESTARTED_AT, ROLLED_OUT_FOR_NODE};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde_json::{Value, json};

fn signals() -> Vec<Signal> {
    DEFAULT_SIGNALS
        .split(',')
        .map(|s| s.parse().unwrap())
        .collect()
}

fn now() -> Timestamp {
    "2026-03-01T12:00:00Z".parse().unwrap()
}

fn eviction() -> Eviction {
    Eviction {
        namespace: "ns".into(),
        name: "web-abc".into(),
        uid: None,
        dry_run: false,
    }
}

fn pod() -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "web-abc", "namespace": "ns", "uid": "pod-uid",
            "creationTimestamp": "2026-03-01T10:00:00Z",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-rs",
                "uid": "rs-uid", "controller": true}]},
        "spec": {"nodeName": "n1", "containers": []},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .unwrap()
}

fn node(spec: Value) -> Node {
    serde_json::from_value(json!({"metadata": {"name": "n1", "uid": "node-uid"}, "spec": spec}))
        .unwrap()
}

fn disrupted() -> Node {
    node(json!({"taints": [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]}))
}

fn replica_set() -> ObjectMeta {
    serde_json::from_value(json!({"name": "web-rs", "namespace": "ns", "uid": "rs-uid",
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
            "uid": "deploy-uid", "controller": true}]}))
    .unwrap()
}

/// A one-replica Deployment with the default strategy, patched by `spec` / `annotations`.
fn deployment(spec: Value, annotations: Value) -> Deployment {
    let mut d = json!({
        "metadata": {"name": "web", "namespace": "ns", "uid": "deploy-uid",
            "annotations": annotations},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}, "template": {}},
    });
    d["spec"]
        .as_object_mut()
        .unwrap()
        .extend(spec.as_object().unwrap().clone());
    serde_json::from_value(d).unwrap()
}

/// Everything in place for a deny; each test changes one thing.
struct Case {
    eviction: Eviction,
    pod: Option<Pod>,
    node: Option<Node>,
    deployment: Deployment,
    namespace_opted_out: bool,
    first_denied: Option<Timestamp>,
    rollout_started: bool,
    timeout: Option<Duration>,
}

impl Case {
    fn new() -> Self {
        Self {
            eviction: eviction(),
            pod: Some(pod()),
            node: Some(disrupted()),
            deployment: deployment(json!({}), json!({})),
            namespace_opted_out: false,
            first_denied: None,
            rollout_started: false,
            timeout: None,
        }
    }

    fn decide(&self) -> Verdict {
        let rs = replica_set();
        let signals = signals();
        let owner = match &self.pod {
            Some(p) => workload::owner(p, Some(&rs), Some(&self.deployment)),
            None => Owner::None,
        };
        self.decide_with(owner, &signals)
    }

    fn decide_with(&self, owner: Owner<'_>, signals: &[Signal]) -> Verdict {
        decide(&Facts {
            eviction: &self.eviction,
            pod: self.pod.as_ref(),
            node: self.node.as_ref(),
            owner,
            namespace_opted_out: self.namespace_opted_out,
            signals,
            max_replicas: 1,
            now: now(),
            first_denied: self.first_denied,
            rollout_started: self.rollout_started,
            timeout: self.timeout,
        })
    }

    fn allowed(&self) -> Option<AllowReason> {
        match self.decide() {
            Verdict::Allow(reason) => Some(reason),
            _ => None,
        }
    }
}

fn start_rollout(verdict: &Verdict) -> Option<bool> {
    match verdict {
        Verdict::Deny { start_rollout, .. } => Some(*start_rollout),
        _ => None,
    }
}

#[test]
fn the_lone_ready_replica_on_a_disrupted_node_is_held_and_its_deployment_rolled_out() {
    let verdict = Case::new().decide();
    let Verdict::Deny {
        start_rollout,
        record_hold,
        hold,
    } = verdict
    else {
        panic!("{verdict:?}");
    };
    assert!(start_rollout);
    assert!(record_hold, "the first deny is recorded on the Deployment");
    assert_eq!(
        hold.target,
        Target {
            namespace: "ns".into(),
            deployment: "web".into(),
            deployment_uid: "deploy-uid".into(),
            replica_set: "web-rs".into(),
            pod: "web-abc".into(),
            node: NodeRef {
                name: "n1".into(),
                uid: "node-uid".into()
            },
        }
    );
    assert_eq!(hold.pod_uid, "pod-uid");
    assert_eq!(hold.raised.signal, Signal::KarpenterDisrupted);
    assert_eq!(hold.timeout, Duration::from_secs(600));
}

#[test]
fn an_eviction_of_a_pod_that_is_gone_is_allowed() {
    let mut case = Case::new();
    case.pod = None;
    assert_eq!(case.allowed(), Some(AllowReason::PodGone));
}

#[test]
fn the_uid_precondition_must_name_the_cached_pod() {
    let mut case = Case::new();
    case.eviction.uid = Some("other-uid".into());
    assert_eq!(case.allowed(), Some(AllowReason::UidMismatch));
    case.eviction.uid = Some("pod-uid".into());
    assert_eq!(start_rollout(&case.decide()), Some(true));
}

/// What a review (forged or not) must match before it starts a rollout: the cached pod by
/// namespace and name, its cached UID when the review gives one, on a cached node that is being
/// disrupted. Anything else is let through and starts nothing.
#[test]
fn a_rollout_starts_only_for_the_cached_pod_on_a_cached_node_being_disrupted() {
    type Change = fn(&mut Case);
    let mismatches: [(&str, Change, AllowReason); 4] = [
        (
            "another uid",
            |c| c.eviction.uid = Some("forged-uid".into()),
            AllowReason::UidMismatch,
        ),
        (
            "a pod the cache lacks",
            |c| c.pod = None,
            AllowReason::PodGone,
        ),
        (
            "a node the cache lacks",
            |c| c.node = None,
            AllowReason::NodeNotDisrupted,
        ),
        (
            "a node not disrupted",
            |c| c.node = Some(node(json!({}))),
            AllowReason::NodeNotDisrupted,
        ),
    ];
    for (what, change, reason) in mismatches {
        let mut case = Case::new();
        change(&mut case);
        let verdict = case.decide();
        assert_eq!(start_rollout(&verdict), None, "{what}: {verdict:?}");
        assert_eq!(case.allowed(), Some(reason), "{what}");
    }
    let mut matching = Case::new();
    matching.eviction.uid = Some("pod-uid".into());
    assert_eq!(start_rollout(&matching.decide()), Some(true));
}

#[test]
fn terminating_pending_and_unready_pods_are_allowed() {
    let mut case = Case::new();
    let mut p = pod();
    p.metadata.deletion_timestamp = Some(Time(now()));
    case.pod = Some(p);
    assert_eq!(case.allowed(), Some(AllowReason::Terminating));
    let mut p = pod();
    p.status.as_mut().unwrap().phase = Some("Pending".into());
    case.pod = Some(p);
    assert_eq!(case.allowed(), Some(AllowReason::NotRunning));
    let mut p = pod();
    p.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].status = "False".into();
    case.pod = Some(p);
    assert_eq!(case.allowed(), Some(AllowReason::NotReady));
    let mut p = pod();
    p.status.as_mut().unwrap().conditions = None;
    case.pod = Some(p);
    assert_eq!(case.allowed(), Some(AllowReason::NotReady));
}

#[test]
fn a_pod_or_namespace_that_opted_out_is_allowed() {
    let mut case = Case::new();
    let mut p = pod();
    p.metadata.annotations = Some([(INTERCEPT_EVICTIONS.to_string(), "false".into())].into());
    case.pod = Some(p);
    assert_eq!(case.allowed(), Some(AllowReason::PodOptedOut));
    let mut case = Case::new();
    case.namespace_opted_out = true;
    assert_eq!(case.allowed(), Some(AllowReason::NamespaceOptedOut));
}

#[test]
fn a_pod_on_a_node_not_being_disrupted_is_allowed() {
    let mut case = Case::new();
    case.node = Some(node(json!({})));
    assert_eq!(case.allowed(), Some(AllowReason::NodeNotDisrupted));
    case.node = None;
    assert_eq!(case.allowed(), Some(AllowReason::NodeNotDisrupted));
}

#[test]
fn every_drain_signal_counts_and_only_the_enabled_ones() {
    let mut case = Case::new();
    for spec in [
        json!({"unschedulable": true}),
        json!({"taints": [{"key": "ToBeDeletedByClusterAutoscaler", "value": "1700000000",
            "effect": "NoSchedule"}]}),
    ] {
        case.node = Some(node(spec));
        assert_eq!(start_rollout(&case.decide()), Some(true));
    }
    let rs = replica_set();
    let p = pod();
    let owner = workload::owner(&p, Some(&rs), Some(&case.deployment));
    assert_eq!(
        case.decide_with(owner, &[Signal::KarpenterDisrupted]),
        Verdict::Allow(AllowReason::NodeNotDisrupted)
    );
}

#[test]
fn what_a_rollout_cannot_save_is_allowed_with_the_drain_watchers_skip_reasons() {
    for (spec, annotations, reason) in [
        (
            json!({"strategy": {"type": "Recreate"}}),
            json!({}),
            SkipReason::Recreate,
        ),
        (
            json!({"strategy": {"type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}}),
            json!({}),
            SkipReason::MaxSurgeZero,
        ),
        (
            json!({"strategy": {"type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 1}}}),
            json!({}),
            SkipReason::MaxUnavailableNonZero,
        ),
        (json!({"paused": true}), json!({}), SkipReason::Paused),
        (
            json!({"replicas": 2}),
            json!({}),
            SkipReason::TooManyReplicas,
        ),
        (
            json!({}),
            json!({"disruption-guard.io/rollout-on-drain": "false"}),
            SkipReason::OptedOut,
        ),
    ] {
        let mut case = Case::new();
        case.deployment = deployment(spec, annotations);
        assert_eq!(case.allowed(), Some(AllowReason::Cannot(reason)));
    }
}

#[test]
fn pods_of_other_controllers_are_allowed() {
    let case = Case::new();
    let signals = signals();
    let sts: OwnerReference = serde_json::from_value(json!({"apiVersion": "apps/v1",
        "kind": "StatefulSet", "name": "db", "uid": "sts-uid", "controller": true}))
    .unwrap();
    assert_eq!(
        case.decide_with(Owner::Other(&sts), &signals),
        Verdict::Allow(AllowReason::Cannot(SkipReason::StatefulSet))
    );
    let job: OwnerReference = serde_json::from_value(json!({"apiVersion": "batch/v1",
        "kind": "Job", "name": "j", "uid": "job-uid", "controller": true}))
    .unwrap();
    assert_eq!(
        case.decide_with(Owner::Other(&job), &signals),
        Verdict::Allow(AllowReason::NotADeployment)
    );
    assert_eq!(
        case.decide_with(Owner::None, &signals),
        Verdict::Allow(AllowReason::Cannot(SkipReason::BarePod))
    );
    let bare: ObjectMeta =
        serde_json::from_value(json!({"name": "web-rs", "uid": "rs-uid"})).unwrap();
    let bare_rs = Owner::ReplicaSet {
        replica_set: Some(&bare),
        deployment: None,
    };
    assert_eq!(
        case.decide_with(bare_rs, &signals),
        Verdict::Allow(AllowReason::Cannot(SkipReason::BareReplicaSet))
    );
}

#[test]
fn an_owner_chain_not_yet_cached_is_allowed() {
    let case = Case::new();
    let rs = replica_set();
    for owner in [
        Owner::ReplicaSet {
            replica_set: None,
            deployment: None,
        },
        Owner::ReplicaSet {
            replica_set: Some(&rs),
            deployment: None,
        },
    ] {
        assert_eq!(
            case.decide_with(owner, &signals()),
            Verdict::Allow(AllowReason::OwnerUnknown)
        );
    }
}

#[test]
fn a_dry_run_is_allowed_and_starts_nothing() {
    let mut case = Case::new();
    case.eviction.dry_run = true;
    assert_eq!(case.allowed(), Some(AllowReason::DryRun));
}

#[test]
fn later_denies_do_not_start_the_rollout_again() {
    let mut case = Case::new();
    case.first_denied = Some(now() - SignedDuration::from_secs(30));
    case.rollout_started = true;
    assert_eq!(start_rollout(&case.decide()), Some(false));
}

#[test]
fn a_rollout_that_failed_is_started_again_by_the_next_deny() {
    let mut case = Case::new();
    case.first_denied = Some(now() - SignedDuration::from_secs(30));
    case.rollout_started = false;
    assert_eq!(start_rollout(&case.decide()), Some(true));
}

#[test]
fn past_the_timeout_the_eviction_is_allowed_after_all() {
    let mut case = Case::new();
    let first = now() - SignedDuration::from_secs(600);
    case.first_denied = Some(first);
    case.rollout_started = true;
    match case.decide() {
        Verdict::AllowAfterTimeout { since, hold } => {
            assert_eq!(since, first);
            assert_eq!(hold.target.deployment, "web");
        }
        other => panic!("{other:?}"),
    }
    case.first_denied = Some(now() - SignedDuration::from_secs(599));
    assert_eq!(start_rollout(&case.decide()), Some(false));
}

#[test]
fn the_timeout_is_the_flag_else_the_progress_deadline_capped() {
    let d = |spec| deployment(spec, json!({}));
    let secs = Duration::from_secs;
    assert_eq!(timeout(None, &d(json!({}))), secs(600));
    let short = d(json!({"progressDeadlineSeconds": 120}));
    assert_eq!(timeout(None, &short), secs(120));
    let long = d(json!({"progressDeadlineSeconds": 7200}));
    assert_eq!(timeout(None, &long), MAX_TIMEOUT);
    assert_eq!(timeout(Some(secs(3600)), &long), MAX_TIMEOUT);
    assert_eq!(timeout(Some(secs(45)), &long), secs(45));
    let mut case = Case::new();
    case.timeout = Some(secs(60));
    case.first_denied = Some(now() - SignedDuration::from_secs(61));
    assert!(matches!(case.decide(), Verdict::AllowAfterTimeout { .. }));
}

#[test]
fn a_rollout_recorded_for_this_node_is_not_made_again_and_dates_the_deny() {
    let mut case = Case::new();
    let at = "2026-03-01T11:59:00Z";
    case.deployment = deployment(
        json!({"template": {"metadata": {"annotations": {RESTARTED_AT: at}}}}),
        json!({ROLLED_OUT_FOR_NODE: "n1/node-uid"}),
    );
    assert_eq!(start_rollout(&case.decide()), Some(false));
    case.deployment.spec.as_mut().unwrap().template.metadata = Some(ObjectMeta {
        annotations: Some([(RESTARTED_AT.to_string(), "2026-03-01T11:50:00Z".into())].into()),
        ..ObjectMeta::default()
    });
    match case.decide() {
        Verdict::AllowAfterTimeout { since, .. } => {
            assert_eq!(since, "2026-03-01T11:50:00Z".parse::<Timestamp>().unwrap())
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_rollout_recorded_for_this_node_before_the_pod_started_is_not_made_twice() {
    let mut case = Case::new();
    case.deployment = deployment(
        json!({"template": {"metadata": {"annotations": {RESTARTED_AT: "2026-03-01T09:00:00Z"}}}}),
        json!({ROLLED_OUT_FOR_NODE: "n1/node-uid"}),
    );
    assert_eq!(case.allowed(), Some(AllowReason::RolledOutBefore));
}

#[test]
fn a_rollout_recorded_for_another_node_does_not_count() {
    let mut case = Case::new();
    case.deployment = deployment(
        json!({"template": {"metadata": {"annotations": {RESTARTED_AT: "2026-03-01T09:00:00Z"}}}}),
        json!({ROLLED_OUT_FOR_NODE: "n2/other-uid"}),
    );
    assert_eq!(start_rollout(&case.decide()), Some(true));
}

fn record_hold(verdict: &Verdict) -> Option<bool> {
    match verdict {
        Verdict::Deny { record_hold, .. } => Some(*record_hold),
        _ => None,
    }
}

#[test]
fn a_hold_recorded_on_the_deployment_dates_the_deny_for_a_replica_that_remembers_nothing() {
    // Another replica (or this one before a restart) denied first, 50 s ago, and its rollout
    // patch failed: no rolled-out-for-node record, only the hold record.
    let mut case = Case::new();
    case.timeout = Some(Duration::from_secs(45));
    case.deployment = deployment(
        json!({}),
        json!({EVICTION_HELD_SINCE: "n1/node-uid@2026-03-01T11:59:10Z"}),
    );
    match case.decide() {
        Verdict::AllowAfterTimeout { since, .. } => {
            assert_eq!(since, "2026-03-01T11:59:10Z".parse::<Timestamp>().unwrap())
        }
        other => panic!("{other:?}"),
    }
    // Within the timeout: held, the rollout tried again, the record not written twice.
    case.timeout = Some(Duration::from_secs(60));
    let verdict = case.decide();
    assert_eq!(start_rollout(&verdict), Some(true));
    assert_eq!(record_hold(&verdict), Some(false));
}

#[test]
fn a_hold_recorded_for_another_node_or_node_incarnation_does_not_date_the_deny() {
    let mut case = Case::new();
    case.timeout = Some(Duration::from_secs(45));
    for marker in ["n2/other-uid", "n1/old-uid"] {
        case.deployment = deployment(
            json!({}),
            json!({EVICTION_HELD_SINCE: format!("{marker}@2026-03-01T11:00:00Z")}),
        );
        assert_eq!(record_hold(&case.decide()), Some(true), "{marker}");
    }
}

#[test]
fn the_earliest_of_the_recorded_hold_the_memory_and_the_rollout_dates_the_deny() {
    let mut case = Case::new();
    case.timeout = Some(Duration::from_secs(45));
    case.first_denied = Some(now() - SignedDuration::from_secs(10));
    case.deployment = deployment(
        json!({"template": {"metadata": {"annotations": {RESTARTED_AT: "2026-03-01T11:59:40Z"}}}}),
        json!({ROLLED_OUT_FOR_NODE: "n1/node-uid",
               EVICTION_HELD_SINCE: "n1/node-uid@2026-03-01T11:59:00Z"}),
    );
    match case.decide() {
        Verdict::AllowAfterTimeout { since, .. } => {
            assert_eq!(since, "2026-03-01T11:59:00Z".parse::<Timestamp>().unwrap())
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_timeout_flag_takes_1s_to_15m_and_refuses_more_with_a_reason() {
    assert_eq!(parse_timeout("45s"), Ok(Duration::from_secs(45)));
    assert_eq!(parse_timeout("15m"), Ok(MAX_TIMEOUT));
    let error = parse_timeout("16m").unwrap_err();
    assert!(error.contains("15m"), "{error}");
    assert!(parse_timeout("0s").is_err());
    assert!(parse_timeout("2h").is_err());
}
