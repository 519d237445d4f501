//! Figures at scale, not assertions: the operator watching a cluster that grows in steps
//! (`SCALE_STEPS`, default 100, 300 and 1,000 kwok nodes; 2,500 and 5,000 are accepted too) with
//! 10 pods per node spread over many namespaces, and 100 windows open in a few of them. At each
//! size it prints
//! - resident memory (VmRSS) of the running operator, and of a restarted one after its caches
//!   synced (with its peak, VmHWM, which the initial lists set), beside the empty-cluster
//!   baseline measured at the start of the same run, and the operator's bytes per cached pod
//!   ((RSS at the step − baseline) / pods in the cluster);
//! - beside it, in the same run and the same cluster, the RSS of the components that cache the
//!   same pods and nodes: kube-scheduler, kube-controller-manager, Karpenter (when the cluster
//!   runs it; `tests/bench/scale` starts it) and, for context, kube-apiserver, read from the PID
//!   files `tests/cluster/up` writes; and the ratio operator / kube-scheduler;
//! - how long a restarted operator takes to become ready (every watch synced);
//! - open → Ready of 100 windows, each through the HTTP API with `?wait=true`, one after
//!   another, so the last one opens while 99 are open (p50/p99), and close → released; beside
//!   it the floor no operator can beat: a bare PodDisruptionBudget created over the same pods,
//!   timed until the disruption controller reports `disruptionsAllowed: 0` for its current
//!   generation (as many samples as windows, p50/p99);
//! - signal → rollout of a lone Deployment whose node gets Karpenter's disrupted taint, beside
//!   a bare watch of the same node (the floor) (p50/p99);
//! - an allowed eviction (a dry run of a pod outside every window and disruption, as most are)
//!   with the operator's eviction webhook, beside the same eviction without it (its namespace
//!   opted out), `SCALE_EVICTIONS` (default 100) of each (p50/p99).
//!
//! The operator runs cluster-wide with the eviction webhook, as the chart installs it, as the
//! chart's ServiceAccount.
//!
//! Background pods are bare pods bound to the nodes by `spec.nodeName` (no scheduler work), dealt
//! round-robin over `SCALE_NAMESPACES` namespaces (default: one per 10 nodes of the largest
//! step), as a shared CI cluster has them; the windows' Deployments run on the same nodes, in
//! `SCALE_WINDOW_NAMESPACES` namespaces of their own (default 10). A progress line per phase
//! goes to stderr with the time since the step and the run started.
//!
//! With `SCALE_BASELINE=<path of another build>` that build runs beside the one under test, in
//! the same cluster, cluster-wide, as a follower that never writes (its leader-election Lease
//! is held by nobody): its RSS, bytes per pod and ready-after-restart are printed beside this
//! build's, for a before/after in the same conditions.
//!
//! Creates that meet a busy API server (time-outs, 429, 5xx) are retried for two minutes.
//!
//! Run it on a cluster of its own: `tests/bench/scale` (`SCALE_WINDOWS`, default 100;
//! `SCALE_DRAINS`, default 20).

mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use disruption_guard::resources::names::INTERCEPT_EVICTIONS;
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Namespace, Node, Pod, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{
    DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::{Api, Client};
use serde_json::json;
use support::drain::{deploy_lone, lone, signal_to_rollout};
use support::fixtures::{deployment, kwok_node};
use support::intercept::{DRY_RUN, reviews};
use support::operator::Operator;
use support::stats::percentile;
use support::{create_ready_node, wait, with_namespace};

const PODS_PER_NODE: usize = 10;
/// Label of the benchmark's nodes, pods and namespaces (the drain nodes are the test
/// namespace's own); its value is the test namespace.
const SCALE_LABEL: &str = "disruption-guard.io/scale";
const CONCURRENCY: usize = 48;
const CREATE: PostParams = PostParams {
    dry_run: false,
    field_manager: None,
};

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

/// Prints a progress line: the phase, the time since the step and since the run started.
fn progress(nodes: usize, phase: &str, step: Instant, run: Instant) {
    eprintln!(
        "[{nodes} nodes] {phase} (step {:.0}s, run {:.0}s)",
        step.elapsed().as_secs_f64(),
        run.elapsed().as_secs_f64()
    );
}

/// The cluster's state directory, where `tests/cluster/up` records its components' PIDs:
/// `DISRUPTION_GUARD_CLUSTER_DIR`, else the directory of the kubeconfig it wrote.
fn cluster_dir() -> Option<PathBuf> {
    std::env::var_os("DISRUPTION_GUARD_CLUSTER_DIR")
        .map(PathBuf::from)
        .or_else(|| support::kubeconfig().parent().map(PathBuf::from))
}

/// VmRSS (KiB) of the cluster component `name` (`kube-scheduler`, `karpenter`…), found by the
/// PID file `tests/cluster/up` wrote; `None` when the cluster does not run it.
fn component_rss_kib(name: &str) -> Option<u64> {
    let pid = std::fs::read_to_string(cluster_dir()?.join("pids").join(name)).ok()?;
    let status = std::fs::read_to_string(format!("/proc/{}/status", pid.trim())).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// RSS of the components that cache the same objects, read at one moment.
#[derive(Clone, Copy, Default)]
struct Peers {
    scheduler: Option<u64>,
    controller_manager: Option<u64>,
    karpenter: Option<u64>,
    apiserver: Option<u64>,
}

impl Peers {
    fn read() -> Self {
        Peers {
            scheduler: component_rss_kib("kube-scheduler"),
            controller_manager: component_rss_kib("kube-controller-manager"),
            karpenter: component_rss_kib("karpenter"),
            apiserver: component_rss_kib("kube-apiserver"),
        }
    }
}

/// MiB with one decimal, or "–" for a component the cluster does not run.
fn mib_or_dash(kib: Option<u64>) -> String {
    kib.map_or_else(|| "–".into(), |k| format!("{:.1}", mib(k)))
}

/// Runs `create` until it succeeds (or finds the object already there: an earlier attempt
/// that timed out on the client may have created it), retrying errors of a busy API server
/// (time-outs, 429, 5xx) for up to two minutes.
async fn create_patiently<F, Fut, T>(what: &str, mut create: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        match create().await {
            Ok(_) => return,
            Err(kube::Error::Api(e)) if e.code == 409 => return,
            Err(kube::Error::Api(e)) if e.code != 429 && e.code < 500 => {
                panic!("creating {what}: {e}")
            }
            Err(e) if Instant::now() < deadline => {
                eprintln!("creating {what}: {e}; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => panic!("creating {what}: {e} (retried for 120 s)"),
        }
    }
}

/// Creates the namespaces `<ns>-<kind>-<k>` for k in `0..count` (labelled with the run) and
/// waits for their default ServiceAccounts, without which pods are refused.
async fn create_namespaces(client: &Client, ns: &str, kind: &str, count: usize) -> Vec<String> {
    let names: Vec<String> = (0..count).map(|k| format!("{ns}-{kind}-{k}")).collect();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    stream::iter(names.clone())
        .for_each_concurrent(CONCURRENCY, |name| {
            let (namespaces, client) = (namespaces.clone(), client.clone());
            async move {
                let object: Namespace = serde_json::from_value(json!({
                    "metadata": {"name": name, "labels": {SCALE_LABEL: ns}}
                }))
                .unwrap();
                create_patiently(&name, || namespaces.create(&CREATE, &object)).await;
                let sas: Api<ServiceAccount> = Api::namespaced(client, &name);
                wait::until(
                    "a namespace's default ServiceAccount",
                    Duration::from_secs(60),
                    || async { sas.get_opt("default").await.ok().flatten().is_some() },
                )
                .await;
            }
        })
        .await;
    names
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
                create_patiently(&name, || nodes.create(&CREATE, &node)).await;
            }
        })
        .await;
    let mine = ListParams::default().labels(&format!("{SCALE_LABEL}={ns}"));
    wait::until(
        "the benchmark's nodes to be Ready",
        Duration::from_secs(600 + to as u64 / 5),
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

/// Creates background pods `bg-<i>` for i in `from..to`, spread over `nodes` nodes and dealt
/// round-robin over `namespaces`, and waits until `to` of them run.
async fn grow_pods(
    client: &Client,
    ns: &str,
    namespaces: &[String],
    nodes: usize,
    from: usize,
    to: usize,
) {
    stream::iter(from..to)
        .for_each_concurrent(CONCURRENCY, |i| {
            let pods: Api<Pod> = Api::namespaced(client.clone(), &namespaces[i % namespaces.len()]);
            async move {
                let name = format!("bg-{i}");
                let pod: Pod = serde_json::from_value(json!({
                    "metadata": {
                        "name": name,
                        "labels": {"app": "bg", "shard": format!("s{}", i % 50), SCALE_LABEL: ns}
                    },
                    "spec": {
                        "nodeName": format!("scale-{ns}-{}", i % nodes),
                        "terminationGracePeriodSeconds": 0,
                        "containers": [{"name": "app", "image": "registry.invalid/bg:1"}]
                    }
                }))
                .unwrap();
                create_patiently(&name, || pods.create(&CREATE, &pod)).await;
            }
        })
        .await;
    let pods: Api<Pod> = Api::all(client.clone());
    let running = ListParams::default()
        .labels(&format!("app=bg,{SCALE_LABEL}={ns}"))
        .fields("status.phase=Running");
    wait::until(
        "the background pods to run",
        Duration::from_secs(900 + to as u64 / 50),
        || async {
            tokio::time::sleep(Duration::from_secs(2)).await;
            assert_nodes_kept_up(client).await;
            pods.list_metadata(&running).await.unwrap().items.len() >= to
        },
    )
    .await;
}

/// Namespace of window `i`'s Deployment `w-<i>`.
fn window_ns(window_namespaces: &[String], i: usize) -> &str {
    &window_namespaces[i % window_namespaces.len()]
}

/// Opens `windows` windows over the Deployments `w-<i>` through the API, one after another,
/// and returns each open → Ready latency (ms). Then closes them, returning close → released.
async fn windows_round(
    op: &Operator,
    window_namespaces: &[String],
    step: usize,
    windows: usize,
) -> (Vec<f64>, Vec<f64>) {
    let http = reqwest::Client::new();
    let mut open = Vec::new();
    let mut slowest = Vec::new();
    for i in 0..windows {
        let ns = window_ns(window_namespaces, i);
        let started = Instant::now();
        let resp = http
            .post(format!("{}/v1/namespaces/{ns}/windows?wait=true", op.api))
            .json(&json!({"name": format!("s{step}-w{i}"), "selector": format!("app=w-{i}"), "ttl": "30m"}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 201, "{}", resp.text().await.unwrap());
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        open.push(ms);
        slowest.push((ms, i));
    }
    slowest.sort_by(|a, b| b.0.total_cmp(&a.0));
    let first_in_namespace = |i: usize| i < window_namespaces.len();
    eprintln!(
        "[{step} nodes] slowest opens (ms): {}",
        slowest
            .iter()
            .take(5)
            .map(|(ms, i)| format!(
                "w{i} {ms:.0}{}",
                if first_in_namespace(*i) {
                    " (its namespace's first)"
                } else {
                    ""
                }
            ))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut close = Vec::new();
    for i in 0..windows {
        let ns = window_ns(window_namespaces, i);
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

/// The floor of open → Ready: a bare PodDisruptionBudget (`minAvailable: 1`) over each window's
/// pods, created one after another (the last while the others exist, as the windows), each timed
/// from just before its create until the disruption controller reports `disruptionsAllowed: 0`
/// with `observedGeneration` equal to its generation. Returns the latencies (ms); the PDBs are
/// deleted afterwards.
async fn bare_pdb_round(
    client: &Client,
    window_namespaces: &[String],
    step: usize,
    windows: usize,
) -> Vec<f64> {
    let mut floor = Vec::new();
    for i in 0..windows {
        let ns = window_ns(window_namespaces, i);
        let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), ns);
        let name = format!("floor-s{step}-w{i}");
        // The watch starts before the create, so no status update is missed.
        let mut events = pdbs
            .watch(
                &WatchParams::default().fields(&format!("metadata.name={name}")),
                "0",
            )
            .await
            .unwrap()
            .boxed();
        let pdb: PodDisruptionBudget = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": format!("w-{i}")}}}
        }))
        .unwrap();
        let started = Instant::now();
        pdbs.create(&PostParams::default(), &pdb).await.unwrap();
        let settled = |p: &PodDisruptionBudget| {
            p.status.as_ref().is_some_and(|s| {
                s.disruptions_allowed == 0
                    && s.current_healthy >= 1
                    && s.observed_generation.is_some()
                    && s.observed_generation == p.metadata.generation
            })
        };
        let waited = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(event) = events.try_next().await.unwrap() {
                if let WatchEvent::Added(p) | WatchEvent::Modified(p) = event
                    && settled(&p)
                {
                    return;
                }
            }
            panic!("the watch of PDB {ns}/{name} ended before its status was current");
        })
        .await;
        assert!(
            waited.is_ok(),
            "the disruption controller did not report PDB {ns}/{name} within 60s"
        );
        floor.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    for i in 0..windows {
        let ns = window_ns(window_namespaces, i);
        let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), ns);
        pdbs.delete(&format!("floor-s{step}-w{i}"), &DeleteParams::default())
            .await
            .unwrap();
    }
    floor
}

