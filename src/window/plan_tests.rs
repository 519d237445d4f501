//! Unit tests of the planner and the report: plain objects in, writes and counts out.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use serde_json::{Value, json};

use super::node_cap::{Admission, admit};
use super::plan::{NamespacePlan, Target, WindowFacts, WindowPlan, World, Write};
use super::report;
use crate::k8s::fields::tests::{entry, entry_with};
use crate::resources::{Protect, Tracking, WindowReport};

const NS: &str = "shop";
/// The namespace's field manager.
const MANAGER: &str = "disruption-guard/shop";
/// A window of an earlier version, which wrote with its own manager.
const OLD: &str = "00000000-0000-0000-0000-0000000000a1";

/// The plan of the namespace with `windows`.
fn plan_all(windows: &[WindowFacts], w: &World) -> NamespacePlan {
    super::plan::plan(NS, windows, w)
}

/// The view of the namespace's only window, with the namespace's writes (as a pass gives it).
fn plan(win: &WindowFacts, w: &World) -> WindowPlan {
    let mut all = plan_all(std::slice::from_ref(win), w);
    let mut view = all.windows.remove(0);
    view.writes = all.writes;
    view
}

fn obj<T: serde::de::DeserializeOwned>(v: Value) -> Arc<T> {
    Arc::new(serde_json::from_value(v).expect("fixture"))
}

fn view(uid: &str, active: bool) -> WindowFacts {
    WindowFacts {
        uid: uid.into(),
        namespace: NS.into(),
        selector: serde_json::from_value(json!({"matchLabels": {"app": "api"}})).unwrap(),
        protect: Protect::default(),
        active,
        expires_at: "2026-01-01T11:00:00Z".parse().unwrap(),
        admitted: None,
    }
}

fn pod(name: &str, rs: &str, node: &str) -> Value {
    json!({
        "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}"),
            "labels": {"app": "api"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs, "uid": format!("uid-{rs}"), "controller": true}]},
        "spec": {"nodeName": node, "containers": []},
        "status": {"phase": "Running", "startTime": "2026-01-01T10:00:00Z"}
    })
}

fn rs(name: &str, deployment: Option<&str>, revision: &str, replicas: i32) -> Arc<ReplicaSet> {
    let owners: Vec<Value> = deployment
        .map(|d| json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": d, "uid": format!("uid-{d}"), "controller": true}))
        .into_iter()
        .collect();
    obj(json!({
        "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}"), "ownerReferences": owners,
            "annotations": {"deployment.kubernetes.io/revision": revision}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "api"}}}
    }))
}

fn deployment(name: &str) -> Arc<Deployment> {
    obj(json!({
        "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}")},
        "spec": {"selector": {"matchLabels": {"app": "api"}}, "template": {}}
    }))
}

fn node(name: &str) -> Value {
    json!({"metadata": {"name": name, "uid": format!("uid-{name}")}})
}

fn world(pods: Vec<Value>) -> World {
    World {
        pods: pods.into_iter().map(obj).collect(),
        replica_sets: vec![rs("api-1", Some("api"), "1", 1)],
        deployments: vec![deployment("api")],
        nodes: vec![obj(node("n1"))],
        ..Default::default()
    }
}

fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Whether the plan applies the PDB `name`.
fn applies(p: &WindowPlan, name: &str) -> bool {
    p.writes
        .iter()
        .any(|w| matches!(w, Write::ApplyPdb { name: n, .. } if n == name))
}

/// Whether the plan deletes the PDB `name`.
fn deletes(p: &WindowPlan, name: &str) -> bool {
    p.writes
        .iter()
        .any(|w| matches!(w, Write::DeletePdb { name: n, .. } if n == name))
}

