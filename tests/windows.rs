//! The window controller against the real cluster: PDBs computed by the real disruption
//! controller, annotations on pods and nodes, the Eviction API's answers, release on close,
//! expiry and deletion, overlapping windows, reused PDBs, and a crash of the operator.

mod support;

use std::time::{Duration, Instant};

use disruption_guard::resources::{Phase, TestWindow};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use support::fixtures::pdb_max_unavailable_zero;
use support::operator::Operator;
use support::windows::*;
use support::{wait, with_namespace};

const LIMIT: Duration = Duration::from_secs(30);

fn name(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap()
}

/// Whether the guard's PDB `name` exists and the disruption controller computed it to allow
/// no disruption.
async fn pdb_blocks(client: &Client, ns: &str, name: &str) -> bool {
    let Ok(pdb) = Api::<PodDisruptionBudget>::namespaced(client.clone(), ns)
        .get(name)
        .await
    else {
        return false;
    };
    let Some(status) = pdb.status else {
        return false;
    };
    status.observed_generation == pdb.metadata.generation
        && status.current_healthy == 1
        && status.disruptions_allowed == 0
}

async fn get_window(client: &Client, ns: &str, name: &str) -> TestWindow {
    Api::<TestWindow>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .unwrap()
}

#[tokio::test]
async fn an_open_window_protects_a_lone_pod_within_two_seconds_and_follows_a_rollout() {
    with_namespace(|client, ns| async move {
        let op = Operator::start(&ns, &[]).await;
        let (node, pod) = lone_pod_on_private_node(&client, &ns, "api").await;
        let pod_name = name(&pod);

        let started = Instant::now();
        open(&client, &ns, &window("w", "api", "10m", json!({}))).await;
        wait::until("PDB computed, annotations on pod and node, window Ready", Duration::from_secs(2), || async {
            pdb_blocks(&client, &ns, "api-dg").await
                && protected(&client, &ns, &pod_name, &node).await
                && is_ready(&get_window(&client, &ns, "w").await)
        })
        .await;
        eprintln!("open -> protected and Ready in {:?}", started.elapsed());

        let w = get_window(&client, &ns, "w").await;
        let status = w.status.unwrap();
        assert_eq!(status.phase, Phase::Active);
        assert_eq!((status.protected.pods, status.protected.nodes, status.protected.workloads), (1, 1, 1));
        assert_eq!(status.protected.pdbs, vec!["api-dg".to_string()]);
        assert!(status.opened_at.is_some() && status.expires_at.is_some());
        // The PDB belongs to the namespace's protection, held by its field manager.
        let pdb = Api::<PodDisruptionBudget>::namespaced(client.clone(), &ns).get("api-dg").await.unwrap();
        assert_eq!(guard_managers(&pdb.metadata), vec![format!("disruption-guard/{ns}")]);
        assert!(pdb.metadata.owner_references.unwrap_or_default().is_empty());

        // A rollout during the window: the new pod is protected too.
        Api::<Deployment>::namespaced(client.clone(), &ns)
            .patch(
                "api",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"template": {"metadata": {"annotations": {"test/rollout": "1"}}}}})),
            )
            .await
            .unwrap();
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let new_pod = wait::for_some("the rollout's new pod", LIMIT, || async {
            let list = pods.list(&ListParams::default().labels("app=api")).await.ok()?;
            list.items.into_iter().find(|p| p.metadata.uid != pod.metadata.uid)
        })
        .await;
        let new_name = name(&new_pod);
        wait::until("the new pod to carry the annotations", Duration::from_secs(5), || async {
            protected(&client, &ns, &new_name, &node).await
        })
        .await;

        let metrics = op.metrics().await;
        assert!(metrics.contains("disruption_guard_windows{phase=\"Active\"} 1"), "{metrics}");
        assert!(metrics.contains("disruption_guard_window_ready_seconds_count 1"), "{metrics}");
    })
    .await;
}

#[tokio::test]
async fn eviction_is_refused_with_429_during_the_window_and_allowed_after_close() {
    with_namespace(|client, ns| async move {
        let _op = Operator::start(&ns, &[]).await;
        let (node, pod) = lone_pod_on_private_node(&client, &ns, "api").await;
        let pod_name = name(&pod);
        open(&client, &ns, &window("w", "api", "10m", json!({}))).await;
        until_ready(&client, &ns, "w", LIMIT).await;
        wait::until("the PDB to be computed", LIMIT, || {
            pdb_blocks(&client, &ns, "api-dg")
        })
        .await;
        assert_eq!(evict(&client, &ns, &pod_name).await, 429);

        close(&client, &ns, "w").await;
        until_released(&client, &ns, &pod_name, &node, Duration::from_secs(5)).await;
        wait::until("the eviction to be allowed", LIMIT, || async {
            evict(&client, &ns, &pod_name).await == 200
        })
        .await;
    })
    .await;
}

/// How a test ends its window.
#[derive(Clone, Copy, Debug)]
enum End {
    Close,
    Expire,
    Delete,
}