/// Marks `namespace` as opted out of the eviction webhook (`opt_out`), or not, and waits until
/// the API server acts on it: a dry-run eviction of `pod` reaches the webhook exactly when the
/// namespace is not opted out.
async fn opt_out(client: &Client, op: &Operator, namespace: &str, pod: &str, opt_out: bool) {
    let value = if opt_out { json!("false") } else { json!(null) };
    Api::<Namespace>::all(client.clone())
        .patch(
            namespace,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {INTERCEPT_EVICTIONS: value}}})),
        )
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    wait::until(
        "the API server to see the namespace's opt-out label",
        Duration::from_secs(60),
        || async {
            let before = reviews(op).await;
            pods.evict(pod, &DRY_RUN).await.unwrap();
            (reviews(op).await > before) != opt_out
        },
    )
    .await;
}

/// The eviction webhook's floor: `count` dry-run evictions of the background pod `bg-0` (a
/// bare pod in a namespace without windows, on a node no one disrupts, as most of a cluster's
/// evictions are) answered without the webhook — its namespace opted out
/// (`disruption-guard.io/intercept-evictions: "false"`) — then as many with it (ms). The
/// webhook's review count proves which round it saw.
async fn evictions_round(
    client: &Client,
    op: &Operator,
    namespace: &str,
    count: usize,
) -> (Vec<f64>, Vec<f64>) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pod = "bg-0";
    let time = || async {
        let mut ms = Vec::with_capacity(count);
        for _ in 0..count {
            let started = Instant::now();
            pods.evict(pod, &DRY_RUN)
                .await
                .expect("an allowed eviction");
            ms.push(started.elapsed().as_secs_f64() * 1000.0);
        }
        ms
    };
    opt_out(client, op, namespace, pod, true).await;
    let before = reviews(op).await;
    let without = time().await;
    assert_eq!(reviews(op).await, before, "no eviction reached the webhook");
    opt_out(client, op, namespace, pod, false).await;
    let before = reviews(op).await;
    let with = time().await;
    assert_eq!(
        (reviews(op).await - before) as usize,
        count,
        "every eviction reached the webhook"
    );
    (without, with)
}

