//! The drain watcher against the real cluster: a lone pod under a `maxUnavailable: 0` PDB on a
//! node being drained moves to another node with zero downtime, what a rollout cannot save is
//! skipped with a Warning Event and a metric, and each Deployment is rolled out once per node.
//!
//! Every test uses private kwok nodes (labelled `disruption-guard.io/test=<ns>`); the pods
//! select that label, so a rollout can move them to any private node of the test, and they are
//! placed on the first node by creating the others only once they run.

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use kube::api::{EvictParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::drain::*;
use support::operator::Operator;
use support::pods::ready_pods;
use support::{TEST_NAMESPACE_LABEL, create_ready_node, kubectl, wait, with_namespace};

const LIMIT: Duration = Duration::from_secs(60);
const MARKER: &str = "disruption-guard.io/rolled-out-for-node";
const RESTARTED_AT: &str = "kubectl.kubernetes.io/restartedAt";

#[tokio::test]
async fn kubectl_drain_of_a_lone_pod_under_a_max_unavailable_zero_pdb_hangs_without_the_operator_and_completes_with_zero_downtime_with_it()
 {
    with_namespace(|client, ns| async move {
        let first = create_ready_node(&client, &ns, &format!("{ns}-a")).await;
        let first_name = first.metadata.name.clone().unwrap();
        let app = deploy_lone(&client, &ns, lone(&ns, "web"), &first_name).await;
        let second = format!("{ns}-b");
        create_ready_node(&client, &ns, &second).await;

        // Without the operator: the PDB holds the drain until it times out.
        let sampler = Sampler::start(&client, &ns, &[&app]);
        let (ok_without, secs_without, stderr) = drain(&first_name, "15s").await;
        let without = sampler.finish().await;
        assert!(
            !ok_without,
            "the drain must hang on the PDB without the operator"
        );
        assert!(stderr.contains("disruption budget"), "{stderr}");
        let uncordon = kubectl().args(["uncordon", &first_name]).output().unwrap();
        assert!(uncordon.status.success());

        // With the operator: the rollout moves the pod first, then the drain completes.
        let operator = Operator::start(&ns, &[]).await;
        let sampler = Sampler::start(&client, &ns, &[&app]);
        let (ok_with, secs_with, stderr) = drain(&first_name, "60s").await;
        let with = sampler.finish().await;
        // Every watch, the re-check reads and the rollout went over one HTTP/2 connection.
        let connections = operator.api_server_connections();

        println!("                        without operator   with operator");
        println!("drain finished          {ok_without:<18} {ok_with}");
        println!("drain seconds           {secs_without:<18.1} {secs_with:.1}");
        println!(
            "samples (100 ms)        {:<18} {}",
            without.rounds, with.rounds
        );
        println!(
            "samples w/o ready pod   {:<18} {}",
            without.downtime_samples(),
            with.downtime_samples()
        );
        println!("operator's API server connections: {connections}");
        assert!(ok_with, "the drain completes with the operator: {stderr}");
        assert!(with.rounds > 0);
        assert_eq!(with.downtime_samples(), 0, "no sample without a ready pod");
        assert_eq!(
            connections, 1,
            "one multiplexed connection to the API server"
        );

        let ready = ready_pods(&client, &ns, &app).await;
        assert_eq!(ready.len(), 1);
        assert_eq!(node_of(&ready[0]).as_deref(), Some(second.as_str()));
        let d = Api::<Deployment>::namespaced(client.clone(), &ns)
            .get(&app)
            .await
            .unwrap();
        let marker = d.metadata.annotations.unwrap_or_default().remove(MARKER);
        assert_eq!(marker, Some(format!("{first_name}/{}", uid(&first))));
        let template_annotations = d.spec.unwrap().template.metadata.unwrap().annotations;
        assert!(
            template_annotations
                .unwrap_or_default()
                .contains_key(RESTARTED_AT)
        );
        let metrics = operator.metrics().await;
        assert_eq!(
            metric(
                &metrics,
                "disruption_guard_drain_rollouts_total{result=\"rolled_out\"}"
            ),
            1.0
        );
        assert_eq!(
            metric(
                &metrics,
                "disruption_guard_drain_signal_to_rollout_seconds_count"
            ),
            1.0
        );
        until_event(&client, &ns, &app, None, "RolledOutForDrain", "").await;
    })
    .await;
}

#[tokio::test]
async fn a_karpenter_disrupted_taint_with_evictions_retried_like_karpenter_moves_the_pod_with_zero_downtime()
 {
    with_namespace(|client, ns| async move {
        let _operator = Operator::start(&ns, &[]).await;
        let first = format!("{ns}-a");
        create_ready_node(&client, &ns, &first).await;
        // The new pod takes a second to become Ready, as a container does: the first eviction
        // comes before it, so the PDB refuses it however quickly the rollout starts.
        let app = deploy_lone(&client, &ns, lone(&ns, "api").starts_in("1s"), &first).await;
        let second = format!("{ns}-b");
        create_ready_node(&client, &ns, &second).await;
        let pod = ready_pods(&client, &ns, &app).await.remove(0);
        let pod_name = pod.metadata.name.clone().unwrap();

        let sampler = Sampler::start(&client, &ns, &[&app]);
        let nodes: Api<Node> = Api::all(client.clone());
        let mut taints = nodes.get(&first).await.unwrap().spec.unwrap().taints.unwrap_or_default();
        taints.push(serde_json::from_value(
            json!({"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}),
        )
        .unwrap());
        nodes
            .patch(
                &first,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"taints": taints}})),
            )
            .await
            .unwrap();

        // Karpenter's terminator: evict, and on 429 retry (it backs off 100 ms … 10 s).
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let started = Instant::now();
        let mut refused = 0;
        loop {
            match pods.evict(&pod_name, &EvictParams::default()).await {
                Ok(_) => break,
                Err(kube::Error::Api(s)) if s.code == 404 => break,
                Err(kube::Error::Api(s)) if s.code == 429 => refused += 1,
                Err(other) => panic!("unexpected eviction error: {other:?}"),
            }
            assert!(started.elapsed() < LIMIT, "the eviction never went through");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        wait::until("the old pod to go", LIMIT, || async {
            pods.get_opt(&pod_name).await.unwrap().is_none()
        })
        .await;
        let samples = sampler.finish().await;
        println!(
            "evictions refused: {refused}; eviction allowed after {:.1}s; {} samples, {} without a ready pod",
            started.elapsed().as_secs_f64(),
            samples.rounds,
            samples.downtime_samples()
        );
        assert!(refused > 0, "the PDB refused the eviction at first");
        assert_eq!(samples.downtime_samples(), 0, "no sample without a ready pod");
        let ready = ready_pods(&client, &ns, &app).await;
        assert_eq!(ready.len(), 1);
        assert_eq!(node_of(&ready[0]).as_deref(), Some(second.as_str()));
    })
    .await;
}