/// Opens a window over a lone pod whose pod and node already carry a person's
/// `do-not-disrupt`, ends it, and checks that exactly the guard's writes are gone.
async fn ending_keeps_what_a_person_set(end: End) {
    with_namespace(move |client, ns| async move {
        let _op = Operator::start(&ns, &[]).await;
        let (node, pod) = lone_pod_on_private_node(&client, &ns, "api").await;
        let pod_name = name(&pod);
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let nodes: Api<Node> = Api::all(client.clone());
        annotate_as_person(&pods, &pod_name, DND, "true").await;
        annotate_as_person(&nodes, &node, DND, "true").await;

        let ttl = if matches!(end, End::Expire) {
            "8s"
        } else {
            "10m"
        };
        open(&client, &ns, &window("w", "api", ttl, json!({}))).await;
        let ready = until_ready(&client, &ns, "w", LIMIT).await;
        assert!(protected(&client, &ns, &pod_name, &node).await);
        assert!(!guard_pdbs(&client, &ns).await.is_empty());

        // Which write comes first: the end in the window's status, or the pod's release.
        let windows = Api::<TestWindow>::namespaced(client.clone(), &ns);
        let pod_version = pods.get(&pod_name).await.unwrap().metadata.resource_version;
        let ended_at_version = tokio::spawn(first_version_where(
            windows.clone(),
            "w".into(),
            ready.metadata.resource_version.clone().unwrap(),
            |w: &TestWindow| w.status.as_ref().is_some_and(|s| s.phase.is_final()),
        ));
        let released_at_version = tokio::spawn(first_version_where(
            pods.clone(),
            pod_name.clone(),
            pod_version.unwrap(),
            |p: &Pod| guard_managers(&p.metadata).is_empty(),
        ));

        let started = Instant::now();
        match end {
            End::Close => close(&client, &ns, "w").await,
            End::Expire => {}
            End::Delete => {
                let out = support::kubectl()
                    .args(["delete", "tw", "w", "-n", &ns, "--wait=true"])
                    .output()
                    .unwrap();
                assert!(
                    out.status.success(),
                    "{}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
        if matches!(end, End::Delete) {
            until_released(&client, &ns, &pod_name, &node, Duration::from_secs(10)).await;
        } else {
            // What the status promises: once it says released, nothing of the guard is left.
            until_status_released(&client, &ns, "w", Duration::from_secs(10)).await;
            assert_released(&client, &ns, &pod_name, &node).await;
        }
        eprintln!("{end:?}: released {:?} after the end", started.elapsed());
        let released_at = tokio::time::timeout(LIMIT, released_at_version)
            .await
            .expect("the pod's release seen by its watch")
            .unwrap();
        if matches!(end, End::Close | End::Expire) {
            let ended_at = tokio::time::timeout(LIMIT, ended_at_version)
                .await
                .expect("the window's end seen by its watch")
                .unwrap();
            assert!(
                ended_at < released_at,
                "the end is recorded (version {ended_at}) before the pod is released (version {released_at})"
            );
        }

        let p = pods.get(&pod_name).await.unwrap();
        let n = nodes.get(&node).await.unwrap();
        assert_eq!(
            annotation(&p.metadata, DND),
            Some("true"),
            "a person's pod annotation stays"
        );
        assert_eq!(
            annotation(&n.metadata, DND),
            Some("true"),
            "a person's node annotation stays"
        );
        match end {
            End::Delete => {
                wait::until("the window to be gone", LIMIT, || async {
                    windows.get_opt("w").await.unwrap().is_none()
                })
                .await
            }
            End::Close | End::Expire => {
                let w = windows.get("w").await.unwrap();
                let status = w.status.unwrap();
                let expected = if matches!(end, End::Close) {
                    Phase::Closed
                } else {
                    Phase::Expired
                };
                assert_eq!(status.phase, expected);
                assert!(status.ended_at.is_some());
                assert_eq!(status.protected.pods, 0);
            }
        }
    })
    .await;
}

#[tokio::test]
async fn closing_a_window_removes_its_protection_and_keeps_a_persons_do_not_disrupt() {
    ending_keeps_what_a_person_set(End::Close).await;
}

#[tokio::test]
async fn an_expired_window_removes_its_protection_and_keeps_a_persons_do_not_disrupt() {
    ending_keeps_what_a_person_set(End::Expire).await;
}

#[tokio::test]
async fn deleting_a_window_removes_its_protection_and_keeps_a_persons_do_not_disrupt() {
    ending_keeps_what_a_person_set(End::Delete).await;
}

#[tokio::test]
async fn closing_one_of_two_overlapping_windows_keeps_the_others_protection() {
    with_namespace(|client, ns| async move {
        let op = Operator::start(&ns, &[]).await;
        let (node, pod) = lone_pod_on_private_node(&client, &ns, "api").await;
        let pod_name = name(&pod);
        open(&client, &ns, &window("a", "api", "10m", json!({}))).await;
        until_ready(&client, &ns, "a", LIMIT).await;
        // b selects what a protects already: Ready with no protection write of its own.
        let writes = || async {
            sample(&op.metrics().await, "disruption_guard_window_writes_total").unwrap()
        };
        let before = writes().await;
        assert!(before > 0.0);
        open(&client, &ns, &window("b", "api", "10m", json!({}))).await;
        until_ready(&client, &ns, "b", LIMIT).await;
        assert_eq!(writes().await, before, "b's opening wrote no protection");
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let ours = |meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
            let manager = format!("disruption-guard/{ns}");
            let entries = meta.managed_fields.iter().flatten();
            let ours = entries.filter(|m| m.manager.as_deref() == Some(manager.as_str()));
            ours.map(|m| (m.time.clone(), m.fields_v1.clone()))
                .collect::<Vec<_>>()
        };
        let before = ours(&pods.get(&pod_name).await.unwrap().metadata);

        close(&client, &ns, "a").await;
        wait::until("window a to release", LIMIT, || async {
            let a = get_window(&client, &ns, "a").await;
            a.status.as_ref().is_some_and(|s| {
                s.phase == Phase::Closed && s.conditions.iter().any(|c| c.reason == "Closed")
            })
        })
        .await;
        // b still wants everything a wanted: closing a wrote nothing to the pod.
        let p = pods.get(&pod_name).await.unwrap();
        assert_eq!(
            ours(&p.metadata),
            before,
            "the namespace's entry on the pod is as it was"
        );
        assert_eq!(
            guard_managers(&p.metadata),
            vec![format!("disruption-guard/{ns}")]
        );
        assert!(
            protected(&client, &ns, &pod_name, &node).await,
            "b's protection stays"
        );
        assert!(is_ready(&get_window(&client, &ns, "b").await));
        wait::until("the PDB to be computed", LIMIT, || {
            pdb_blocks(&client, &ns, "api-dg")
        })
        .await;
        assert_eq!(evict(&client, &ns, &pod_name).await, 429);

        close(&client, &ns, "b").await;
        until_released(&client, &ns, &pod_name, &node, Duration::from_secs(5)).await;
        let p = pods.get(&pod_name).await.unwrap();
        assert_eq!(annotation(&p.metadata, DND), None);
    })
    .await;
}

#[tokio::test]
async fn a_users_pdb_over_the_pods_is_reused_instead_of_adding_a_second_one() {
    with_namespace(|client, ns| async move {
        let _op = Operator::start(&ns, &[]).await;
        let (_node, pod) = lone_pod_on_private_node(&client, &ns, "api").await;
        let pdbs = Api::<PodDisruptionBudget>::namespaced(client.clone(), &ns);
        pdbs.create(
            &PostParams::default(),
            &pdb_max_unavailable_zero("users", "api"),
        )
        .await
        .unwrap();
        open(&client, &ns, &window("w", "api", "10m", json!({}))).await;
        let w = until_ready(&client, &ns, "w", LIMIT).await;
        let status = w.status.unwrap();
        assert_eq!(status.protected.reused_pdbs, vec!["users".to_string()]);
        assert_eq!(status.protected.pdbs, vec!["users".to_string()]);
        // A PDB the caches had not seen yet when the window opened may be answered by a guard
        // PDB for a moment; the next reconcile sees the user's and removes the guard's.
        wait::until_empty("no second PDB", LIMIT, || async {
            guard_pdbs(&client, &ns).await
        })
        .await;
        assert_eq!(
            pdbs.list(&ListParams::default()).await.unwrap().items.len(),
            1
        );
        wait::until("the user's PDB to be computed", LIMIT, || {
            pdb_blocks(&client, &ns, "users")
        })
        .await;
        assert_eq!(
            evict(&client, &ns, &name(&pod)).await,
            429,
            "blocked by the user's PDB, not a 500"
        );
    })
    .await;
}

#[tokio::test]
async fn a_window_that_expires_while_the_operator_is_killed_is_released_right_after_restart() {
    with_namespace(|client, ns| async move {
        let mut op = Operator::start(&ns, &[]).await;
        let (node, pod) = lone_pod_on_private_node(&client, &ns, "api").await;
        let pod_name = name(&pod);
        open(&client, &ns, &window("w", "api", "6s", json!({}))).await;
        let w = until_ready(&client, &ns, "w", LIMIT).await;
        let expires_at = w.status.unwrap().expires_at.unwrap().0;
        op.kill();

        // While the operator is down the protection stays in place.
        assert!(protected(&client, &ns, &pod_name, &node).await);
        let wait_for = expires_at
            .duration_since(jiff::Timestamp::now())
            .as_secs_f64()
            .max(0.0)
            + 1.0;
        tokio::time::sleep(Duration::from_secs_f64(wait_for)).await;
        assert!(
            protected(&client, &ns, &pod_name, &node).await,
            "nothing releases while the operator is down"
        );
        assert!(!guard_pdbs(&client, &ns).await.is_empty());

        let restarted = Instant::now();
        op.restart().await;
        until_released(&client, &ns, &pod_name, &node, Duration::from_secs(5)).await;
        eprintln!("released {:?} after the restart began", restarted.elapsed());
        let status = wait::for_some(
            "the window to be reported Expired",
            Duration::from_secs(5),
            || async {
                get_window(&client, &ns, "w")
                    .await
                    .status
                    .filter(|s| s.phase == Phase::Expired)
            },
        )
        .await;
        assert_eq!(
            status.ended_at.unwrap().0,
            expires_at,
            "it ended at expiresAt, not at restart"
        );
    })
    .await;
}

#[tokio::test]
async fn a_window_whose_selector_matches_nothing_is_active_and_ready_with_zero_pods() {
    with_namespace(|client, ns| async move {
        let _op = Operator::start(&ns, &[]).await;
        open(&client, &ns, &window("w", "nothing-here", "10m", json!({}))).await;
        let w = until_ready(&client, &ns, "w", LIMIT).await;
        let status = w.status.unwrap();
        assert_eq!(status.phase, Phase::Active);
        assert_eq!((status.protected.pods, status.protected.nodes), (0, 0));
    })
    .await;
}

#[tokio::test]
async fn the_karpenter_duration_option_writes_a_go_duration_ending_at_expires_at() {
    with_namespace(|client, ns| async move {
        let _op = Operator::start(&ns, &[]).await;
        let (_node, pod) = lone_pod_on_private_node(&client, &ns, "api").await;
        open(
            &client,
            &ns,
            &window(
                "w",
                "api",
                "30m",
                json!({"protect": {"karpenterDuration": true}}),
            ),
        )
        .await;
        let w = until_ready(&client, &ns, "w", LIMIT).await;
        let expires_at = w.status.unwrap().expires_at.unwrap().0;
        let p = Api::<Pod>::namespaced(client.clone(), &ns)
            .get(&name(&pod))
            .await
            .unwrap();
        let start = p.status.as_ref().unwrap().start_time.as_ref().unwrap().0;
        let value = annotation(&p.metadata, DND).unwrap().to_string();
        let secs: i64 = value
            .strip_suffix('s')
            .expect("a Go duration in seconds")
            .parse()
            .unwrap();
        let expected = expires_at.duration_since(start).as_secs();
        assert!((secs - expected).abs() <= 1, "{value} vs {expected}s");
        assert_eq!(annotation(&p.metadata, SAFE_TO_EVICT), Some("false"));
    })
    .await;
}

#[tokio::test]
async fn the_api_server_refuses_windows_with_a_bad_ttl_or_a_malformed_selector() {
    with_namespace(|client, ns| async move {
        support::operator::ensure_crd();
        let api = Api::<TestWindow>::namespaced(client.clone(), &ns);
        let bad = [
            ("negative", json!({"ttl": "-5m"})),
            ("zero", json!({"ttl": "0s"})),
            ("absurd", json!({"ttl": "1000h"})),
            ("operator", json!({"selector": {"matchExpressions": [{"key": "app", "operator": "Like", "values": ["a"]}]}})),
            ("novalues", json!({"selector": {"matchExpressions": [{"key": "app", "operator": "In"}]}})),
            ("extravalues", json!({"selector": {"matchExpressions": [{"key": "app", "operator": "Exists", "values": ["a"]}]}})),
        ];
        for (name, extra) in bad {
            let w = window(name, "api", "10m", extra);
            match api.create(&PostParams::default(), &w).await {
                Err(kube::Error::Api(status)) => assert_eq!(status.code, 422, "{name}: {status:?}"),
                other => panic!("{name}: expected the API server to refuse it, got {other:?}"),
            }
        }
        api.create(&PostParams::default(), &window("good", "api", "10m", json!({}))).await.expect("a valid window");

        let out = support::kubectl().args(["get", "tw", "-n", &ns]).output().unwrap();
        let header = String::from_utf8_lossy(&out.stdout).lines().next().unwrap_or_default().to_string();
        for column in ["NAME", "READY", "PHASE", "EXPIRES", "PODS", "NODES", "REASON", "AGE"] {
            assert!(header.contains(column), "missing column {column} in {header:?}");
        }
        let _ = api.delete("good", &DeleteParams::default()).await;
    })
    .await;
}

#[tokio::test]
async fn the_report_counts_blocked_evictions_disrupted_nodes_and_pods_deleted_anyway() {
    with_namespace(|client, ns| async move {
        let _op = Operator::start(&ns, &[]).await;
        let (node, pod) = lone_pod_on_private_node(&client, &ns, "api").await;
        let pod_name = name(&pod);
        open(&client, &ns, &window("w", "api", "10m", json!({}))).await;
        until_ready(&client, &ns, "w", LIMIT).await;
        // This test is about the report: keep the drain watcher (same operator) from rolling
        // the Deployment out on the cordon, which would make the deletion below a replacement.
        Api::<Deployment>::namespaced(client.clone(), &ns)
            .patch(
                "api",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {"disruption-guard.io/rollout-on-drain": "false"}}})),
            )
            .await
            .unwrap();

        // A drain starts: the node is cordoned and the pod stays (its eviction is refused).
        Api::<Node>::all(client.clone())
            .patch(
                &node,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"unschedulable": true}})),
            )
            .await
            .unwrap();
        wait::until(
            "the report to show the blocked eviction and the node",
            LIMIT,
            || async {
                let r = get_window(&client, &ns, "w").await.status.unwrap().report;
                r.evictions_blocked == 1 && r.nodes_disrupted == vec![node.clone()]
            },
        )
        .await;
        let report = get_window(&client, &ns, "w").await.status.unwrap().report;
        assert_eq!(report.pods_disrupted, 0);

        // Somebody deletes the protected pod anyway.
        Api::<Pod>::namespaced(client.clone(), &ns)
            .delete(&pod_name, &DeleteParams::default())
            .await
            .unwrap();
        wait::until("the report to show the disrupted pod", LIMIT, || async {
            let r = get_window(&client, &ns, "w").await.status.unwrap().report;
            r.pods_disrupted == 1 && r.disrupted_pods == vec![pod_name.clone()]
        })
        .await;
        close(&client, &ns, "w").await;
        let status = wait::for_some("the window to close", LIMIT, || async {
            get_window(&client, &ns, "w")
                .await
                .status
                .filter(|s| s.phase == Phase::Closed)
        })
        .await;
        assert_eq!(
            status.report.evictions_blocked, 1,
            "the report stays after close"
        );
        assert_eq!(status.report.pods_disrupted, 1);
    })
    .await;
}

