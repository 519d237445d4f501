//! Figures at scale, not assertions: the operator watching a cluster that grows to 1,000 kwok
//! nodes and 10,000 pods, with 100 windows open. At each size it prints
//! - resident memory (VmRSS) of the running operator, and of a restarted one after its caches
//!   synced (with its peak, VmHWM, which the initial lists set), beside the empty-cluster
//!   baseline measured at the start of the same run;
//! - how long a restarted operator takes to become ready (every watch synced);
//! - open → Ready of 100 windows, each through the HTTP API with `?wait=true`, one after
//!   another, so the last one opens while 99 are open (p50/p99), and close → released;
//! - signal → rollout of a lone Deployment whose node gets Karpenter's disrupted taint, beside
//!   a bare watch of the same node (the floor) (p50/p99).
//!
//! Background pods are bare pods bound to the nodes by `spec.nodeName` (no scheduler work);
//! the windows' Deployments run on the same nodes.
//!
//! Run it on a cluster of its own: `tests/bench/scale` (sizes in `SCALE_STEPS`, default
//! `100,300,1000` nodes; `SCALE_WINDOWS`, default 100; `SCALE_DRAINS`, default 20).

mod support;

use std::time::{Duration, Instant};

use futures::{StreamExt, stream};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use support::drain::{deploy_lone, lone, signal_to_rollout};
use support::fixtures::{deployment, kwok_node};
use support::operator::Operator;
use support::stats::percentile;
use support::{create_ready_node, wait, with_namespace};

const PODS_PER_NODE: usize = 10;
/// Label of the benchmark's nodes (the drain nodes are the test namespace's own).
const SCALE_LABEL: &str = "disruption-guard.io/scale";
const CONCURRENCY: usize = 48;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// p50 and p99 of `v` (sorted here), in milliseconds.
fn p50_p99(v: &mut [f64]) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    (percentile(v, 50.0), percentile(v, 99.0))
}

/// Creates nodes `scale-<ns>-<i>` for i in `from..to` and waits until `to` of them are Ready.
async fn grow_nodes(client: &Client, ns: &str, from: usize, to: usize) {
    let nodes: Api<Node> = Api::all(client.clone());
    stream::iter(from..to)
        .for_each_concurrent(CONCURRENCY, |i| {
            let nodes = nodes.clone();
            async move {
                let name = format!("scale-{ns}-{i}");
                let mut node = kwok_node(&name, "scale");
                let labels = node.metadata.labels.get_or_insert_default();
                labels.remove(support::TEST_NAMESPACE_LABEL);
                labels.insert(SCALE_LABEL.into(), ns.into());
                nodes.create(&PostParams::default(), &node).await.unwrap();
            }
        })
        .await;
    let mine = ListParams::default().labels(&format!("{SCALE_LABEL}={ns}"));
    wait::until(
        "the benchmark's nodes to be Ready",
        Duration::from_secs(600),
        || async {
            assert_nodes_kept_up(client).await;
            let list = nodes.list(&mine).await.unwrap().items;
            list.iter().filter(|n| support::is_node_ready(n)).count() >= to
        },
    )
    .await;
}

/// Reasons of the events that say the simulated nodes fell behind: their heartbeats missed the
/// node lifecycle controller's grace period, so it marked them (and their pods) not ready.
const NODE_TROUBLE: [&str; 2] = ["NodeNotReady", "TaintManagerEviction"];

/// Panics naming the events if any node of the cluster went NotReady since the run started: the
/// figures would then measure the cluster's recovery, not the operator. Called while waiting, so
/// the run stops with this message instead of a bare time-out.
async fn assert_nodes_kept_up(client: &Client) {
    let events: Api<Event> = Api::all(client.clone());
    let mut seen = Vec::new();
    for reason in NODE_TROUBLE {
        let list = events
            .list(&ListParams::default().fields(&format!("reason={reason}")))
            .await
            .unwrap();
        let count: i32 = list.items.iter().map(|e| e.count.unwrap_or(1)).sum();
        if count > 0 {
            let example = list.items[0].message.clone().unwrap_or_default();
            seen.push(format!("{count} {reason} (e.g. \"{example}\")"));
        }
    }
    assert!(
        seen.is_empty(),
        "the simulated nodes fell behind, so the figures would measure the cluster's recovery: {}. \
         kwok renews each node's Lease every S/4 of --node-lease-seconds (tests/bench/scale sets S); \
         raise it, or lower SCALE_STEPS",
        seen.join(", ")
    );
}