/// The world after every write of `plan` landed.
fn settle(mut w: World, win: &WindowFacts) -> World {
    for write in plan(win, &w).writes {
        match write {
            Write::Annotate { target: Target::Pod, name, annotations: a, .. } => {
                let p = w.pods.iter_mut().find(|p| p.metadata.name.as_deref() == Some(&name)).unwrap();
                let p = Arc::make_mut(p);
                let keys: Vec<&str> = a.keys().map(String::as_str).collect();
                p.metadata.managed_fields = Some(vec![entry(MANAGER, &keys)]);
                p.metadata.annotations = Some(a.clone());
            }
            Write::Annotate { target: Target::Node, name, annotations: a, .. } => {
                let n = w.nodes.iter_mut().find(|n| n.metadata.name.as_deref() == Some(&name)).unwrap();
                let n = Arc::make_mut(n);
                let keys: Vec<&str> = a.keys().map(String::as_str).collect();
                n.metadata.managed_fields = Some(vec![entry(MANAGER, &keys)]);
                n.metadata.annotations = Some(a.clone());
            }
            Write::ApplyPdb { name, workload } => w.pdbs.push(obj(json!({
                "metadata": {"name": name, "namespace": NS, "uid": "uid-pdb", "generation": 1,
                    "resourceVersion": "10",
                    "labels": {"app.kubernetes.io/managed-by": "disruption-guard"},
                    "managedFields": [pdb_fields(MANAGER)]},
                "spec": {"maxUnavailable": 0, "selector": workload.selector},
                "status": {"observedGeneration": 1, "disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1}
            }))),
            other => panic!("unexpected write {other:?}"),
        }
    }
    w
}

/// The managedFields entry of `manager`'s apply of a guard PDB: its labels and spec.
fn pdb_fields(manager: &str) -> Value {
    serde_json::to_value(entry_with(
        manager,
        json!({
            "f:metadata": {
                "f:labels": {"f:app.kubernetes.io/managed-by": {}, "f:disruption-guard.io/workload": {}}
            },
            "f:spec": {"f:maxUnavailable": {}, "f:selector": {}}
        }),
    ))
    .unwrap()
}

/// The guard PDB as an earlier version left it: every field held by window `OLD`'s manager.
fn earlier_versions_pdb(w: &mut World) {
    let pdb = Arc::make_mut(&mut w.pdbs[0]);
    pdb.metadata.managed_fields = Some(vec![
        serde_json::from_value(pdb_fields(&format!("disruption-guard/{OLD}"))).unwrap(),
    ]);
}

#[test]
fn an_open_window_wants_annotations_on_its_pods_and_nodes_and_a_pdb_per_deployment() {
    let win = view("a", true);
    let p = plan(&win, &world(vec![pod("api-1-x", "api-1", "n1")]));
    assert_eq!((p.pods, p.nodes, p.workloads), (1, 1, 1));
    assert_eq!(p.pdbs, vec!["api-dg".to_string()]);
    assert!(p.writes.contains(&Write::Annotate {
        target: Target::Pod,
        name: "api-1-x".into(),
        uid: "uid-api-1-x".into(),
        manager: MANAGER.into(),
        annotations: annotations(&[
            ("karpenter.sh/do-not-disrupt", "true"),
            ("cluster-autoscaler.kubernetes.io/safe-to-evict", "false")
        ]),
    }));
    assert!(p.writes.contains(&Write::Annotate {
        target: Target::Node,
        name: "n1".into(),
        uid: "uid-n1".into(),
        manager: MANAGER.into(),
        annotations: annotations(&[
            ("karpenter.sh/do-not-disrupt", "true"),
            (
                "cluster-autoscaler.kubernetes.io/scale-down-disabled",
                "true"
            )
        ]),
    }));
    assert!(applies(&p, "api-dg"));
    assert!(!p.complete());
}

#[test]
fn a_settled_window_needs_no_writes_and_is_complete() {
    let win = view("a", true);
    let w = settle(world(vec![pod("api-1-x", "api-1", "n1")]), &win);
    let p = plan(&win, &w);
    assert_eq!(p.writes, vec![]);
    assert!(p.complete(), "{:?}", p.waiting);
}

#[test]
fn a_pdb_the_disruption_controller_has_not_computed_yet_protects_already() {
    // The Eviction API answers 429 while a PDB's status.observedGeneration is behind its
    // generation (kube-apiserver, pkg/registry/core/pod/storage/eviction.go, checkAndDecrement):
    // the window is Ready without waiting for the disruption controller.
    let win = view("a", true);
    let mut w = settle(world(vec![pod("api-1-x", "api-1", "n1")]), &win);
    let pdb = Arc::make_mut(&mut w.pdbs[0]);
    pdb.metadata.generation = Some(2);
    pdb.status = None;
    let p = plan(&win, &w);
    assert!(p.complete(), "{:?}", p.waiting);
}

#[test]
fn a_value_somebody_else_set_is_left_alone_and_reported() {
    let win = view("a", true);
    let mut p = pod("api-1-x", "api-1", "n1");
    p["metadata"]["annotations"] =
        json!({"cluster-autoscaler.kubernetes.io/safe-to-evict": "true"});
    let plan = plan(&win, &world(vec![p]));
    let pod_write = plan
        .writes
        .iter()
        .find_map(|w| match w {
            Write::Annotate {
                target: Target::Pod,
                annotations,
                ..
            } => Some(annotations.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        pod_write,
        annotations(&[("karpenter.sh/do-not-disrupt", "true")])
    );
    assert_eq!(plan.foreign_values.len(), 1);
}

#[test]
fn a_value_a_person_set_identically_is_shared_not_skipped() {
    let win = view("a", true);
    let mut p = pod("api-1-x", "api-1", "n1");
    p["metadata"]["annotations"] = json!({"karpenter.sh/do-not-disrupt": "true"});
    let plan = plan(&win, &world(vec![p]));
    assert!(plan.foreign_values.is_empty());
    assert!(plan.writes.iter().any(|w| matches!(w, Write::Annotate { target: Target::Pod, annotations, .. } if annotations.len() == 2)));
}

#[test]
fn an_existing_pdb_over_the_pods_is_reused_and_none_is_created() {
    let win = view("a", true);
    let mut w = world(vec![pod("api-1-x", "api-1", "n1")]);
    w.pdbs.push(obj(json!({
        "metadata": {"name": "users", "namespace": NS},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "api"}}}
    })));
    let p = plan(&win, &w);
    assert_eq!(p.reused_pdbs, vec!["users".to_string()]);
    assert_eq!(p.pdbs, vec!["users".to_string()]);
    assert!(!p.writes.iter().any(|w| matches!(w, Write::ApplyPdb { .. })));
}