/// The baseline build's figures at one step: RSS running, ready after a restart (s), RSS
/// restarted and its peak.
struct Baseline {
    rss_running: u64,
    ready_after_restart: f64,
    rss_restarted: u64,
    hwm_restarted: u64,
}

/// Starts the build at `program` beside the one under test, cluster-wide, as a follower that
/// never writes: its leader-election Lease is held by nobody for a day, so it keeps its caches
/// (as every replica does) and leaves the windows to the operator under test.
async fn start_baseline(client: &Client, ns: &str, program: &str) -> Operator {
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": "scale-baseline"},
        "spec": {
            "holderIdentity": "nobody",
            "leaseDurationSeconds": 86400,
            "acquireTime": jiff::Timestamp::now().to_string(),
            "renewTime": jiff::Timestamp::now().to_string(),
        }
    }))
    .unwrap();
    Api::<Lease>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &lease)
        .await
        .unwrap();
    Operator::start_program(
        PathBuf::from(program),
        ns,
        "baseline",
        vec![
            "--insecure-no-auth".into(),
            "--leader-election".into(),
            format!("--leader-election-namespace={ns}"),
            "--leader-election-lease=scale-baseline".into(),
            "--leader-election-identity=baseline".into(),
        ],
    )
    .await
}

struct Row {
    nodes: usize,
    baseline: Option<Baseline>,
    pods: usize,
    rss_running: u64,
    rss_restarted: u64,
    hwm_restarted: u64,
    rss_windows: u64,
    peers: Peers,
    ready_after_restart: f64,
    open: (f64, f64),
    pdb_floor: (f64, f64),
    close: (f64, f64),
    floor: (f64, f64),
    rollout: (f64, f64),
    evict_floor: (f64, f64),
    evict: (f64, f64),
}

