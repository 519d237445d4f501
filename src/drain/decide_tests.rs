//! Fixtures and cases for [`super::decide`]: owner chains, strategies, PDB states.

use super::*;
use crate::resources::names::ROLLED_OUT_FOR_NODE;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::{Value, json};

fn node() -> NodeRef {
    NodeRef {
        name: "n1".into(),
        uid: "node-uid".into(),
    }
}

fn pod() -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "web-abc", "namespace": "ns", "uid": "pod-uid",
            "labels": {"app": "web"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-rs",
                "uid": "rs-uid", "controller": true}]},
        "spec": {"nodeName": "n1", "containers": []},
        "status": {"phase": "Running"}
    }))
    .unwrap()
}

fn replica_set(owned: bool) -> ObjectMeta {
    let owners = if owned {
        json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
            "uid": "deploy-uid", "controller": true}])
    } else {
        json!([])
    };
    serde_json::from_value(json!({"name": "web-rs", "namespace": "ns", "uid": "rs-uid",
        "ownerReferences": owners}))
    .unwrap()
}

/// A complete one-replica Deployment with default strategy, patched by `spec` / `annotations`.
fn deployment(spec: Value, annotations: Value) -> Deployment {
    let mut d = json!({
        "metadata": {"name": "web", "namespace": "ns", "uid": "deploy-uid", "generation": 2,
            "annotations": annotations},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": []}}},
        "status": {"observedGeneration": 2, "replicas": 1, "updatedReplicas": 1,
            "readyReplicas": 1, "availableReplicas": 1}
    });
    d["spec"]
        .as_object_mut()
        .unwrap()
        .extend(spec.as_object().unwrap().clone());
    serde_json::from_value(d).unwrap()
}

fn pdb(selector: Value, allowed: i32) -> PodDisruptionBudget {
    serde_json::from_value(json!({
        "metadata": {"name": "web-pdb", "namespace": "ns"},
        "spec": {"maxUnavailable": 0, "selector": selector},
        "status": {"disruptionsAllowed": allowed, "currentHealthy": 1, "desiredHealthy": 1,
            "expectedPods": 1}
    }))
    .unwrap()
}

fn blocking() -> PodDisruptionBudget {
    pdb(json!({"matchLabels": {"app": "web"}}), 0)
}

fn decide_with(d: &Deployment, pdbs: &[&PodDisruptionBudget]) -> Decision {
    let (node, pod, rs) = (node(), pod(), replica_set(true));
    decide(&Facts {
        node: &node,
        pod: &pod,
        owner: Owner::ReplicaSet {
            replica_set: Some(&rs),
            deployment: Some(d),
        },
        pdbs,
        rolled_out_before: false,
        max_replicas: 1,
    })
}

fn skip_reason(decision: Decision) -> Option<SkipReason> {
    match decision {
        Decision::Skip { reason, .. } => Some(reason),
        _ => None,
    }
}

#[test]
fn a_lone_pod_under_a_blocking_pdb_with_default_strategy_is_rolled_out() {
    let d = deployment(json!({}), json!({}));
    let decision = decide_with(&d, &[&blocking()]);
    assert_eq!(
        decision,
        Decision::RollOut(RolloutPlan {
            namespace: "ns".into(),
            deployment: "web".into(),
            deployment_uid: "deploy-uid".into(),
            replica_set: "web-rs".into(),
            pod: "web-abc".into(),
            pdb: "web-pdb".into(),
            node: node(),
        })
    );
}

#[test]
fn a_pdb_that_still_allows_a_disruption_leaves_the_pod_to_the_eviction() {
    let d = deployment(json!({}), json!({}));
    let open = pdb(json!({"matchLabels": {"app": "web"}}), 1);
    assert_eq!(decide_with(&d, &[&open]), Decision::Ignore);
}

#[test]
fn without_a_pdb_nothing_blocks_and_nothing_is_done() {
    let d = deployment(json!({}), json!({}));
    assert_eq!(decide_with(&d, &[]), Decision::Ignore);
}

#[test]
fn a_pdb_selecting_other_pods_does_not_count() {
    let d = deployment(json!({}), json!({}));
    let other = pdb(json!({"matchLabels": {"app": "db"}}), 0);
    assert_eq!(decide_with(&d, &[&other]), Decision::Ignore);
}