#[test]
fn a_guard_pdb_made_redundant_by_a_users_pdb_is_deleted() {
    let win = view("a", true);
    let mut w = settle(world(vec![pod("api-1-x", "api-1", "n1")]), &win);
    w.pdbs.push(obj(json!({
        "metadata": {"name": "users", "namespace": NS},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "api"}}}
    })));
    let p = plan(&win, &w);
    assert!(deletes(&p, "api-dg"));
}

#[test]
fn an_ended_window_releases_everything_it_owns_and_deletes_a_pdb_only_it_wanted() {
    let open = view("a", true);
    let w = settle(world(vec![pod("api-1-x", "api-1", "n1")]), &open);
    let p = plan(&view("a", false), &w);
    assert_eq!((p.pods, p.nodes), (0, 0));
    let releases: Vec<_> = p
        .writes
        .iter()
        .filter(|w| matches!(w, Write::Annotate { annotations, .. } if annotations.is_empty()))
        .collect();
    assert_eq!(releases.len(), 2, "the pod and the node");
    assert!(deletes(&p, "api-dg"));
}

#[test]
fn closing_one_of_two_overlapping_windows_writes_nothing() {
    let (a, b) = (view("a", true), view("b", true));
    let w = settle(world(vec![pod("api-1-x", "api-1", "n1")]), &a);
    let both = plan_all(&[a.clone(), b.clone()], &w);
    assert_eq!(
        both.writes,
        vec![],
        "b joins pods a protects: no write of its own"
    );
    assert!(both.windows.iter().all(WindowPlan::complete));
    let one_left = plan_all(&[view("a", false), b], &w);
    assert_eq!(one_left.writes, vec![]);
    assert!(!one_left.releases());
    // The last one applies the empty set: every release, and the PDB deleted.
    let none_left = plan_all(&[view("a", false), view("b", false)], &w);
    assert!(none_left.releases());
    assert_eq!(none_left.writes.len(), 3, "{:?}", none_left.writes);
}

#[test]
fn a_pdb_an_earlier_version_made_is_taken_over_then_its_window_manager_released() {
    let win = view("a", true);
    let mut w = settle(world(vec![pod("api-1-x", "api-1", "n1")]), &win);
    earlier_versions_pdb(&mut w);
    let writes = plan(&win, &w).writes;
    let apply = writes
        .iter()
        .position(|w| matches!(w, Write::ApplyPdb { name, .. } if name == "api-dg"));
    let release = writes.iter().position(|w| {
        *w == Write::Annotate {
            target: Target::Pdb,
            name: "api-dg".into(),
            uid: "uid-pdb".into(),
            manager: format!("disruption-guard/{OLD}"),
            annotations: BTreeMap::new(),
        }
    });
    assert!(
        apply.is_some() && release.is_some() && apply < release,
        "{writes:?}"
    );
}

#[test]
fn a_guard_pdb_no_window_wants_is_deleted_whoever_holds_its_fields() {
    let win = view("a", true);
    let mut w = settle(world(vec![pod("api-1-x", "api-1", "n1")]), &win);
    earlier_versions_pdb(&mut w);
    let p = plan(&view("a", false), &w);
    assert!(p.writes.contains(&Write::DeletePdb {
        name: "api-dg".into(),
        uid: "uid-pdb".into(),
        resource_version: "10".into(),
    }));
    assert!(!p.writes.iter().any(|w| matches!(
        w,
        Write::Annotate {
            target: Target::Pdb,
            ..
        }
    )));
}