#[tokio::test]
async fn a_recreate_deployment_on_a_drained_node_is_not_rolled_out_and_is_reported() {
    with_namespace(|client, ns| async move {
        let operator = Operator::start(&ns, &[]).await;
        let first = format!("{ns}-a");
        create_ready_node(&client, &ns, &first).await;
        let app = deploy_lone(&client, &ns, lone(&ns, "batch").recreate(), &first).await;
        create_ready_node(&client, &ns, &format!("{ns}-b")).await;

        let (ok, _, _) = drain(&first, "8s").await;
        assert!(!ok, "nothing unblocks the drain");
        until_event(
            &client,
            &ns,
            &app,
            Some("Warning"),
            "DrainRolloutSkipped",
            "Recreate",
        )
        .await;
        let metrics = operator.metrics().await;
        assert_eq!(
            metric(
                &metrics,
                "disruption_guard_drain_skips_total{reason=\"recreate\"}"
            ),
            1.0,
            "{metrics}"
        );
        assert_eq!(
            metric(
                &metrics,
                "disruption_guard_drain_rollouts_total{result=\"rolled_out\"}"
            ),
            0.0
        );
        let d = Api::<Deployment>::namespaced(client.clone(), &ns)
            .get(&app)
            .await
            .unwrap();
        assert_eq!(
            d.metadata.generation,
            Some(1),
            "the Deployment was not changed"
        );
        let ready = ready_pods(&client, &ns, &app).await;
        assert_eq!(node_of(&ready[0]).as_deref(), Some(first.as_str()));
    })
    .await;
}