#[tokio::test]
#[ignore = "benchmark: prints figures; run with tests/bench/scale"]
async fn memory_and_latencies_by_cluster_size() {
    let steps: Vec<usize> = std::env::var("SCALE_STEPS")
        .unwrap_or_else(|_| "100,300,1000".into())
        .split(',')
        .map(|s| s.trim().parse().expect("SCALE_STEPS: node counts"))
        .collect();
    assert!(
        steps.windows(2).all(|w| w[0] < w[1]),
        "SCALE_STEPS: node counts in increasing order"
    );
    let windows: usize = env_or("SCALE_WINDOWS", 100);
    let drains: usize = env_or("SCALE_DRAINS", 20);
    let evictions: usize = env_or("SCALE_EVICTIONS", 100);
    let largest = *steps.last().expect("SCALE_STEPS: at least one node count");
    let bg_namespaces: usize = env_or("SCALE_NAMESPACES", (largest / 10).max(1));
    let window_namespaces: usize = env_or("SCALE_WINDOW_NAMESPACES", 10.min(windows).max(1));
    with_namespace(move |client, ns| async move {
        let run = Instant::now();
        // The lone Deployment the drains move between two nodes of its own.
        let drain_nodes = [format!("{ns}-a"), format!("{ns}-b")];
        create_ready_node(&client, &ns, &drain_nodes[0]).await;
        let app = deploy_lone(&client, &ns, lone(&ns, "bench"), &drain_nodes[0]).await;
        create_ready_node(&client, &ns, &drain_nodes[1]).await;

        // Cluster-wide, with the eviction webhook, as the chart runs it.
        let mut op = Operator::intercepting_in(&ns, None, &[]).await;
        let mut other = match std::env::var("SCALE_BASELINE") {
            Ok(program) if !program.is_empty() => {
                Some(start_baseline(&client, &ns, &program).await)
            }
            _ => None,
        };
        tokio::time::sleep(Duration::from_secs(3)).await;
        let (baseline, _) = op.rss_kib();
        let other_empty = other.as_ref().map_or(0, |o| o.rss_kib().0);
        if other.is_some() {
            println!(
                "empty cluster: baseline build ({}) VmRSS {:.1} MiB",
                std::env::var("SCALE_BASELINE").unwrap_or_default(),
                mib(other_empty)
            );
        }
        let peers_empty = Peers::read();
        println!(
            "empty cluster: operator VmRSS {:.1} MiB (the baseline), kube-scheduler {}, \
             kube-controller-manager {}, Karpenter {}, kube-apiserver {} MiB",
            mib(baseline),
            mib_or_dash(peers_empty.scheduler),
            mib_or_dash(peers_empty.controller_manager),
            mib_or_dash(peers_empty.karpenter),
            mib_or_dash(peers_empty.apiserver),
        );
        eprintln!(
            "[setup] {bg_namespaces} namespaces of background pods, {windows} windows in \
             {window_namespaces} namespaces (run {:.0}s)",
            run.elapsed().as_secs_f64()
        );
        let bg_namespaces = create_namespaces(&client, &ns, "bg", bg_namespaces).await;
        let window_namespaces = create_namespaces(&client, &ns, "w", window_namespaces).await;

        let (mut have_nodes, mut have_pods, mut rows) = (0, 0, Vec::new());
        for &nodes in &steps {
            let t0 = Instant::now();
            progress(nodes, &format!("growing nodes {have_nodes} → {nodes}"), t0, run);
            grow_nodes(&client, &ns, have_nodes, nodes).await;
            if have_nodes == 0 {
                for i in 0..windows {
                    let d = deployment(&format!("w-{i}"))
                        .node_selector(SCALE_LABEL, &ns)
                        .build();
                    Api::<Deployment>::namespaced(client.clone(), window_ns(&window_namespaces, i))
                        .create(&PostParams::default(), &d)
                        .await
                        .unwrap();
                }
            }
            have_nodes = nodes;
            let pods = nodes * PODS_PER_NODE - windows;
            progress(nodes, &format!("creating pods {have_pods} → {pods}"), t0, run);
            grow_pods(&client, &ns, &bg_namespaces, nodes, have_pods, pods).await;
            have_pods = pods;
            let deployments: Api<Deployment> = Api::all(client.clone());
            wait::until(
                "every window Deployment to be available",
                Duration::from_secs(300),
                || async {
                    assert_nodes_kept_up(&client).await;
                    let list = deployments.list(&ListParams::default()).await.unwrap();
                    let mine: Vec<_> = list
                        .items
                        .iter()
                        .filter(|d| {
                            d.metadata
                                .namespace
                                .as_ref()
                                .is_some_and(|n| window_namespaces.contains(n))
                        })
                        .collect();
                    mine.len() == windows
                        && mine.iter().all(|d| {
                            d.status
                                .as_ref()
                                .is_some_and(|s| s.available_replicas == Some(1))
                        })
                },
            )
            .await;
            progress(nodes, "cluster grown; measuring memory and a restart", t0, run);
            tokio::time::sleep(Duration::from_secs(5)).await;
            let (rss_running, _) = op.rss_kib();
            let peers = Peers::read();

            let restart = Instant::now();
            op.restart().await;
            let ready_after_restart = restart.elapsed().as_secs_f64();
            tokio::time::sleep(Duration::from_secs(3)).await;
            let (rss_restarted, hwm_restarted) = op.rss_kib();
            let baseline_row = match other.as_mut() {
                Some(other) => {
                    let (rss_running, _) = other.rss_kib();
                    let restart = Instant::now();
                    other.restart().await;
                    let ready_after_restart = restart.elapsed().as_secs_f64();
                    tokio::time::sleep(Duration::from_secs(3)).await;
                    let (rss_restarted, hwm_restarted) = other.rss_kib();
                    Some(Baseline {
                        rss_running,
                        ready_after_restart,
                        rss_restarted,
                        hwm_restarted,
                    })
                }
                None => None,
            };

            progress(nodes, &format!("creating {windows} bare PDBs (the floor)"), t0, run);
            let mut pdb_floor = bare_pdb_round(&client, &window_namespaces, nodes, windows).await;
            progress(nodes, &format!("opening and closing {windows} windows"), t0, run);
            let (mut open, mut close) = windows_round(&op, &window_namespaces, nodes, windows).await;
            let (rss_windows, _) = op.rss_kib();
            progress(nodes, &format!("{drains} drains (signal → rollout)"), t0, run);
            let (mut floor, mut rollout) =
                signal_to_rollout(&client, &ns, &drain_nodes, &app, drains).await;
            progress(nodes, &format!("{evictions} evictions without and with the webhook"), t0, run);
            let (mut evict_floor, mut evict) =
                evictions_round(&client, &op, &bg_namespaces[0], evictions).await;
            assert_nodes_kept_up(&client).await;
            let row = Row {
                nodes: nodes + 2,
                baseline: baseline_row,
                pods: pods + windows + 1,
                rss_running,
                rss_restarted,
                hwm_restarted,
                rss_windows,
                peers,
                ready_after_restart,
                open: p50_p99(&mut open),
                pdb_floor: p50_p99(&mut pdb_floor),
                close: p50_p99(&mut close),
                floor: p50_p99(&mut floor),
                rollout: p50_p99(&mut rollout),
                evict_floor: p50_p99(&mut evict_floor),
                evict: p50_p99(&mut evict),
            };
            progress(
                nodes,
                &format!(
                    "done: RSS {:.1} MiB (kube-scheduler {} MiB), open p99 {:.0} ms (bare PDB {:.0} ms), \
                     rollout p99 {:.0} ms (floor {:.0} ms)",
                    mib(row.rss_windows),
                    mib_or_dash(row.peers.scheduler),
                    row.open.1,
                    row.pdb_floor.1,
                    row.rollout.1,
                    row.floor.1
                ),
                t0,
                run,
            );
            rows.push(row);
        }

        println!();
        println!(
            "operator memory (MiB) and latencies (ms), baseline VmRSS on the empty cluster {:.1} MiB; \
             {} namespaces of background pods, windows in {}",
            mib(baseline),
            bg_namespaces.len(),
            window_namespaces.len()
        );
        println!(
            "| nodes | pods | RSS running | RSS restarted (peak) | RSS {windows} windows open | ready after restart (s) | open → Ready p50 / p99 | bare PDB p50 / p99 | close → released p50 / p99 | floor p50 / p99 | signal → rollout p50 / p99 |"
        );
        println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for r in &rows {
            println!(
                "| {} | {} | {:.1} | {:.1} ({:.1}) | {:.1} | {:.2} | {:.0} / {:.0} | {:.0} / {:.0} | {:.0} / {:.0} | {:.0} / {:.0} | {:.0} / {:.0} |",
                r.nodes,
                r.pods,
                mib(r.rss_running),
                mib(r.rss_restarted),
                mib(r.hwm_restarted),
                mib(r.rss_windows),
                r.ready_after_restart,
                r.open.0,
                r.open.1,
                r.pdb_floor.0,
                r.pdb_floor.1,
                r.close.0,
                r.close.1,
                r.floor.0,
                r.floor.1,
                r.rollout.0,
                r.rollout.1,
            );
        }
        println!();
        println!(
            "an allowed eviction (dry run, a pod outside every window and disruption), ms, \
             {evictions} of each, same run and pod"
        );
        println!("| nodes | pods | without the webhook p50 / p99 | with it p50 / p99 |");
        println!("|---:|---:|---:|---:|");
        for r in &rows {
            println!(
                "| {} | {} | {:.1} / {:.1} | {:.1} / {:.1} |",
                r.nodes, r.pods, r.evict_floor.0, r.evict_floor.1, r.evict.0, r.evict.1
            );
        }
        println!();
        println!(
            "RSS (MiB) in the same run and cluster, read when the step's cluster was grown; \
             bytes per cached pod = (operator RSS − baseline) / pods"
        );
        println!(
            "| nodes | pods | operator | bytes per pod | kube-scheduler | operator / scheduler | kube-controller-manager | Karpenter | kube-apiserver |"
        );
        println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for r in &rows {
            let ratio = r.peers.scheduler.map_or_else(
                || "–".into(),
                |s| format!("{:.2}", r.rss_running as f64 / s as f64),
            );
            println!(
                "| {} | {} | {:.1} | {:.0} | {} | {} | {} | {} | {} |",
                r.nodes,
                r.pods,
                mib(r.rss_running),
                r.rss_running.saturating_sub(baseline) as f64 * 1024.0 / r.pods as f64,
                mib_or_dash(r.peers.scheduler),
                ratio,
                mib_or_dash(r.peers.controller_manager),
                mib_or_dash(r.peers.karpenter),
                mib_or_dash(r.peers.apiserver),
            );
        }
        if rows.iter().any(|r| r.baseline.is_some()) {
            println!();
            println!(
                "this build beside the baseline build ({}), same run and cluster (MiB, s)",
                std::env::var("SCALE_BASELINE").unwrap_or_default()
            );
            println!(
                "| nodes | pods | RSS running: this / baseline | bytes per pod: this / baseline | RSS restarted (peak): this / baseline | ready after restart: this / baseline |"
            );
            println!("|---:|---:|---:|---:|---:|---:|");
            for r in &rows {
                let Some(b) = &r.baseline else { continue };
                let per_pod = |rss: u64, empty: u64| {
                    rss.saturating_sub(empty) as f64 * 1024.0 / r.pods as f64
                };
                println!(
                    "| {} | {} | {:.1} / {:.1} | {:.0} / {:.0} | {:.1} ({:.1}) / {:.1} ({:.1}) | {:.2} / {:.2} |",
                    r.nodes,
                    r.pods,
                    mib(r.rss_running),
                    mib(b.rss_running),
                    per_pod(r.rss_running, baseline),
                    per_pod(b.rss_running, other_empty),
                    mib(r.rss_restarted),
                    mib(r.hwm_restarted),
                    mib(b.rss_restarted),
                    mib(b.hwm_restarted),
                    r.ready_after_restart,
                    b.ready_after_restart,
                );
            }
        }
        let metrics = op.metrics().await;
        for line in metrics.lines().filter(|l| {
            l.starts_with("disruption_guard_drain_rollouts_total")
                || l.starts_with("disruption_guard_drain_skips_total")
                || l.starts_with("disruption_guard_window_writes_total ")
        }) {
            println!("{line}");
        }

        // The benchmark's namespaces (and their pods) and nodes are removed here; the test
        // namespace by the harness.
        let namespaces: Api<Namespace> = Api::all(client.clone());
        for name in bg_namespaces.iter().chain(&window_namespaces) {
            let _ = namespaces.delete(name, &DeleteParams::background()).await;
        }
        let _ = Api::<Node>::all(client.clone())
            .delete_collection(
                &DeleteParams::background(),
                &ListParams::default().labels(&format!("{SCALE_LABEL}={ns}")),
            )
            .await;
    })
    .await;
}