#[test]
fn a_guard_pdb_whose_label_the_namespaces_manager_does_not_hold_is_applied_again() {
    let win = view("a", true);
    let mut w = settle(world(vec![pod("api-1-x", "api-1", "n1")]), &win);
    let pdb = Arc::make_mut(&mut w.pdbs[0]);
    pdb.metadata.managed_fields = Some(vec![entry_with(
        MANAGER,
        json!({"f:spec": {"f:maxUnavailable": {}, "f:selector": {}}}),
    )]);
    let p = plan(&win, &w);
    assert!(applies(&p, "api-dg"));
}

#[test]
fn pods_an_earlier_versions_window_annotated_are_adopted_then_released_by_it() {
    let win = view("a", true);
    let mut w = world(vec![pod("api-1-x", "api-1", "n1")]);
    let old = format!("disruption-guard/{OLD}");
    let p = Arc::make_mut(&mut w.pods[0]);
    p.metadata.managed_fields = Some(vec![entry(&old, &["karpenter.sh/do-not-disrupt"])]);
    p.metadata.annotations = Some(annotations(&[("karpenter.sh/do-not-disrupt", "true")]));
    let writes = plan(&win, &w).writes;
    let adopt = writes.iter().position(|w| matches!(w, Write::Annotate { target: Target::Pod, manager, annotations, .. } if manager == MANAGER && annotations.len() == 2));
    let release = writes.iter().position(|w| matches!(w, Write::Annotate { target: Target::Pod, manager, annotations, .. } if *manager == old && annotations.is_empty()));
    assert!(
        adopt.is_some() && release.is_some() && adopt < release,
        "{writes:?}"
    );
}

#[test]
fn with_karpenter_duration_the_latest_expiry_wins_and_no_value_is_foreign() {
    let mut a = view("a", true);
    a.protect.karpenter_duration = true;
    let mut b = view("b", true);
    b.protect.karpenter_duration = true;
    b.expires_at = "2026-01-01T12:00:00Z".parse().unwrap();
    let w = world(vec![pod("api-1-x", "api-1", "n1")]);
    let p = plan_all(&[a, b], &w);
    let dnd: Vec<String> = p
        .writes
        .iter()
        .filter_map(|w| match w {
            Write::Annotate {
                target: Target::Pod,
                annotations,
                ..
            } => annotations.get("karpenter.sh/do-not-disrupt").cloned(),
            _ => None,
        })
        .collect();
    assert_eq!(dnd, ["7200s"]);
    assert!(p.windows.iter().all(|v| v.foreign_values.is_empty()));
    // A window without a duration wants the pod held until it ends: "true" wins.
    let p = plan_all(&[view("c", true), view("b", true)], &w);
    assert!(p.writes.iter().any(|w| matches!(w, Write::Annotate { target: Target::Pod, annotations, .. } if annotations.get("karpenter.sh/do-not-disrupt").map(String::as_str) == Some("true"))));
}

#[test]
fn a_namespace_does_not_release_what_another_namespace_wrote_to_a_shared_node() {
    let b = view("b", true);
    let mut w = settle(world(vec![pod("api-1-x", "api-1", "n1")]), &b);
    let n = Arc::make_mut(&mut w.nodes[0]);
    n.metadata.managed_fields = Some(vec![entry(
        "disruption-guard/other",
        &["karpenter.sh/do-not-disrupt"],
    )]);
    let p = plan(&view("a", false), &w);
    assert!(
        !p.writes.iter().any(|w| matches!(
            w,
            Write::Annotate {
                target: Target::Node,
                ..
            }
        )),
        "{:?}",
        p.writes
    );
}

#[test]
fn a_replica_set_without_a_deployment_gets_its_own_pdb_and_a_bare_pod_none() {
    let win = view("a", true);
    let mut w = world(vec![pod("solo-x", "solo", "n1")]);
    w.replica_sets.push(rs("solo", None, "1", 1));
    let p = plan(&win, &w);
    assert_eq!(p.pdbs, vec!["solo-replicaset-dg".to_string()]);

    let mut bare = pod("bare", "x", "n1");
    bare["metadata"]["ownerReferences"] = json!([]);
    let p = plan(&win, &world(vec![bare]));
    assert_eq!((p.pods, p.workloads), (1, 0));
    assert!(p.pdbs.is_empty());
}

#[test]
fn a_pod_whose_replica_set_is_not_cached_yet_keeps_the_window_waiting() {
    let win = view("a", true);
    let p = plan(&win, &world(vec![pod("x-1", "unknown", "n1")]));
    assert!(!p.waiting.is_empty());
}

#[test]
fn the_karpenter_duration_option_writes_the_time_left_from_the_pods_start() {
    let mut win = view("a", true);
    win.protect.karpenter_duration = true;
    let p = plan(&win, &world(vec![pod("api-1-x", "api-1", "n1")]));
    assert!(p.writes.iter().any(
        |w| matches!(w, Write::Annotate { target: Target::Pod, annotations, .. }
        if annotations.get("karpenter.sh/do-not-disrupt").map(String::as_str) == Some("3600s"))
    ));
}