#[tokio::test]
async fn a_rollout_by_the_guard_is_counted_and_its_replaced_pod_is_not_a_disruption() {
    with_namespace(|client, ns| async move {
        let _op = Operator::start(&ns, &[]).await;
        let (_node, pod) = lone_pod_on_private_node(&client, &ns, "api").await;
        open(&client, &ns, &window("w", "api", "10m", json!({}))).await;
        until_ready(&client, &ns, "w", LIMIT).await;
        wait::until("the window to track the Deployment", LIMIT, || async {
            get_window(&client, &ns, "w").await.status.unwrap().tracking.restarted_at.contains_key("api")
        })
        .await;

        // What the drain watcher does: `kubectl rollout restart`, written as disruption-guard.
        let restart = json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "api"},
            "spec": {"template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": jiff::Timestamp::now().to_string()}}}}
        });
        Api::<Deployment>::namespaced(client.clone(), &ns)
            .patch("api", &PatchParams::apply("disruption-guard"), &Patch::Apply(&restart))
            .await
            .unwrap();
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        wait::until("the old pod to be replaced", LIMIT, || async {
            pods.get_opt(&name(&pod)).await.unwrap().is_none()
        })
        .await;
        wait::until("the report to count the rollout", LIMIT, || async {
            let r = get_window(&client, &ns, "w").await.status.unwrap().report;
            r.rollouts == 1
        })
        .await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let report = get_window(&client, &ns, "w").await.status.unwrap().report;
        assert_eq!(report.pods_disrupted, 0, "{report:?}");
    })
    .await;
}