#[tokio::test]
async fn two_nodes_drained_at_once_roll_each_of_five_lone_replica_deployments_out_exactly_once() {
    with_namespace(|client, ns| async move {
        let (a1, a2) = (format!("{ns}-a1"), format!("{ns}-a2"));
        let a1_node = create_ready_node(&client, &ns, &a1).await;
        let mut apps = Vec::new();
        for i in 0..3 {
            apps.push(deploy_lone(&client, &ns, lone(&ns, &format!("app{i}")), &a1).await);
        }
        // Keep the next two off the first node while they are placed.
        let cordon = kubectl().args(["cordon", &a1]).output().unwrap();
        assert!(cordon.status.success());
        let a2_node = create_ready_node(&client, &ns, &a2).await;
        for i in 3..5 {
            apps.push(deploy_lone(&client, &ns, lone(&ns, &format!("app{i}")), &a2).await);
        }
        let uncordon = kubectl().args(["uncordon", &a1]).output().unwrap();
        assert!(uncordon.status.success());
        create_ready_node(&client, &ns, &format!("{ns}-b1")).await;
        create_ready_node(&client, &ns, &format!("{ns}-b2")).await;

        let operator = Operator::start(&ns, &["--drain-resync=1s"]).await;
        let names: Vec<&str> = apps.iter().map(String::as_str).collect();
        let sampler = Sampler::start(&client, &ns, &names);
        // Cordon both in one go, so no replacement lands on the other node being drained.
        let cordon = kubectl().args(["cordon", &a1, &a2]).output().unwrap();
        assert!(cordon.status.success());
        let (first, second) = tokio::join!(drain(&a1, "90s"), drain(&a2, "90s"));
        assert!(first.0, "the first drain completes: {}", first.2);
        assert!(second.0, "the second drain completes: {}", second.2);
        // Several resync passes over the still-cordoned nodes must not roll out again.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let samples = sampler.finish().await;
        println!(
            "drains: {:.1}s and {:.1}s; {} samples; without a ready pod: {:?}",
            first.1, second.1, samples.rounds, samples.without_ready_pod
        );
        assert_eq!(samples.downtime_samples(), 0);

        let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        for (i, app) in apps.iter().enumerate() {
            let d = deployments.get(app).await.unwrap();
            let node = if i < 3 { &a1_node } else { &a2_node };
            let expected = format!("{}/{}", node.metadata.name.as_ref().unwrap(), uid(node));
            assert_eq!(d.metadata.generation, Some(2), "{app} changed exactly once");
            let marker = d.metadata.annotations.unwrap_or_default().remove(MARKER);
            assert_eq!(marker, Some(expected), "{app}");
            let ready = ready_pods(&client, &ns, app).await;
            assert_eq!(ready.len(), 1, "{app}");
            let now_on = node_of(&ready[0]).unwrap();
            assert!(
                now_on != a1 && now_on != a2,
                "{app} moved off the drained nodes"
            );
        }
        let metrics = operator.metrics().await;
        assert_eq!(
            metric(
                &metrics,
                "disruption_guard_drain_rollouts_total{result=\"rolled_out\"}"
            ),
            5.0,
            "{metrics}"
        );
    })
    .await;
}

/// Waits until the operator's watcher decided `at_least` times that a Deployment was already
/// rolled out for its node (counted once each decision is carried out).
async fn already_rolled_out_decisions(operator: &Operator, at_least: f64) {
    wait::until("the watcher to find the rollout done", LIMIT, || async {
        metric(
            &operator.metrics().await,
            "disruption_guard_drain_decisions_total{decision=\"already_rolled_out\"}",
        ) >= at_least
    })
    .await;
}