/// A window's report and tracking after a pass over `w` that follows `r` and `t`.
fn report_after(
    win: &WindowFacts,
    r: &WindowReport,
    t: &Tracking,
    w: &World,
) -> (WindowReport, Tracking) {
    let selected = super::plan::selected_pods(win, &w.pods);
    report::update(r, t, &selected, w, &signals())
}

#[test]
fn the_report_tells_a_rollout_from_a_disruption_and_counts_blocked_evictions() {
    let win = view("a", true);
    let w = world(vec![
        pod("api-1-x", "api-1", "n1"),
        pod("api-1-y", "api-1", "n1"),
    ]);
    let (r, t) = report_after(&win, &WindowReport::default(), &Tracking::default(), &w);
    assert_eq!(t.pods.len(), 2);
    assert!(r.is_clean());

    // x is deleted while its ReplicaSet still wants it: disrupted. y's node gets cordoned.
    let mut w2 = world(vec![pod("api-1-y", "api-1", "n1")]);
    w2.nodes = vec![obj(
        json!({"metadata": {"name": "n1"}, "spec": {"unschedulable": true}}),
    )];
    let (r, t) = report_after(&win, &r, &t, &w2);
    assert_eq!(r.pods_disrupted, 1);
    assert_eq!(r.disrupted_pods, vec!["api-1-x".to_string()]);
    assert_eq!(r.evictions_blocked, 1);
    assert_eq!(r.nodes_disrupted, vec!["n1".to_string()]);
    let (r, t) = report_after(&win, &r, &t, &w2);
    assert_eq!(r.evictions_blocked, 1, "counted once per pod");

    // A rollout replaces y: its ReplicaSet is now an old revision.
    let mut w3 = world(vec![pod("api-2-z", "api-2", "n2")]);
    w3.replica_sets = vec![
        rs("api-1", Some("api"), "1", 0),
        rs("api-2", Some("api"), "2", 1),
    ];
    let (r, _) = report_after(&win, &r, &t, &w3);
    assert_eq!(
        r.pods_disrupted, 1,
        "a rollout's replacement is not a disruption"
    );
}

#[test]
fn the_report_counts_container_restarts_as_disruptions() {
    let win = view("a", true);
    let w = world(vec![pod("api-1-x", "api-1", "n1")]);
    let (r, t) = report_after(&win, &WindowReport::default(), &Tracking::default(), &w);
    let mut p = pod("api-1-x", "api-1", "n1");
    p["status"]["containerStatuses"] =
        json!([{"name": "app", "restartCount": 1, "ready": true, "image": "i", "imageID": ""}]);
    let w = world(vec![p]);
    let (r, _) = report_after(&win, &r, &t, &w);
    assert_eq!(r.pods_disrupted, 1);
}

#[test]
fn the_nodeclaim_of_a_protected_node_is_annotated_and_released_with_it() {
    let win = view("a", true);
    let mut w = world(vec![pod("api-1-x", "api-1", "n1")]);
    let claim: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "default-abc", "uid": "uid-claim"},
        "status": {"nodeName": "n1"}
    }))
    .unwrap();
    let other: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "default-xyz", "uid": "uid-other"},
        "status": {"nodeName": "n9"}
    }))
    .unwrap();
    w.node_claims = Some(vec![Arc::new(claim), Arc::new(other)]);
    let p = plan(&win, &w);
    let claims = annotate_writes(&p, Target::NodeClaim);
    assert_eq!(
        claims,
        vec![(
            "default-abc".to_string(),
            annotations(&[("karpenter.sh/do-not-disrupt", "true")])
        )]
    );

    // Once written, an ended window releases it.
    let claim = Arc::make_mut(&mut w.node_claims.as_mut().unwrap()[0]);
    claim.metadata.managed_fields = Some(vec![entry(MANAGER, &["karpenter.sh/do-not-disrupt"])]);
    claim.metadata.annotations = Some(annotations(&[("karpenter.sh/do-not-disrupt", "true")]));
    let p = plan(&view("a", false), &w);
    assert!(p.writes.iter().any(|w| matches!(w, Write::Annotate { target: Target::NodeClaim, annotations, .. } if annotations.is_empty())));
}