#[tokio::test]
async fn the_start_up_sweep_removes_what_no_window_wants_and_keeps_other_namespaces_windows() {
    with_namespace(|client, ns| async move {
        let (node, pod) = lone_pod_on_private_node(&client, &ns, "api").await;
        let pod_name = name(&pod);
        // A live window of another operator, in another namespace.
        let other_ns = format!("{ns}-other");
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        namespaces
            .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": other_ns}})).unwrap())
            .await
            .unwrap();
        support::operator::ensure_crd();
        let live = open(&client, &other_ns, &window("elsewhere", "api", "10m", json!({}))).await;
        let live_manager = format!("disruption-guard/{}", live.metadata.uid.unwrap());
        let dead_manager = "disruption-guard/00000000-0000-0000-0000-00000000dead".to_string();

        let dnd = |kind: &str, name: &str, key: &str| {
            json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": name, "annotations": {DND: "true", key: "x"}}})
        };
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let nodes: Api<Node> = Api::all(client.clone());
        pods.patch(&pod_name, &PatchParams::apply(&dead_manager), &Patch::Apply(dnd("Pod", &pod_name, SAFE_TO_EVICT)))
            .await
            .unwrap();
        nodes
            .patch(&node, &PatchParams::apply(&dead_manager), &Patch::Apply(dnd("Node", &node, SCALE_DOWN_DISABLED)))
            .await
            .unwrap();
        nodes
            .patch(&node, &PatchParams::apply(&live_manager), &Patch::Apply(dnd("Node", &node, "test/live")))
            .await
            .unwrap();
        let stale: PodDisruptionBudget = serde_json::from_value(json!({
            "metadata": {"name": "stale-dg", "labels": {"app.kubernetes.io/managed-by": "disruption-guard"}},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "api"}}}
        }))
        .unwrap();
        Api::<PodDisruptionBudget>::namespaced(client.clone(), &ns).create(&PostParams::default(), &stale).await.unwrap();

        let _op = Operator::start(&ns, &[]).await;
        wait::until("the leftovers to be swept", Duration::from_secs(5), || async {
            let p = pods.get(&pod_name).await.unwrap();
            let n = nodes.get(&node).await.unwrap();
            guard_pdbs(&client, &ns).await.is_empty()
                && guard_managers(&p.metadata).is_empty()
                && annotation(&p.metadata, DND).is_none()
                && guard_managers(&n.metadata) == vec![live_manager.clone()]
        })
        .await;
        let n = nodes.get(&node).await.unwrap();
        assert_eq!(annotation(&n.metadata, DND), Some("true"), "the live window's annotation stays");
        assert_eq!(annotation(&n.metadata, "test/live"), Some("x"));
        assert_eq!(annotation(&n.metadata, SCALE_DOWN_DISABLED), None);

        let _ = Api::<TestWindow>::namespaced(client.clone(), &other_ns).delete("elsewhere", &DeleteParams::default()).await;
        let _ = namespaces.delete(&other_ns, &DeleteParams::background()).await;
    })
    .await;
}