#[tokio::test]
async fn a_restarted_operator_does_not_roll_out_again_for_the_same_node() {
    with_namespace(|client, ns| async move {
        let mut operator = Operator::start(&ns, &["--drain-resync=1s"]).await;
        let node = format!("{ns}-a");
        create_ready_node(&client, &ns, &node).await;
        // No second node: the new pod stays Pending, so the old one stays on the cordoned node
        // and every pass sees the same blocked pod again.
        let app = deploy_lone(&client, &ns, lone(&ns, "web"), &node).await;
        cordon(&node);
        wait::until("the rollout", LIMIT, || async {
            generation(&client, &ns, &app).await == Some(2)
        })
        .await;
        // Passes after the rollout (every second) find it done: the evidence that they looked.
        already_rolled_out_decisions(&operator, 3.0).await;
        assert_eq!(
            generation(&client, &ns, &app).await,
            Some(2),
            "once per process"
        );

        operator.restart().await;
        // The restarted watcher has no ledger: only the Deployment's marker tells it.
        already_rolled_out_decisions(&operator, 2.0).await;
        assert_eq!(
            generation(&client, &ns, &app).await,
            Some(2),
            "once across restarts"
        );
        let metrics = operator.metrics().await;
        // The marker, not the rollout in progress, is what stops it: no skip is reported.
        assert_eq!(
            metric(
                &metrics,
                "disruption_guard_drain_skips_total{reason=\"rollout_in_progress\"}"
            ),
            0.0,
            "{metrics}"
        );
        assert_eq!(
            metric(
                &metrics,
                "disruption_guard_drain_rollouts_total{result=\"rolled_out\"}"
            ),
            0.0
        );
        let old = ready_pods(&client, &ns, &app).await;
        assert_eq!(node_of(&old[0]).as_deref(), Some(node.as_str()));
    })
    .await;
}

#[tokio::test]
async fn a_deployment_that_opted_out_is_not_rolled_out() {
    with_namespace(|client, ns| async move {
        let operator = Operator::start(&ns, &[]).await;
        let node = format!("{ns}-a");
        create_ready_node(&client, &ns, &node).await;
        let opted_out =
            lone(&ns, "web").annotation("disruption-guard.io/rollout-on-drain", "false");
        let app = deploy_lone(&client, &ns, opted_out, &node).await;
        create_ready_node(&client, &ns, &format!("{ns}-b")).await;
        cordon(&node);
        wait::until("the opt-out to be counted", LIMIT, || async {
            let metrics = operator.metrics().await;
            metric(
                &metrics,
                "disruption_guard_drain_skips_total{reason=\"opted_out\"}",
            ) == 1.0
        })
        .await;
        assert_eq!(generation(&client, &ns, &app).await, Some(1));
    })
    .await;
}

#[tokio::test]
async fn namespaces_outside_the_drain_namespace_selector_are_left_alone() {
    with_namespace(|client, ns| async move {
        let operator = Operator::start(
            &ns,
            &[
                "--drain-namespace-selector=disruption-guard.io/no-such-label",
                "--drain-resync=1s",
            ],
        )
        .await;
        let node = format!("{ns}-a");
        create_ready_node(&client, &ns, &node).await;
        let app = deploy_lone(&client, &ns, lone(&ns, "web"), &node).await;
        create_ready_node(&client, &ns, &format!("{ns}-b")).await;
        cordon(&node);
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert_eq!(generation(&client, &ns, &app).await, Some(1));

        // The same operator acts once the namespace matches.
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        namespaces
            .patch(
                &ns,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"metadata": {"labels": {"disruption-guard.io/no-such-label": "x"}}}),
                ),
            )
            .await
            .unwrap();
        wait::until("the rollout once the namespace matches", LIMIT, || async {
            generation(&client, &ns, &app).await == Some(2)
        })
        .await;
        // The counter is raised once the operator has the patch's answer, a moment after the
        // Deployment's generation moved.
        wait::until("the rollout to be counted", LIMIT, || async {
            metric(
                &operator.metrics().await,
                "disruption_guard_drain_rollouts_total{result=\"rolled_out\"}",
            ) == 1.0
        })
        .await;
    })
    .await;
}

