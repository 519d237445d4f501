//! Figures, not assertions: open → Ready latency (p50/p99) of windows over 1, 10 and 100
//! one-replica Deployments, and the API writes each window costs (to open, and open + release).
//!
//! Run: `cargo test --release --test window_bench -- --ignored --nocapture`

mod support;

use std::time::{Duration, Instant};

use disruption_guard::resources::TestWindow;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;
use support::fixtures::{deployment, kwok_node};
use support::operator::Operator;
use support::stats::percentile;
use support::windows::*;
use support::{pods, wait, with_namespace};

const ROUNDS: [(usize, usize); 3] = [(1, 20), (10, 20), (100, 10)];

/// The operator's `disruption_guard_window_writes_total`.
async fn writes(op: &Operator) -> u64 {
    let text = op.metrics().await;
    text.lines()
        .find_map(|l| l.strip_prefix("disruption_guard_window_writes_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// A kwok node of the namespace with room for 250 pods; its name.
async fn roomy_node(client: &kube::Client, ns: &str) -> String {
    let node = format!("{ns}-n");
    let mut fixture = kwok_node(&node, ns);
    let status = fixture.status.as_mut().unwrap();
    for q in [
        status.capacity.as_mut().unwrap(),
        status.allocatable.as_mut().unwrap(),
    ] {
        q.insert(
            "pods".into(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity("250".into()),
        );
    }
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &fixture)
        .await
        .unwrap();
    node
}

/// `count` one-replica Deployments `<group>-<i>` labelled `group=<group>` on `node`, their pods
/// Ready.
async fn group_on_node(client: &kube::Client, ns: &str, node: &str, group: &str, count: usize) {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    for i in 0..count {
        let d = deployment(&format!("{group}-{i}"))
            .label("group", group)
            .node_selector("disruption-guard.io/test-node", node)
            .build();
        deployments
            .create(&PostParams::default(), &d)
            .await
            .unwrap();
    }
    let selector = format!("group={group}");
    wait::until(
        "every pod of the group Ready",
        Duration::from_secs(180),
        || async { pods::ready_pods_matching(client, ns, &selector).await.len() == count },
    )
    .await;
}

#[tokio::test]
#[ignore = "benchmark: prints figures, run with --ignored --nocapture"]
async fn open_to_ready_latency_for_windows_over_1_10_and_100_deployments() {
    with_namespace(|client, ns| async move {
        let node = roomy_node(&client, &ns).await;
        let op = Operator::start(&ns, &[]).await;
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        let windows: Api<TestWindow> = Api::namespaced(client.clone(), &ns);

        println!(
            "deployments  windows  p50_ms  p99_ms  max_ms  writes_to_open  writes_open_and_release"
        );
        // DG_BENCH_SIZES="100:2,10:5" overrides the sizes and rounds.
        let sizes: Vec<(usize, usize)> = std::env::var("DG_BENCH_SIZES")
            .ok()
            .map(|v| {
                v.split(',')
                    .filter_map(|p| p.split_once(':'))
                    .map(|(a, b)| (a.parse().unwrap(), b.parse().unwrap()))
                    .collect()
            })
            .unwrap_or_else(|| ROUNDS.to_vec());
        for (count, rounds) in sizes {
            let group = format!("g{count}");
            group_on_node(&client, &ns, &node, &group, count).await;

            let mut latencies = vec![];
            let (mut open_writes, mut all_writes) = (0, 0);
            for round in 0..rounds {
                let name = format!("{group}-w{round}");
                let w: TestWindow = serde_json::from_value(json!({
                    "apiVersion": "disruption-guard.io/v1alpha1", "kind": "TestWindow",
                    "metadata": {"name": name},
                    "spec": {"selector": {"matchLabels": {"group": group}}, "ttl": "10m"}
                }))
                .unwrap();
                let before = writes(&op).await;
                let started = Instant::now();
                windows.create(&PostParams::default(), &w).await.unwrap();
                wait::until(
                    "the window to become Ready",
                    Duration::from_secs(120),
                    || async { windows.get(&name).await.ok().is_some_and(|w| is_ready(&w)) },
                )
                .await;
                latencies.push(started.elapsed());
                let opened = writes(&op).await;
                close(&client, &ns, &name).await;
                wait::until("the release", Duration::from_secs(120), || async {
                    let released = windows
                        .get(&name)
                        .await
                        .ok()
                        .and_then(|w| w.status)
                        .is_some_and(|s| s.conditions.iter().any(|c| c.reason == "Closed"));
                    released && guard_pdbs(&client, &ns).await.is_empty()
                })
                .await;
                let after = writes(&op).await;
                open_writes += opened - before;
                all_writes += after - before;
                windows
                    .delete(&name, &DeleteParams::default())
                    .await
                    .unwrap();
                wait::until("the window to go", Duration::from_secs(60), || async {
                    windows.get_opt(&name).await.unwrap().is_none()
                })
                .await;
            }
            latencies.sort();
            let ms = |d: Duration| d.as_secs_f64() * 1000.0;
            println!(
                "{count:>11}  {rounds:>7}  {:>6.0}  {:>6.0}  {:>6.0}  {:>14.1}  {:>23.1}",
                ms(percentile(&latencies, 50.0)),
                ms(percentile(&latencies, 99.0)),
                ms(*latencies.last().unwrap()),
                open_writes as f64 / rounds as f64,
                all_writes as f64 / rounds as f64,
            );
            for i in 0..count {
                let _ = deployments
                    .delete(&format!("{group}-{i}"), &DeleteParams::background())
                    .await;
            }
        }
    })
    .await;
}

/// Opens `legs` windows over `group=burst` within 5 s through the API with `?wait=true`, each
/// coming back after the Retry-After it is told on a 429 (as the CLI and the Action do), then
/// closes them all. Returns each leg's open → Ready (ms) and the number of 429s.
async fn burst_from_one_identity(
    op: &Operator,
    ns: &str,
    legs: usize,
    round: &str,
) -> (Vec<f64>, usize) {
    let http = reqwest::Client::new();
    let url = format!("{}/v1/namespaces/{ns}/windows", op.api);
    let spread = 5.0 / legs as f64;
    let results = futures::future::join_all((0..legs).map(|leg| {
        let (http, url) = (http.clone(), url.clone());
        async move {
            tokio::time::sleep(Duration::from_secs_f64(spread * leg as f64)).await;
            let started = Instant::now();
            let mut refused = 0;
            loop {
                let body = json!({"name": format!("{round}-{leg}"), "selector": "group=burst", "ttl": "10m"});
                let resp = http.post(format!("{url}?wait=true")).json(&body).send().await.unwrap();
                if resp.status() == reqwest::StatusCode::TOO_MANY_REQUESTS {
                    refused += 1;
                    let after: u64 = resp.headers()["retry-after"].to_str().unwrap().parse().unwrap();
                    tokio::time::sleep(Duration::from_secs(after)).await;
                    continue;
                }
                assert_eq!(resp.status(), 201, "{}", resp.text().await.unwrap());
                return (started.elapsed().as_secs_f64() * 1000.0, refused);
            }
        }
    }))
    .await;
    futures::future::join_all((0..legs).map(|leg| {
        let (http, url) = (http.clone(), url.clone());
        async move {
            // Closed without a wait (a close's wait counts against the same cap): the release
            // is awaited by the caller.
            let resp = http
                .delete(format!("{url}/{round}-{leg}"))
                .send()
                .await
                .unwrap();
            assert!(resp.status().is_success(), "{}", resp.status());
        }
    }))
    .await;
    let refused = results.iter().map(|(_, r)| r).sum();
    (results.into_iter().map(|(ms, _)| ms).collect(), refused)
}

#[tokio::test]
#[ignore = "benchmark: prints figures, run with --ignored --nocapture"]
async fn a_burst_of_100_legs_from_one_identity_beside_the_same_burst_without_a_cap() {
    with_namespace(|client, ns| async move {
        let node = roomy_node(&client, &ns).await;
        group_on_node(&client, &ns, &node, "burst", 8).await;
        let legs = 100;
        println!(
            "burst of {legs} legs from one identity over 8 one-replica Deployments in one namespace"
        );
        println!("--max-waits-per-identity  429s  p50_ms  p99_ms  max_ms");
        for (cap, round) in [(50, "capped"), (2 * legs, "uncapped")] {
            let op = Operator::start(&ns, &[&format!("--max-waits-per-identity={cap}")]).await;
            // One window first: the API server's first writes of the kind after the CRD was
            // (re)applied are slow, and neither round should pay for that.
            burst_from_one_identity(&op, &ns, 1, &format!("warm-{round}")).await;
            let (mut ms, refused) = burst_from_one_identity(&op, &ns, legs, round).await;
            ms.sort_by(f64::total_cmp);
            println!(
                "{cap:>24}  {refused:>4}  {:>6.0}  {:>6.0}  {:>6.0}",
                percentile(&ms, 50.0),
                percentile(&ms, 99.0),
                ms[ms.len() - 1]
            );
            wait::until("every leg released", Duration::from_secs(120), || async {
                guard_pdbs(&client, &ns).await.is_empty()
            })
            .await;
            drop(op);
        }
    })
    .await;
}