/// Reasons and notes (messages) of the Events recorded on window `name`.
async fn events_of(client: &Client, ns: &str, name: &str) -> Vec<(String, String)> {
    Api::<k8s_openapi::api::core::v1::Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect()
}

#[tokio::test]
async fn a_renewal_extends_an_open_window_and_max_ttl_caps_it_with_events_on_the_way() {
    with_namespace(|client, ns| async move {
        let _op = Operator::start(&ns, &["--max-ttl=1h"]).await;
        let (node, pod) = lone_pod_on_private_node(&client, &ns, "api").await;
        open(&client, &ns, &window("w", "api", "6s", json!({}))).await;
        let w = until_ready(&client, &ns, "w", LIMIT).await;
        let status = w.status.unwrap();
        let opened = status.opened_at.unwrap().0;
        assert_eq!(
            status.expires_at.unwrap().0,
            opened + jiff::SignedDuration::from_secs(6)
        );

        Api::<TestWindow>::namespaced(client.clone(), &ns)
            .patch(
                "w",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"ttl": "100h"}})),
            )
            .await
            .unwrap();
        wait::until(
            "the renewal, capped at --max-ttl",
            Duration::from_secs(5),
            || async {
                let s = get_window(&client, &ns, "w").await.status.unwrap();
                s.expires_at.unwrap().0 == opened + jiff::SignedDuration::from_hours(1)
            },
        )
        .await;
        tokio::time::sleep(Duration::from_secs(7)).await;
        let s = get_window(&client, &ns, "w").await.status.unwrap();
        assert_eq!(s.phase, Phase::Active, "renewed past its first ttl");
        assert!(protected(&client, &ns, &name(&pod), &node).await);

        close(&client, &ns, "w").await;
        wait::until("Opened, Renewed and Closed Events", LIMIT, || async {
            let reasons: Vec<String> = events_of(&client, &ns, "w")
                .await
                .into_iter()
                .map(|e| e.0)
                .collect();
            ["Opened", "Renewed", "Closed"]
                .iter()
                .all(|r| reasons.iter().any(|x| x == r))
        })
        .await;
        // Ready in the pass that opened it: one Event for both, none of its own for Ready.
        let events = events_of(&client, &ns, "w").await;
        let reasons: Vec<&str> = events.iter().map(|e| e.0.as_str()).collect();
        assert_eq!(
            reasons.iter().filter(|r| **r == "Opened").count(),
            1,
            "{events:?}"
        );
        assert!(
            !reasons.contains(&"Ready"),
            "no Ready Event of its own: {events:?}"
        );
        let note = &events.iter().find(|e| e.0 == "Opened").unwrap().1;
        let ready = status.conditions[0].message.as_str();
        assert!(
            ready.contains("1 pods, 1 nodes") && ready.ends_with("protected"),
            "{ready}"
        );
        let until = format!("open until {}", opened + jiff::SignedDuration::from_secs(6));
        assert!(
            note.starts_with(&until) && note.ends_with(&format!("; {ready}")),
            "{note}"
        );
    })
    .await;
}

#[tokio::test]
async fn an_ended_window_keeps_its_report_for_the_retention_then_is_deleted() {
    with_namespace(|client, ns| async move {
        let _op = Operator::start(&ns, &["--retention=3s"]).await;
        open(&client, &ns, &window("w", "api", "10m", json!({}))).await;
        until_ready(&client, &ns, "w", LIMIT).await;
        close(&client, &ns, "w").await;
        let windows = Api::<TestWindow>::namespaced(client.clone(), &ns);
        wait::until("the window to close", LIMIT, || async {
            windows
                .get("w")
                .await
                .unwrap()
                .status
                .is_some_and(|s| s.phase == Phase::Closed)
        })
        .await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(
            windows.get_opt("w").await.unwrap().is_some(),
            "kept during the retention"
        );
        wait::until(
            "the window to be deleted after the retention",
            Duration::from_secs(10),
            || async { windows.get_opt("w").await.unwrap().is_none() },
        )
        .await;
    })
    .await;
}