#[test]
fn an_empty_pdb_selector_selects_every_pod_of_the_namespace() {
    let d = deployment(json!({}), json!({}));
    let all = pdb(json!({}), 0);
    assert!(matches!(decide_with(&d, &[&all]), Decision::RollOut(_)));
}

#[test]
fn match_expressions_are_honoured() {
    let d = deployment(json!({}), json!({}));
    let expr = pdb(
        json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "x"]}]}),
        0,
    );
    assert!(matches!(decide_with(&d, &[&expr]), Decision::RollOut(_)));
}

#[test]
fn recreate_is_skipped() {
    let d = deployment(json!({"strategy": {"type": "Recreate"}}), json!({}));
    assert_eq!(
        skip_reason(decide_with(&d, &[&blocking()])),
        Some(SkipReason::Recreate)
    );
}

#[test]
fn max_surge_zero_is_skipped() {
    let d = deployment(
        json!({"strategy": {"type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}}),
        json!({}),
    );
    assert_eq!(
        skip_reason(decide_with(&d, &[&blocking()])),
        Some(SkipReason::MaxSurgeZero)
    );
}

#[test]
fn a_rollout_that_may_remove_the_pod_first_is_skipped() {
    let d = deployment(
        json!({"strategy": {"type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": 1, "maxUnavailable": "100%"}}}),
        json!({}),
    );
    assert_eq!(
        skip_reason(decide_with(&d, &[&blocking()])),
        Some(SkipReason::MaxUnavailableNonZero)
    );
}

#[test]
fn percentages_that_round_to_a_surge_first_rollout_are_rolled_out() {
    let d = deployment(
        json!({"strategy": {"type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": "1%", "maxUnavailable": "99%"}}}),
        json!({}),
    );
    assert!(matches!(
        decide_with(&d, &[&blocking()]),
        Decision::RollOut(_)
    ));
}

#[test]
fn a_paused_deployment_is_skipped() {
    let d = deployment(json!({"paused": true}), json!({}));
    assert_eq!(
        skip_reason(decide_with(&d, &[&blocking()])),
        Some(SkipReason::Paused)
    );
}

#[test]
fn a_rollout_in_progress_is_skipped() {
    let mut d = deployment(json!({}), json!({}));
    d.metadata.generation = Some(3);
    assert_eq!(
        skip_reason(decide_with(&d, &[&blocking()])),
        Some(SkipReason::RolloutInProgress)
    );
    let mut d = deployment(json!({}), json!({}));
    d.status.as_mut().unwrap().replicas = Some(2);
    assert_eq!(
        skip_reason(decide_with(&d, &[&blocking()])),
        Some(SkipReason::RolloutInProgress)
    );
}

#[test]
fn more_replicas_than_the_limit_are_skipped_without_a_warning() {
    let d = deployment(json!({"replicas": 2}), json!({}));
    let reason = skip_reason(decide_with(&d, &[&blocking()])).unwrap();
    assert_eq!(reason, SkipReason::TooManyReplicas);
    assert!(!reason.warns());
}

#[test]
fn the_opt_out_annotation_is_honoured() {
    let d = deployment(
        json!({}),
        json!({"disruption-guard.io/rollout-on-drain": "false"}),
    );
    assert_eq!(
        skip_reason(decide_with(&d, &[&blocking()])),
        Some(SkipReason::OptedOut)
    );
    let d = deployment(
        json!({}),
        json!({"disruption-guard.io/rollout-on-drain": "true"}),
    );
    assert!(matches!(
        decide_with(&d, &[&blocking()]),
        Decision::RollOut(_)
    ));
}

#[test]
fn a_deployment_marked_for_this_node_is_not_rolled_out_again() {
    let d = deployment(
        json!({}),
        json!({"disruption-guard.io/rolled-out-for-node": "n1/node-uid"}),
    );
    assert_eq!(decide_with(&d, &[&blocking()]), Decision::AlreadyRolledOut);
}

#[test]
fn a_deployment_marked_for_another_node_or_node_incarnation_is_rolled_out() {
    for marker in ["n2/other-uid", "n1/old-uid"] {
        let d = deployment(
            json!({}),
            json!({"disruption-guard.io/rolled-out-for-node": marker}),
        );
        assert!(matches!(
            decide_with(&d, &[&blocking()]),
            Decision::RollOut(_)
        ));
    }
}

#[test]
fn what_this_process_remembers_prevents_a_second_rollout() {
    let (node, pod, rs) = (node(), pod(), replica_set(true));
    let d = deployment(json!({}), json!({}));
    let pdb = blocking();
    let decision = decide(&Facts {
        node: &node,
        pod: &pod,
        owner: Owner::ReplicaSet {
            replica_set: Some(&rs),
            deployment: Some(&d),
        },
        pdbs: &[&pdb],
        rolled_out_before: true,
        max_replicas: 1,
    });
    assert_eq!(decision, Decision::AlreadyRolledOut);
}

fn decide_owner(owner: Owner<'_>) -> Decision {
    let (node, pod) = (node(), pod());
    let pdb = blocking();
    decide(&Facts {
        node: &node,
        pod: &pod,
        owner,
        pdbs: &[&pdb],
        rolled_out_before: false,
        max_replicas: 1,
    })
}

#[test]
fn a_bare_pod_is_skipped_with_the_pod_as_subject() {
    match decide_owner(Owner::None) {
        Decision::Skip { reason, subject } => {
            assert_eq!(reason, SkipReason::BarePod);
            assert_eq!(subject.kind.as_deref(), Some("Pod"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_statefulset_pod_is_skipped_with_the_statefulset_as_subject() {
    let owner: OwnerReference = serde_json::from_value(json!({"apiVersion": "apps/v1",
        "kind": "StatefulSet", "name": "db", "uid": "sts-uid", "controller": true}))
    .unwrap();
    match decide_owner(Owner::Other(&owner)) {
        Decision::Skip { reason, subject } => {
            assert_eq!(reason, SkipReason::StatefulSet);
            assert_eq!(subject.name.as_deref(), Some("db"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn daemonset_and_job_pods_are_not_ours() {
    let owner: OwnerReference = serde_json::from_value(json!({"apiVersion": "apps/v1",
        "kind": "DaemonSet", "name": "agent", "uid": "ds-uid", "controller": true}))
    .unwrap();
    assert_eq!(decide_owner(Owner::Other(&owner)), Decision::Ignore);
}

#[test]
fn a_replicaset_without_a_deployment_is_skipped() {
    let rs = replica_set(false);
    assert_eq!(
        skip_reason(decide_owner(Owner::ReplicaSet {
            replica_set: Some(&rs),
            deployment: None
        })),
        Some(SkipReason::BareReplicaSet)
    );
}

#[test]
fn an_owner_chain_not_yet_in_the_stores_waits_for_the_next_pass() {
    let rs = replica_set(true);
    assert_eq!(
        decide_owner(Owner::ReplicaSet {
            replica_set: Some(&rs),
            deployment: None
        }),
        Decision::Ignore
    );
    assert_eq!(
        decide_owner(Owner::ReplicaSet {
            replica_set: None,
            deployment: None
        }),
        Decision::Ignore
    );
}

#[test]
fn terminating_and_finished_pods_are_ignored() {
    let d = deployment(json!({}), json!({}));
    let (node, rs) = (node(), replica_set(true));
    let pdb = blocking();
    let mut terminating = pod();
    terminating.metadata.deletion_timestamp = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
    );
    let mut done = pod();
    done.status.as_mut().unwrap().phase = Some("Succeeded".into());
    for p in [&terminating, &done] {
        let decision = decide(&Facts {
            node: &node,
            pod: p,
            owner: Owner::ReplicaSet {
                replica_set: Some(&rs),
                deployment: Some(&d),
            },
            pdbs: &[&pdb],
            rolled_out_before: false,
            max_replicas: 1,
        });
        assert_eq!(decision, Decision::Ignore);
    }
}

#[test]
fn a_rollout_for_another_node_supersedes_the_record_of_one_for_this_node() {
    let for_this = deployment(json!({}), json!({ROLLED_OUT_FOR_NODE: node().marker()}));
    let for_other = deployment(json!({}), json!({ROLLED_OUT_FOR_NODE: "n2/other-uid"}));
    let never = deployment(json!({}), json!({}));
    assert!(!superseded(&for_this, &node()));
    assert!(superseded(&for_other, &node()));
    assert!(
        !superseded(&never, &node()),
        "no marker yet: the record stands until the store shows the patch"
    );
}