/// Creates background pods `bg-<i>` for i in `from..to`, spread over `nodes` nodes, and waits
/// until `to` of them run.
async fn grow_pods(client: &Client, ns: &str, nodes: usize, from: usize, to: usize) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    stream::iter(from..to)
        .for_each_concurrent(CONCURRENCY, |i| {
            let pods = pods.clone();
            async move {
                let pod: Pod = serde_json::from_value(json!({
                    "metadata": {"name": format!("bg-{i}"), "labels": {"app": "bg", "shard": format!("s{}", i % 50)}},
                    "spec": {
                        "nodeName": format!("scale-{ns}-{}", i % nodes),
                        "terminationGracePeriodSeconds": 0,
                        "containers": [{"name": "app", "image": "registry.invalid/bg:1"}]
                    }
                }))
                .unwrap();
                pods.create(&PostParams::default(), &pod).await.unwrap();
            }
        })
        .await;
    let running = ListParams::default()
        .labels("app=bg")
        .fields("status.phase=Running");
    wait::until(
        "the background pods to run",
        Duration::from_secs(900),
        || async {
            tokio::time::sleep(Duration::from_secs(2)).await;
            assert_nodes_kept_up(client).await;
            pods.list_metadata(&running).await.unwrap().items.len() >= to
        },
    )
    .await;
}