#[tokio::test]
async fn a_bare_pod_under_a_blocking_pdb_on_a_cordoned_node_gets_a_warning_on_the_pod() {
    with_namespace(|client, ns| async move {
        let operator = Operator::start(&ns, &[]).await;
        let node = format!("{ns}-a");
        create_ready_node(&client, &ns, &node).await;
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "solo", "labels": {"app": "solo"}},
            "spec": {
                "nodeSelector": {TEST_NAMESPACE_LABEL: ns},
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "app", "image": "registry.invalid/app:1"}]
            }
        }))
        .unwrap();
        Api::<Pod>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &pod)
            .await
            .unwrap();
        let pdb: PodDisruptionBudget = serde_json::from_value(json!({
            "metadata": {"name": "solo"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "solo"}}}
        }))
        .unwrap();
        let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns);
        pdbs.create(&PostParams::default(), &pdb).await.unwrap();
        wait::until("the PDB to allow no disruption", LIMIT, || async {
            let pdb = pdbs.get("solo").await.unwrap();
            pdb.status
                .is_some_and(|s| s.current_healthy == 1 && s.disruptions_allowed == 0)
        })
        .await;

        cordon(&node);
        wait::until("a Warning Event on the pod", LIMIT, || async {
            events_about(&client, &ns, "solo").await.iter().any(|e| {
                e.type_.as_deref() == Some("Warning")
                    && e.reason.as_deref() == Some("DrainRolloutSkipped")
                    && e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("Pod")
            })
        })
        .await;
        let metrics = operator.metrics().await;
        assert_eq!(
            metric(
                &metrics,
                "disruption_guard_drain_skips_total{reason=\"bare_pod\"}"
            ),
            1.0,
            "{metrics}"
        );
    })
    .await;
}

#[tokio::test]
async fn a_second_drain_of_the_same_node_after_an_uncordon_rolls_out_again_with_zero_downtime() {
    with_namespace(|client, ns| async move {
        let (a, b) = (format!("{ns}-a"), format!("{ns}-b"));
        create_ready_node(&client, &ns, &a).await;
        let app = deploy_lone(&client, &ns, lone(&ns, "web"), &a).await;
        create_ready_node(&client, &ns, &b).await;
        let operator = Operator::start(&ns, &["--drain-resync=1s"]).await;
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        let marker = || async {
            deployments
                .get(&app)
                .await
                .unwrap()
                .metadata
                .annotations
                .unwrap_or_default()
                .remove(MARKER)
        };
        let rollouts = || async {
            metric(
                &operator.metrics().await,
                "disruption_guard_drain_rollouts_total{result=\"rolled_out\"}",
            )
        };

        let (ok, _, stderr) = drain(&a, "60s").await;
        assert!(ok, "{stderr}");
        assert_eq!(rollouts().await, 1.0);
        assert!(marker().await.is_some());

        // a is back in service: the record of its disruption ends.
        let out = kubectl().args(["uncordon", &a]).output().unwrap();
        assert!(out.status.success());
        wait::until(
            "the record to end after the uncordon",
            Duration::from_secs(30),
            || async { marker().await.is_none() },
        )
        .await;

        // The pod returns to a: cordoning b is a disruption of b, and the watcher moves the
        // pod to a by the same kind of rollout; then b comes back and its record ends too.
        cordon(&b);
        wait::until("the pod back on a", LIMIT, || async {
            let ready = ready_pods(&client, &ns, &app).await;
            ready.len() == 1 && node_of(&ready[0]).as_deref() == Some(a.as_str())
        })
        .await;
        assert_eq!(rollouts().await, 2.0);
        let out = kubectl().args(["uncordon", &b]).output().unwrap();
        assert!(out.status.success());
        wait::until(
            "b's record to end after its uncordon",
            Duration::from_secs(30),
            || async { marker().await.is_none() },
        )
        .await;
        let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns);
        wait::until("the PDB to allow no disruption again", LIMIT, || async {
            pdbs.get(&app)
                .await
                .ok()
                .and_then(|p| p.status)
                .is_some_and(|s| s.current_healthy == 1 && s.disruptions_allowed == 0)
        })
        .await;

        // The second drain of a: rolled out again, no gap (with the old record it would have
        // counted as done and the PDB would hold the drain until its timeout).
        let sampler = Sampler::start(&client, &ns, &[&app]);
        let (ok, secs, stderr) = drain(&a, "60s").await;
        let samples = sampler.finish().await;
        println!(
            "second drain: finished {ok} in {secs:.1} s, {} of {} samples without a ready pod",
            samples.downtime_samples(),
            samples.rounds
        );
        assert!(ok, "the second drain completes: {stderr}");
        assert_eq!(
            rollouts().await,
            3.0,
            "a new rollout for the second drain of a"
        );
        assert_eq!(samples.downtime_samples(), 0);
        let ready = ready_pods(&client, &ns, &app).await;
        assert_eq!(node_of(&ready[0]).as_deref(), Some(b.as_str()));
    })
    .await;
}