#[test]
fn a_nodeclaim_is_annotated_only_until_karpenter_registers_its_node() {
    let win = view("a", true);
    let mut w = world(vec![pod("api-1-x", "api-1", "n1")]);
    let mut n1 = node("n1");
    n1["metadata"]["labels"] = json!({"karpenter.sh/registered": "true"});
    w.nodes = vec![obj(n1)];
    let claim = |written: bool| -> kube::api::DynamicObject {
        let mut c = json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "default-abc", "uid": "uid-claim"},
            "status": {"nodeName": "n1"}
        });
        if written {
            c["metadata"]["annotations"] = json!({"karpenter.sh/do-not-disrupt": "true"});
        }
        let mut c: kube::api::DynamicObject = serde_json::from_value(c).unwrap();
        if written {
            c.metadata.managed_fields =
                Some(vec![entry(MANAGER, &["karpenter.sh/do-not-disrupt"])]);
        }
        c
    };
    let claim_writes = |p: &WindowPlan| -> Vec<BTreeMap<String, String>> {
        annotate_writes(p, Target::NodeClaim)
            .into_iter()
            .map(|(_, a)| a)
            .collect()
    };
    // Registered: Karpenter reads the Node, which is annotated; the NodeClaim is left alone.
    w.node_claims = Some(vec![Arc::new(claim(false))]);
    let p = plan(&win, &w);
    assert!(claim_writes(&p).is_empty());
    assert!(p.writes.iter().any(|w| matches!(
        w,
        Write::Annotate {
            target: Target::Node,
            ..
        }
    )));
    // Written while the node was registering: released once it is registered.
    w.node_claims = Some(vec![Arc::new(claim(true))]);
    assert_eq!(claim_writes(&plan(&win, &w)), vec![BTreeMap::new()]);
}

/// The annotation writes a plan makes to objects of `target`: (name, annotations).
fn annotate_writes(p: &WindowPlan, target: Target) -> Vec<(String, BTreeMap<String, String>)> {
    p.writes
        .iter()
        .filter_map(|w| match w {
            Write::Annotate {
                target: t,
                name,
                annotations,
                ..
            } if *t == target => Some((name.clone(), annotations.clone())),
            _ => None,
        })
        .collect()
}

/// The drain signals the report counts by default (`--drain-signals`).
fn signals() -> Vec<crate::k8s::signals::Signal> {
    crate::k8s::signals::DEFAULT_SIGNALS
        .split(',')
        .map(|s| s.parse().unwrap())
        .collect()
}

/// A pod of the DaemonSet `agent` on `node`.
fn daemon_pod(name: &str, node: &str) -> Value {
    json!({
        "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}"),
            "labels": {"app": "agent"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": "uid-agent", "controller": true}]},
        "spec": {"nodeName": node, "containers": []},
        "status": {"phase": "Running", "startTime": "2026-01-01T10:00:00Z"}
    })
}

/// A world of three nodes: the Deployment's pod on n1, a DaemonSet pod on each node.
fn world_with_a_daemon_set() -> World {
    let mut w = world(vec![
        pod("api-1-a", "api-1", "n1"),
        daemon_pod("agent-1", "n1"),
        daemon_pod("agent-2", "n2"),
        daemon_pod("agent-3", "n3"),
    ]);
    w.nodes = vec![obj(node("n1")), obj(node("n2")), obj(node("n3"))];
    w
}

fn annotated(p: &WindowPlan, target: Target) -> Vec<String> {
    let mut names: Vec<String> = annotate_writes(p, target)
        .into_iter()
        .filter(|(_, annotations)| !annotations.is_empty())
        .map(|(name, _)| name)
        .collect();
    names.sort();
    names
}

#[test]
fn an_empty_selector_leaves_daemon_set_pods_and_the_nodes_only_they_occupy_alone() {
    let mut win = view("w1", true);
    win.selector = Default::default();
    let p = plan(&win, &world_with_a_daemon_set());
    assert_eq!(annotated(&p, Target::Pod), ["api-1-a"]);
    assert_eq!(annotated(&p, Target::Node), ["n1"]);
    assert_eq!((p.pods, p.nodes, p.workloads), (1, 1, 1));
}

#[test]
fn a_selector_naming_daemon_set_pods_still_needs_the_explicit_opt_in() {
    let mut win = view("w1", true);
    win.selector = serde_json::from_value(json!({"matchLabels": {"app": "agent"}})).unwrap();
    let p = plan(&win, &world_with_a_daemon_set());
    assert!(annotated(&p, Target::Pod).is_empty());
    assert!(annotated(&p, Target::Node).is_empty());
    assert_eq!(p.pods, 0);
}