/// The value of the sample `series` (name and labels exactly as exported), if present.
fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// What a running operator exports beside its windows, checked against a real API server: its
/// reconciles timed by controller and result, its requests to the API server by verb and code,
/// and the standard process metrics, unprefixed.
fn operator_metrics_describe_the_run(metrics: &str) {
    let at_least = |series: &str, min: f64| {
        let value = sample(metrics, series);
        assert!(
            value.is_some_and(|v| v >= min),
            "{series} = {value:?}, expected at least {min}\n{metrics}"
        );
    };
    // Two windows, each reconciled several times (open, Ready, end).
    at_least(
        "disruption_guard_reconcile_duration_seconds_count{controller=\"window\",result=\"success\"}",
        2.0,
    );
    // The drain watcher's series exist from the start (whether a node of the shared cluster is
    // being disrupted right now, by Karpenter after an earlier test, is not this test's).
    assert!(
        sample(
            metrics,
            "disruption_guard_reconcile_duration_seconds_count{controller=\"drain\",result=\"success\"}"
        )
        .is_some(),
        "{metrics}"
    );
    // Start-up reads (/version, the CRD), the caches' lists and watches, the finalizer and
    // status patches of the windows.
    for verb in ["get", "list", "watch", "patch"] {
        at_least(
            &format!("disruption_guard_kube_requests_total{{verb=\"{verb}\",code=\"200\"}}"),
            1.0,
        );
        at_least(
            &format!("disruption_guard_kube_request_duration_seconds_count{{verb=\"{verb}\"}}"),
            1.0,
        );
    }
    for line in metrics
        .lines()
        .filter(|l| l.contains("kube_requests_total{"))
    {
        assert!(
            !line.contains('/') && !line.contains("namespace"),
            "a path or name in a label: {line}"
        );
    }
    at_least("process_resident_memory_bytes", f64::from(1 << 20));
    at_least("process_virtual_memory_bytes", f64::from(1 << 20));
    at_least("process_cpu_seconds_total", 0.01);
    at_least("process_open_fds", 3.0);
    let open = sample(metrics, "process_open_fds").unwrap();
    at_least("process_max_fds", open);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let started = sample(metrics, "process_start_time_seconds").unwrap();
    assert!(
        started <= now + 1.0 && started > now - 3600.0,
        "process_start_time_seconds {started}, now {now}"
    );
    assert!(!metrics.contains("disruption_guard_process_"), "{metrics}");
}

#[tokio::test]
async fn a_closed_and_an_expired_window_are_each_counted_once_with_their_duration() {
    with_namespace(|client, ns| async move {
        let mut op = Operator::start(&ns, &[]).await;
        let before = op.metrics().await;
        for end in ["closed", "expired"] {
            // The series exist before the first window ends, so increase() sees it.
            assert_eq!(
                sample(
                    &before,
                    &format!("disruption_guard_windows_ended_total{{end=\"{end}\"}}")
                ),
                Some(0.0),
                "{before}"
            );
        }
        open(
            &client,
            &ns,
            &window("closed", "nothing-a", "10m", json!({})),
        )
        .await;
        open(
            &client,
            &ns,
            &window("expires", "nothing-b", "5s", json!({})),
        )
        .await;
        until_ready(&client, &ns, "closed", LIMIT).await;
        until_ready(&client, &ns, "expires", LIMIT).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        close(&client, &ns, "closed").await;

        let windows = Api::<TestWindow>::namespaced(client.clone(), &ns);
        let mut spans = Vec::new();
        for (name, phase) in [("closed", Phase::Closed), ("expires", Phase::Expired)] {
            let status = wait::for_some("the window to end", LIMIT, || async {
                windows
                    .get(name)
                    .await
                    .ok()?
                    .status
                    .filter(|s| s.phase == phase)
            })
            .await;
            let opened = status.opened_at.unwrap().0;
            let ended = status.ended_at.unwrap().0;
            spans.push(ended.duration_since(opened).as_secs_f64());
        }
        let metrics = wait::for_some("both ends in /metrics", LIMIT, || async {
            let text = op.metrics().await;
            let counted = |end: &str| {
                sample(
                    &text,
                    &format!("disruption_guard_windows_ended_total{{end=\"{end}\"}}"),
                )
            };
            (counted("closed") == Some(1.0) && counted("expired") == Some(1.0)).then_some(text)
        })
        .await;
        for (end, span) in ["closed", "expired"].into_iter().zip(&spans) {
            let count = format!("disruption_guard_window_duration_seconds_count{{end=\"{end}\"}}");
            let sum = format!("disruption_guard_window_duration_seconds_sum{{end=\"{end}\"}}");
            assert_eq!(sample(&metrics, &count), Some(1.0), "{metrics}");
            assert_eq!(
                sample(&metrics, &sum),
                Some(*span),
                "{end}: openedAt to endedAt of the stored status\n{metrics}"
            );
        }
        assert_eq!(spans[1], 5.0, "the expired window lasted its ttl");
        assert!(spans[0] >= 2.0, "the closed window was open 2 s at least");
        operator_metrics_describe_the_run(&metrics);

        // Later passes over the ended windows (their retention, a restart) count nothing
        // again: the transition is decided from the stored status. The restarted operator has
        // looked at both once it counts a pass over their namespace.
        op.restart().await;
        wait::until(
            "the restarted operator to reconcile the windows' namespace",
            LIMIT,
            || async {
                sample(
                    &op.metrics().await,
                    "disruption_guard_window_reconciles_total",
                )
                .is_some_and(|n| n >= 1.0)
            },
        )
        .await;
        let after = op.metrics().await;
        for end in ["closed", "expired"] {
            assert_eq!(
                sample(
                    &after,
                    &format!("disruption_guard_windows_ended_total{{end=\"{end}\"}}")
                ),
                Some(0.0),
                "{after}"
            );
            assert_eq!(
                sample(
                    &after,
                    &format!("disruption_guard_window_duration_seconds_count{{end=\"{end}\"}}")
                ),
                Some(0.0),
                "{after}"
            );
        }
        assert_eq!(
            sample(&after, "disruption_guard_windows{phase=\"Closed\"}"),
            Some(1.0),
            "{after}"
        );
        assert_eq!(
            sample(&after, "disruption_guard_windows{phase=\"Expired\"}"),
            Some(1.0),
            "{after}"
        );
    })
    .await;
}