#[tokio::test]
async fn a_window_opened_over_a_pod_on_a_node_already_being_disrupted_is_ready_once_the_pod_runs_elsewhere()
 {
    use disruption_guard::resources::TestWindow;
    use support::windows::{is_ready, open, window};

    with_namespace(|client, ns| async move {
        let first = format!("{ns}-a");
        create_ready_node(&client, &ns, &first).await;
        // The replacement takes three seconds to become Ready, as a container does: a window
        // Ready before the move would be seen Ready with the old pod still running.
        let old = deploy_on(&client, &ns, lone(&ns, "web").starts_in("3s"), &first).await;
        let old = old.metadata.name.clone().unwrap();
        let second = format!("{ns}-b");
        create_ready_node(&client, &ns, &second).await;
        // Karpenter decided a moment before the window's protection arrives.
        let nodes: Api<Node> = Api::all(client.clone());
        set_disrupted_taint(&nodes, &first, true).await;
        let _operator = Operator::start(&ns, &[]).await;
        open(&client, &ns, &window("tests", "web", "10m", json!({}))).await;

        let windows: Api<TestWindow> = Api::namespaced(client.clone(), &ns);
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let started = Instant::now();
        let mut said = None;
        let running_at_ready = loop {
            let w = windows.get("tests").await.unwrap();
            let live: Vec<(String, Option<String>)> = pods
                .list(&kube::api::ListParams::default().labels("app=web"))
                .await
                .unwrap()
                .items
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .map(|p| (p.metadata.name.clone().unwrap(), node_of(&p)))
                .collect();
            if is_ready(&w) {
                break live;
            }
            let message = w
                .status
                .as_ref()
                .and_then(|s| s.ready_condition())
                .map(|c| c.message.clone());
            if let Some(m) = message.filter(|m| m.contains("to move off node")) {
                said = Some(m);
            }
            assert!(started.elapsed() < LIMIT, "the window never became Ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        println!(
            "Ready after {:.1}s; running then: {running_at_ready:?}; waited for: {said:?}",
            started.elapsed().as_secs_f64()
        );
        assert!(
            !running_at_ready.is_empty()
                && running_at_ready
                    .iter()
                    .all(|(pod, node)| *pod != old && node.as_deref() == Some(second.as_str())),
            "Ready while the pod on the disrupted node still ran: {running_at_ready:?}"
        );
        let said = said.expect("the status said what the window waited for");
        assert!(said.contains(&old) && said.contains(&first), "{said}");
        let status = windows.get("tests").await.unwrap().status.unwrap();
        assert_eq!(status.protected.pods, 1, "the pod that stays is protected");
        assert_eq!(status.report.rollouts, 1, "{:?}", status.report);
    })
    .await;
}