#[test]
fn with_protect_daemon_sets_an_empty_selector_protects_every_pod_and_its_node() {
    let mut win = view("w1", true);
    win.selector = Default::default();
    win.protect.daemon_sets = true;
    let p = plan(&win, &world_with_a_daemon_set());
    assert_eq!(
        annotated(&p, Target::Pod),
        ["agent-1", "agent-2", "agent-3", "api-1-a"]
    );
    assert_eq!(annotated(&p, Target::Node), ["n1", "n2", "n3"]);
    // DaemonSet pods get annotations, never a PDB: only the Deployment is a workload.
    assert_eq!((p.pods, p.nodes, p.workloads), (4, 3, 1));
}

#[test]
fn turning_the_opt_in_off_releases_the_daemon_set_pods_and_their_nodes() {
    let mut win = view("w1", true);
    win.selector = Default::default();
    win.protect.daemon_sets = true;
    let settled = settle(world_with_a_daemon_set(), &win);
    win.protect.daemon_sets = false;
    let p = plan(&win, &settled);
    let mut released: Vec<String> = p
        .writes
        .iter()
        .filter_map(|w| match w {
            Write::Annotate {
                name, annotations, ..
            } if annotations.is_empty() => Some(name.clone()),
            _ => None,
        })
        .collect();
    released.sort();
    assert_eq!(released, ["agent-1", "agent-2", "agent-3", "n2", "n3"]);
}

/// A world whose node `n1` Karpenter tainted `karpenter.sh/disrupted`; `n2` is untouched.
fn world_with_a_disrupted_node(pods: Vec<Value>) -> World {
    let mut w = world(pods);
    w.nodes = vec![
        obj(json!({"metadata": {"name": "n1", "uid": "uid-n1"},
            "spec": {"taints": [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]}})),
        obj(node("n2")),
    ];
    w
}

#[test]
fn a_new_window_waits_while_a_selected_pod_sits_on_a_node_being_disrupted_for_at_most_30_seconds() {
    use super::settling::{SETTLE_FOR, unsettled};
    let opened: jiff::Timestamp = "2026-01-01T10:00:00Z".parse().unwrap();
    let win = view("w1", true);
    let w = world_with_a_disrupted_node(vec![pod("api-1-a", "api-1", "n1")]);
    assert_eq!(
        unsettled(&win, &w, &signals(), opened, opened),
        ["pod api-1-a to move off node n1, being disrupted (taint karpenter.sh/disrupted)"]
    );
    // The bound: a pod nothing replaces holds the window back 30 s at most.
    let later = opened.saturating_add(SETTLE_FOR).unwrap();
    assert!(unsettled(&win, &w, &signals(), opened, later).is_empty());
    // The replacement runs elsewhere and the old pod is terminating: nothing to wait for.
    let mut old = pod("api-1-a", "api-1", "n1");
    old["metadata"]["deletionTimestamp"] = json!("2026-01-01T10:00:02Z");
    let moved = world_with_a_disrupted_node(vec![old, pod("api-1-b", "api-1", "n2")]);
    assert!(unsettled(&win, &moved, &signals(), opened, opened).is_empty());
    // Signals not enabled, or a window that is not Active, wait for nothing.
    assert!(unsettled(&win, &w, &[], opened, opened).is_empty());
    assert!(unsettled(&view("w1", false), &w, &signals(), opened, opened).is_empty());
}

// --- The node cap (`--max-nodes-per-namespace`, node_cap.rs) ---

/// A pod of no workload (annotations only) on `node`, selected by `app=api`.
fn bare_pod(name: &str, node: &str) -> Value {
    json!({
        "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}"), "labels": {"app": "api"},
            "creationTimestamp": "2026-01-01T10:00:00Z"},
        "spec": {"nodeName": node, "containers": []},
        "status": {"phase": "Running", "startTime": "2026-01-01T10:00:00Z"}
    })
}

fn nodes(names: &[&str]) -> Vec<Arc<k8s_openapi::api::core::v1::Node>> {
    names.iter().map(|n| obj(node(n))).collect()
}

/// `view(uid)` selecting `app=<app>`.
fn selecting(uid: &str, app: &str) -> WindowFacts {
    WindowFacts {
        selector: serde_json::from_value(json!({"matchLabels": {"app": app}})).unwrap(),
        ..view(uid, true)
    }
}

fn names(set: &Option<std::collections::BTreeSet<String>>) -> Vec<&str> {
    set.iter().flatten().map(String::as_str).collect()
}

#[test]
fn without_a_cap_every_selected_pod_is_admitted() {
    let mut w = world(vec![bare_pod("a", "n1"), bare_pod("b", "n2")]);
    w.nodes = nodes(&["n1", "n2"]);
    let admission = admit(0, &[view("w1", true)], "w1", &w);
    assert_eq!(admission, Admission::default());
    assert_eq!(admission.refusal(0), None);
}