/// Opens `windows` windows over the Deployments `w-<i>` through the API, one after another,
/// and returns each open → Ready latency (ms). Then closes them, returning close → released.
async fn windows_round(
    op: &Operator,
    ns: &str,
    step: usize,
    windows: usize,
) -> (Vec<f64>, Vec<f64>) {
    let http = reqwest::Client::new();
    let mut open = Vec::new();
    for i in 0..windows {
        let started = Instant::now();
        let resp = http
            .post(format!("{}/v1/namespaces/{ns}/windows?wait=true", op.api))
            .json(&json!({"name": format!("s{step}-w{i}"), "selector": format!("app=w-{i}"), "ttl": "30m"}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 201, "{}", resp.text().await.unwrap());
        open.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    let mut close = Vec::new();
    for i in 0..windows {
        let started = Instant::now();
        let resp = http
            .delete(format!(
                "{}/v1/namespaces/{ns}/windows/s{step}-w{i}?wait=true",
                op.api
            ))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
        close.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    (open, close)
}

struct Row {
    nodes: usize,
    pods: usize,
    rss_running: u64,
    rss_restarted: u64,
    hwm_restarted: u64,
    rss_windows: u64,
    ready_after_restart: f64,
    open: (f64, f64),
    close: (f64, f64),
    floor: (f64, f64),
    rollout: (f64, f64),
}

#[tokio::test]
#[ignore = "benchmark: prints figures; run with tests/bench/scale"]
async fn memory_and_latencies_from_100_to_1000_nodes() {
    let steps: Vec<usize> = std::env::var("SCALE_STEPS")
        .unwrap_or_else(|_| "100,300,1000".into())
        .split(',')
        .map(|s| s.trim().parse().expect("SCALE_STEPS: node counts"))
        .collect();
    let windows: usize = env_or("SCALE_WINDOWS", 100);
    let drains: usize = env_or("SCALE_DRAINS", 20);
    with_namespace(move |client, ns| async move {
        // The lone Deployment the drains move between two nodes of its own.
        let drain_nodes = [format!("{ns}-a"), format!("{ns}-b")];
        create_ready_node(&client, &ns, &drain_nodes[0]).await;
        let app = deploy_lone(&client, &ns, lone(&ns, "bench"), &drain_nodes[0]).await;
        create_ready_node(&client, &ns, &drain_nodes[1]).await;

        // Cluster-wide, as the chart runs it.
        let mut op = Operator::start_with(&ns, vec!["--insecure-no-auth".into()]).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let (baseline, _) = op.rss_kib();
        println!(
            "operator on the empty cluster: VmRSS {:.1} MiB (the baseline)",
            mib(baseline)
        );

        let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        let (mut have_nodes, mut have_pods, mut rows) = (0, 0, Vec::new());
        for &nodes in &steps {
            let t0 = Instant::now();
            grow_nodes(&client, &ns, have_nodes, nodes).await;
            if have_nodes == 0 {
                for i in 0..windows {
                    let d = deployment(&format!("w-{i}"))
                        .node_selector(SCALE_LABEL, &ns)
                        .build();
                    deployments.create(&PostParams::default(), &d).await.unwrap();
                }
            }
            have_nodes = nodes;
            let pods = nodes * PODS_PER_NODE - windows;
            grow_pods(&client, &ns, nodes, have_pods, pods).await;
            have_pods = pods;
            wait::until(
                "every window Deployment to be available",
                Duration::from_secs(300),
                || async {
                    assert_nodes_kept_up(&client).await;
                    let list = deployments.list(&ListParams::default()).await.unwrap();
                    list.items.iter().all(|d| {
                        d.status
                            .as_ref()
                            .is_some_and(|s| s.available_replicas == Some(1))
                    })
                },
            )
            .await;
            eprintln!(
                "[{nodes} nodes] cluster grown in {:.0}s",
                t0.elapsed().as_secs_f64()
            );
            tokio::time::sleep(Duration::from_secs(5)).await;
            let (rss_running, _) = op.rss_kib();

            let restart = Instant::now();
            op.restart().await;
            let ready_after_restart = restart.elapsed().as_secs_f64();
            tokio::time::sleep(Duration::from_secs(3)).await;
            let (rss_restarted, hwm_restarted) = op.rss_kib();

            let (mut open, mut close) = windows_round(&op, &ns, nodes, windows).await;
            let (rss_windows, _) = op.rss_kib();
            let (mut floor, mut rollout) =
                signal_to_rollout(&client, &ns, &drain_nodes, &app, drains).await;
            assert_nodes_kept_up(&client).await;
            let row = Row {
                nodes: nodes + 2,
                pods: pods + windows + 1,
                rss_running,
                rss_restarted,
                hwm_restarted,
                rss_windows,
                ready_after_restart,
                open: p50_p99(&mut open),
                close: p50_p99(&mut close),
                floor: p50_p99(&mut floor),
                rollout: p50_p99(&mut rollout),
            };
            eprintln!(
                "[{nodes} nodes] RSS {:.1} MiB, open p99 {:.0} ms, rollout p99 {:.0} ms (floor {:.0} ms)",
                mib(row.rss_windows),
                row.open.1,
                row.rollout.1,
                row.floor.1
            );
            rows.push(row);
        }

        println!();
        println!(
            "operator memory (MiB) and latencies (ms), baseline VmRSS on the empty cluster {:.1} MiB",
            mib(baseline)
        );
        println!(
            "| nodes | pods | RSS running | RSS restarted (peak) | RSS {windows} windows open | ready after restart (s) | open → Ready p50 / p99 | close → released p50 / p99 | floor p50 / p99 | signal → rollout p50 / p99 |"
        );
        println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for r in &rows {
            println!(
                "| {} | {} | {:.1} | {:.1} ({:.1}) | {:.1} | {:.2} | {:.0} / {:.0} | {:.0} / {:.0} | {:.0} / {:.0} | {:.0} / {:.0} |",
                r.nodes,
                r.pods,
                mib(r.rss_running),
                mib(r.rss_restarted),
                mib(r.hwm_restarted),
                mib(r.rss_windows),
                r.ready_after_restart,
                r.open.0,
                r.open.1,
                r.close.0,
                r.close.1,
                r.floor.0,
                r.floor.1,
                r.rollout.0,
                r.rollout.1,
            );
        }
        let metrics = op.metrics().await;
        for line in metrics.lines().filter(|l| {
            l.starts_with("disruption_guard_drain_rollouts_total")
                || l.starts_with("disruption_guard_drain_skips_total")
                || l.starts_with("disruption_guard_window_writes_total ")
        }) {
            println!("{line}");
        }

        // The namespace's deletion removes the pods; the benchmark's nodes are removed here.
        let _ = Api::<Node>::all(client.clone())
            .delete_collection(
                &DeleteParams::background(),
                &ListParams::default().labels(&format!("{SCALE_LABEL}={ns}")),
            )
            .await;
    })
    .await;
}