/// The window controller's queue and reconciles, in controller-runtime's names (unprefixed, as
/// dashboards for Go operators read them): there from the start, moving with a window's life,
/// the queue empty again once the window is released.
#[tokio::test]
async fn the_window_controller_exports_controller_runtimes_queue_and_reconcile_series() {
    with_namespace(|client, ns| async move {
        let op = Operator::start(&ns, &[]).await;
        let before = op.metrics().await;
        let total = |result: &str| {
            format!("controller_runtime_reconcile_total{{controller=\"window\",result=\"{result}\"}}")
        };
        for result in ["success", "error", "requeue", "requeue_after"] {
            assert!(sample(&before, &total(result)).is_some(), "{before}");
        }
        let errors = "controller_runtime_reconcile_errors_total{controller=\"window\"}";
        assert_eq!(sample(&before, errors), Some(0.0), "{before}");
        assert!(
            sample(&before, "controller_runtime_reconcile_total{controller=\"drain\",result=\"success\"}")
                .is_some(),
            "{before}"
        );
        let adds = "workqueue_adds_total{name=\"window\",controller=\"window\"}";
        let depth = "workqueue_depth{name=\"window\",controller=\"window\"}";
        let passes = |text: &str| {
            ["success", "requeue_after"]
                .iter()
                .map(|r| sample(text, &total(r)).unwrap_or_default())
                .sum::<f64>()
        };
        let (adds_before, passes_before) = (sample(&before, adds).unwrap(), passes(&before));

        open(&client, &ns, &window("w", "nothing", "10m", json!({}))).await;
        until_ready(&client, &ns, "w", LIMIT).await;
        close(&client, &ns, "w").await;
        until_status_released(&client, &ns, "w", LIMIT).await;

        let after = wait::for_some("the window controller's queue to be empty", LIMIT, || async {
            let text = op.metrics().await;
            (sample(&text, depth) == Some(0.0)).then_some(text)
        })
        .await;
        let moved = |series: &str, was: f64, by: f64| {
            let now = sample(&after, series).unwrap_or_default();
            assert!(now >= was + by, "{series}: {was} -> {now}, expected +{by}\n{after}");
        };
        // The window's creation, its status writes and its close each wake its namespace.
        moved(adds, adds_before, 2.0);
        assert!(
            passes(&after) >= passes_before + 2.0,
            "open → Ready and close → released are two passes at least\n{after}"
        );
        // Every timed pass is a reconcile; the gates' turned-away passes are counted too.
        let timed = sample(
            &after,
            "disruption_guard_reconcile_duration_seconds_count{controller=\"window\",result=\"success\"}",
        )
        .unwrap();
        assert!(passes(&after) >= timed, "{after}");
        assert_eq!(sample(&after, errors), Some(0.0), "{after}");
    })
    .await;
}

#[tokio::test]
async fn only_the_lease_holder_exports_window_gauges_and_a_replica_that_loses_it_exports_zero() {
    with_namespace(|client, ns| async move {
        let a = Operator::replica(&ns, "replica-a").await;
        let active = "disruption_guard_windows{phase=\"Active\"}";
        wait::until("replica-a to lead", LIMIT, || async {
            sample(&a.metrics().await, "disruption_guard_leader") == Some(1.0)
        })
        .await;
        open(&client, &ns, &window("w", "nothing", "10m", json!({}))).await;
        until_ready(&client, &ns, "w", LIMIT).await;
        wait::until("the leader to export the open window", LIMIT, || async {
            sample(&a.metrics().await, active) == Some(1.0)
        })
        .await;

        // A replica that never held the Lease exports the gauges at 0.
        let b = Operator::replica(&ns, "replica-b").await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let text = b.metrics().await;
        assert_eq!(
            sample(&text, "disruption_guard_leader"),
            Some(0.0),
            "{text}"
        );
        assert_eq!(sample(&text, active), Some(0.0), "{text}");

        // The Lease is handed to replica-b: replica-a loses it and clears its gauges, the new
        // holder exports the window.
        let renew = serde_json::to_value(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(jiff::Timestamp::now()),
        )
        .unwrap();
        Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(client.clone(), &ns)
            .patch(
                "disruption-guard",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"holderIdentity": "replica-b", "renewTime": renew}})),
            )
            .await
            .unwrap();
        wait::until("replica-b to lead and export the window", LIMIT, || async {
            let text = b.metrics().await;
            sample(&text, "disruption_guard_leader") == Some(1.0)
                && sample(&text, active) == Some(1.0)
        })
        .await;
        wait::until("replica-a to follow", Duration::from_secs(5), || async {
            sample(&a.metrics().await, "disruption_guard_leader") == Some(0.0)
        })
        .await;
        // Within one retry period (a third of the 3 s Lease) of losing it.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let text = a.metrics().await;
        assert_eq!(
            sample(&text, active),
            Some(0.0),
            "stale gauge on the old leader:\n{text}"
        );
        assert_eq!(
            sample(&text, "disruption_guard_protected_pods"),
            Some(0.0),
            "{text}"
        );
        // The sum over replicas is the leader's view.
        let sum: f64 = [a.metrics().await, b.metrics().await]
            .iter()
            .map(|t| sample(t, active).unwrap())
            .sum();
        assert_eq!(sum, 1.0);
    })
    .await;
}

/// A DaemonSet `agent` on the test's own nodes (selected by the namespace label every test
/// node carries), tolerating every taint so that no node of the three is left out.
fn agent_daemon_set(ns: &str) -> k8s_openapi::api::apps::v1::DaemonSet {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent"},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {
                    "nodeSelector": {support::TEST_NAMESPACE_LABEL: ns},
                    "tolerations": [{"operator": "Exists"}],
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "agent", "image": "registry.invalid/agent:1"}]
                }
            }
        }
    }))
    .expect("daemon set fixture")
}