#[test]
fn a_window_past_the_cap_protects_what_fits_and_says_what_it_does_not() {
    let mut w = world(vec![
        bare_pod("a", "n1"),
        bare_pod("b", "n2"),
        bare_pod("c", "n3"),
    ]);
    w.nodes = nodes(&["n1", "n2", "n3"]);
    let win = view("w1", true);
    let admission = admit(2, std::slice::from_ref(&win), "w1", &w);
    assert_eq!(names(&admission.pods), ["a", "b"]);
    assert_eq!(admission.refused, ["pod/c"]);
    assert_eq!(admission.held, 2);
    let message = admission.refusal(2).unwrap();
    assert!(message.contains("--max-nodes-per-namespace=2"), "{message}");
    assert!(message.contains("pod/c"), "{message}");

    // Planned with the admission, the window writes nothing on the refused pod or its node.
    let limited = WindowFacts {
        admitted: admission.pods.map(Arc::new),
        ..win
    };
    let p = plan(&limited, &w);
    assert_eq!(annotated(&p, Target::Pod), ["a", "b"]);
    assert_eq!(annotated(&p, Target::Node), ["n1", "n2"]);
    assert_eq!((p.pods, p.nodes), (2, 2));
}

#[test]
fn the_earlier_window_comes_first_and_nodes_already_held_cost_nothing() {
    let mut w = world(vec![
        bare_pod("a", "n1"),
        bare_pod("b", "n2"),
        json!({"metadata": {"name": "c", "namespace": NS, "labels": {"app": "web"}},
            "spec": {"nodeName": "n2", "containers": []}, "status": {"phase": "Running"}}),
        json!({"metadata": {"name": "d", "namespace": NS, "labels": {"app": "web"}},
            "spec": {"nodeName": "n3", "containers": []}, "status": {"phase": "Running"}}),
    ]);
    w.nodes = nodes(&["n1", "n2", "n3"]);
    let (first, second) = (selecting("w1", "api"), selecting("w2", "web"));
    let windows = [first, second];
    // The first window fills the cap; the second gets the node they share, not a third.
    assert_eq!(admit(2, &windows, "w1", &w).pods, None);
    let admission = admit(2, &windows, "w2", &w);
    assert_eq!(names(&admission.pods), ["c"]);
    assert_eq!(admission.refused, ["pod/d"]);
}

#[test]
fn what_a_window_holds_stays_held_when_an_earlier_window_fills_the_cap() {
    let mut w = world(vec![
        bare_pod("a", "n1"),
        bare_pod("b", "n2"),
        json!({"metadata": {"name": "c", "namespace": NS, "labels": {"app": "web"}},
            "spec": {"nodeName": "n3", "containers": []}, "status": {"phase": "Running"}}),
    ]);
    w.nodes = nodes(&["n1", "n2", "n3"]);
    let (first, second) = (selecting("w1", "api"), selecting("w2", "web"));
    // The second window protected its pod on n3 while the first had not yet.
    let w = settle(w, &second);
    let windows = [first, second];
    let second_admission = admit(2, &windows, "w2", &w);
    assert_eq!(second_admission.pods, None, "its held pod stays protected");
    // The first, though earlier, gets only what is left: one more node.
    let first_admission = admit(2, &windows, "w1", &w);
    assert_eq!(names(&first_admission.pods), ["a"]);
    assert_eq!(first_admission.refused, ["pod/b"]);
    assert_eq!(first_admission.held, 2);
}

#[test]
fn a_workloads_pdb_counts_every_node_its_pods_run_on() {
    // Three replicas of one Deployment over three nodes: its PDB would hold all three.
    let mut w = world(vec![
        pod("api-1-a", "api-1", "n1"),
        pod("api-1-b", "api-1", "n2"),
        pod("api-1-c", "api-1", "n3"),
    ]);
    w.nodes = nodes(&["n1", "n2", "n3"]);
    w.replica_sets = vec![rs("api-1", Some("api"), "1", 3)];
    let admission = admit(2, &[view("w1", true)], "w1", &w);
    assert_eq!(admission.pods, Some(Default::default()));
    assert_eq!(admission.refused, ["Deployment/api"]);
    assert_eq!(admit(3, &[view("w1", true)], "w1", &w).pods, None);
}

#[test]
fn daemon_set_pods_count_a_node_each() {
    let mut win = view("w1", true);
    win.selector = Default::default();
    win.protect.daemon_sets = true;
    let admission = admit(
        2,
        std::slice::from_ref(&win),
        "w1",
        &world_with_a_daemon_set(),
    );
    // api-1-a's Deployment and agent-1 share n1; agent-2 takes the second node.
    assert_eq!(names(&admission.pods), ["agent-1", "agent-2", "api-1-a"]);
    assert_eq!(admission.refused, ["pod/agent-3"]);
}