/// The pods of `ns` that carry the do-not-disrupt annotation, by name.
async fn annotated_pods(client: &Client, ns: &str) -> Vec<String> {
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    let mut names: Vec<String> = pods
        .items
        .iter()
        .filter(|p| annotation(&p.metadata, DND).is_some())
        .map(name)
        .collect();
    names.sort();
    names
}

async fn annotated_nodes(client: &Client, nodes: &[String]) -> Vec<String> {
    let api = Api::<Node>::all(client.clone());
    let mut out = vec![];
    for n in nodes {
        let node = api.get(n).await.unwrap();
        if annotation(&node.metadata, DND).is_some() {
            out.push(n.clone());
        }
    }
    out
}

#[tokio::test]
async fn an_empty_selector_protects_the_deployments_pod_and_node_but_no_daemon_set_pod_unless_asked()
 {
    with_namespace(|client, ns| async move {
        // Everyone may ask for DaemonSet pods here (the default is nobody: tests/window_limits.rs).
        let op = Operator::start(&ns, &["--allow-daemon-sets-for=*"]).await;
        // Three private kwok nodes; the Deployment's pod runs on the first, the DaemonSet on
        // all three.
        let (first, pod) = lone_pod_on_private_node(&client, &ns, "api").await;
        let nodes = [first.clone(), format!("{ns}-n2"), format!("{ns}-n3")];
        for extra in &nodes[1..] {
            let node = support::create_ready_node(&client, &ns, extra).await;
            // A kwok node may still carry the node controller's not-ready taint right after it
            // turned Ready (seen under load): the DaemonSet tolerates every taint, and the
            // wait below for one ready DaemonSet pod per node is what counts.
            let taints = node.spec.and_then(|s| s.taints).unwrap_or_default();
            println!(
                "{extra} taints: {:?}",
                taints.iter().map(|t| &t.key).collect::<Vec<_>>()
            );
        }
        Api::<k8s_openapi::api::apps::v1::DaemonSet>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &agent_daemon_set(&ns))
            .await
            .unwrap();
        let agents = wait::for_some(
            "a ready DaemonSet pod on each of the 3 nodes",
            LIMIT,
            || async {
                let ready = support::pods::ready_pods(&client, &ns, "agent").await;
                let mut on: Vec<String> = ready
                    .iter()
                    .filter_map(|p| p.spec.as_ref()?.node_name.clone())
                    .collect();
                on.sort();
                let mut want = nodes.to_vec();
                want.sort();
                (on == want).then(|| ready.iter().map(name).collect::<Vec<_>>())
            },
        )
        .await;

        // An empty selector: the Deployment's pod and its node only.
        open(
            &client,
            &ns,
            &window("all", "", "10m", json!({"selector": {}})),
        )
        .await;
        until_ready(&client, &ns, "all", LIMIT).await;
        assert_eq!(annotated_pods(&client, &ns).await, [name(&pod)]);
        assert_eq!(
            annotated_nodes(&client, &nodes).await,
            std::slice::from_ref(&first)
        );
        let status = get_window(&client, &ns, "all").await.status.unwrap();
        assert_eq!((status.protected.pods, status.protected.nodes), (1, 1));

        // Asked for explicitly, through the HTTP API: every DaemonSet pod and every node.
        let resp = reqwest::Client::new()
            .post(format!("{}/v1/namespaces/{ns}/windows", op.api))
            .json(&json!({"name": "agents", "ttl": "10m", "protect": {"daemonSets": true}}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 201, "{}", resp.text().await.unwrap());
        let view: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(view["daemonSets"], true, "{view}");
        until_ready(&client, &ns, "agents", LIMIT).await;
        let mut every_pod = agents.clone();
        every_pod.push(name(&pod));
        every_pod.sort();
        wait::until(
            "every DaemonSet pod and node to be annotated",
            LIMIT,
            || async {
                annotated_pods(&client, &ns).await == every_pod
                    && annotated_nodes(&client, &nodes).await == nodes
            },
        )
        .await;
        let status = get_window(&client, &ns, "agents").await.status.unwrap();
        assert_eq!((status.protected.pods, status.protected.nodes), (4, 3));

        // Its end releases the DaemonSet's pods and the nodes only they occupy; the other
        // window keeps what it protects.
        close(&client, &ns, "agents").await;
        wait::until("the opt-in's protection to go", LIMIT, || async {
            annotated_pods(&client, &ns).await == [name(&pod)]
                && annotated_nodes(&client, &nodes).await == std::slice::from_ref(&first)
        })
        .await;
    })
    .await;
}

/// `Ready` does not wait for the disruption controller: the Eviction API answers 429 for a PDB
/// whose status it has not computed yet (kube-apiserver, `checkAndDecrement`: "The disruption
/// budget … is still being processed by the server"). Each round creates a PDB and evicts at
/// once; every answer must be 429, whichever of the two ways the API server refused.
#[tokio::test]
async fn a_pdb_protects_from_its_creation_before_its_status_is_computed() {
    with_namespace(|client, ns| async move {
        let (_node, pod) = lone_pod_on_private_node(&client, &ns, "api").await;
        let pod_name = name(&pod);
        let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns);
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let mut still_processed = 0;
        for round in 0..5 {
            let pdb = format!("guard-{round}");
            pdbs.create(
                &PostParams::default(),
                &pdb_max_unavailable_zero(&pdb, "api"),
            )
            .await
            .unwrap();
            match pods.evict(&pod_name, &Default::default()).await {
                Err(kube::Error::Api(status)) => {
                    assert_eq!(status.code, 429, "round {round}: {status:?}");
                    if status.message.contains("disruption budget") {
                        let text = format!("{status:?}");
                        still_processed += usize::from(text.contains("still being processed"));
                    }
                }
                other => panic!("round {round}: the eviction was not refused: {other:?}"),
            }
            pdbs.delete(&pdb, &DeleteParams::default()).await.unwrap();
            wait::until("the PDB gone", LIMIT, || async {
                pdbs.get_opt(&pdb).await.unwrap().is_none()
            })
            .await;
        }
        eprintln!(
            "{still_processed} of 5 evictions were refused before the PDB's status was computed"
        );
    })
    .await;
}
