//! The headline benchmark: a day of CI under the real Karpenter (its KWOK provider), five ways
//! of coping with consolidation side by side, on one seed and one schedule.
//!
//! The day: `CI_DAY_PIPELINES` namespaces (default 40), each a pipeline of 2–3 one-replica
//! Deployments (1.5 CPU each, on the NodePool's small `c` instances) behind Services. Each
//! pipeline repeats deploy (a rollout restart, which makes the surge node consolidation later
//! wants back), test (60–180 s sampling each Deployment's ready endpoints every 100 ms; with the
//! guard's windows, inside `disruption-guard run`), idle (30–120 s), for `CI_DAY_MINUTES`
//! (default 30). At a third and two thirds of the day a burst: `CI_DAY_BURST` matrix legs
//! (default 150) open windows within 5 s, and as many bare PDBs are created as the floor (in a
//! namespace of their own, over a pipeline's app scaled to zero, so no window reuses them).
//!
//! The arms (`CI_DAY_ARMS`, default `a,b,c,d,e`), run one after another on the same cluster:
//! a nothing; b a `minAvailable: 1` PDB per Deployment; c two replicas and `maxUnavailable: 1`;
//! d the guard as the chart runs it (windows and interception); e interception only.
//!
//! Printed per arm: test runs that saw a pod of theirs go and seconds without a ready endpoint;
//! node-minutes and nodes over time; node-minutes draining (tainted `karpenter.sh/disrupted`)
//! and blocked (a node Karpenter could disrupt still hosting a pipeline's pod); seconds from
//! the last test's end to consolidation; Karpenter's disruption decisions. For the guard: burst
//! open → Ready beside the bare PDB floor, the operator's API requests per window, CPU-seconds
//! and peak RSS, and its `held_node_seconds_total` beside the same measure taken from outside.
//! Prints the arms side by side and writes that table (`table.md`), `nodes.csv`, `runs.csv` and
//! `summary.json` into `CI_DAY_OUT` (default `target/ci-day`) for the plot
//! (`tests/bench/ci-day-plot.py`).
//!
//! Run with `tests/bench/ci-day` (a cluster of its own). Its own test binary: Karpenter is
//! cluster-wide.

mod support;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use support::drain::metric;
use support::operator::Operator;
use support::stats::percentile;
use support::windows::{guard_managers, guard_pdbs};
use support::{karpenter, wait, with_namespace};

const LABEL: &str = "ci-day";
const SAMPLE_EVERY: Duration = Duration::from_millis(100);
const NODE_SAMPLE_EVERY: Duration = Duration::from_secs(2);
/// After the day: how long the node count must stay put to count as consolidated (Karpenter
/// retries a consolidation it could not validate only minutes later).
const SETTLED: Duration = Duration::from_secs(180);

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One way of coping with consolidation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Arm {
    Nothing,
    Pdb,
    TwoReplicas,
    Guard,
    InterceptOnly,
}

impl Arm {
    fn parse(s: &str) -> Arm {
        match s.trim() {
            "a" => Arm::Nothing,
            "b" => Arm::Pdb,
            "c" => Arm::TwoReplicas,
            "d" => Arm::Guard,
            "e" => Arm::InterceptOnly,
            other => panic!("CI_DAY_ARMS: unknown arm {other:?} (a, b, c, d, e)"),
        }
    }

    fn letter(self) -> &'static str {
        ["a", "b", "c", "d", "e"][self as usize]
    }

    fn title(self) -> &'static str {
        match self {
            Arm::Nothing => "a. nothing",
            Arm::Pdb => "b. minAvailable: 1 PDB",
            Arm::TwoReplicas => "c. 2 replicas + maxUnavailable: 1",
            Arm::Guard => "d. the guard (windows + interception)",
            Arm::InterceptOnly => "e. interception only",
        }
    }

    fn windows(self) -> bool {
        self == Arm::Guard
    }
}

/// One pipeline's part of the day, the same in every arm.
#[derive(Clone, Debug)]
struct Pipeline {
    index: usize,
    apps: usize,
    /// Delay before its first deploy.
    offset: Duration,
    /// (test, idle) of each cycle, in order, more than a day needs.
    cycles: Vec<(Duration, Duration)>,
}

/// The seeded schedule.
fn schedule(seed: u64, pipelines: usize, day: Duration) -> Vec<Pipeline> {
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..pipelines)
        .map(|index| {
            let apps = rng.usize(2..=3);
            let offset = Duration::from_secs(rng.u64(0..=120));
            let mut cycles = Vec::new();
            let mut planned = offset;
            while planned < day + Duration::from_secs(600) {
                let test = Duration::from_secs(rng.u64(60..=180));
                let idle = Duration::from_secs(rng.u64(30..=120));
                planned += test + idle + Duration::from_secs(20);
                cycles.push((test, idle));
            }
            Pipeline {
                index,
                apps,
                offset,
                cycles,
            }
        })
        .collect()
}

fn app_name(i: usize) -> String {
    format!("app-{i}")
}

fn namespace(arm: Arm, pipeline: usize) -> String {
    format!("ci-day-{}-{pipeline}", arm.letter())
}

/// The namespace of the bare-PDB floor: apart from the pipelines, so that its PDBs (which
/// cover a pod like a pipeline's) are never reused by, and never change the plans of, the
/// windows it is compared with.
fn floor_namespace(arm: Arm) -> String {
    format!("ci-day-{}-floor", arm.letter())
}

/// The floor's Deployment: a pipeline's app scaled to zero, so the disruption controller
/// computes the floor's PDBs against a Deployment's selector as it does a window's, without a
/// pod (a Pending one would change what Karpenter simulates, a running one would cost a node).
fn floor_deployment() -> Deployment {
    deployment(&app_name(0), 0)
}

fn deployment(name: &str, replicas: i32) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "strategy": {"rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": {"app": name, LABEL: "true"},
                             "annotations": {"pod-ready.stage.kwok.x-k8s.io/delay": "3s"}},
                "spec": {
                    "nodeSelector": {"karpenter.sh/nodepool": "default", "karpenter.kwok.sh/instance-family": "c"},
                    // Small instances (2 or 4 CPU: one or two of these pods), as CI pools use.
                    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [
                            {"key": "karpenter.kwok.sh/instance-cpu", "operator": "In", "values": ["2", "4"]}
                        ]}]}}},
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "app", "image": format!("registry.invalid/{name}:v1"),
                                    "resources": {"requests": {"cpu": "1500m", "memory": "512Mi"}}}]
                }
            }
        }
    }))
    .unwrap()
}

fn service(name: &str) -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {LABEL: "true"}},
        "spec": {"selector": {"app": name}, "ports": [{"port": 80}]}
    }))
    .unwrap()
}

fn pdb(name: &str, spec: serde_json::Value) -> PodDisruptionBudget {
    let mut spec = spec;
    spec["selector"] = json!({"matchLabels": {"app": name}});
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

/// What the day's samplers read: every pipeline's pods and EndpointSlices, watched once.
#[derive(Clone)]
struct Seen {
    pods: Store<Pod>,
    slices: Store<EndpointSlice>,
}

impl Seen {
    async fn start(client: &Client) -> Seen {
        let (pods, pods_writer) = reflector::store();
        let (slices, slices_writer) = reflector::store();
        let config = watcher::Config::default().labels(&format!("{LABEL}=true"));
        let pod_stream = watcher(Api::<Pod>::all(client.clone()), config.clone())
            .default_backoff()
            .reflect(pods_writer)
            .for_each(|_| async {});
        let slice_stream = watcher(Api::<EndpointSlice>::all(client.clone()), config)
            .default_backoff()
            .reflect(slices_writer)
            .for_each(|_| async {});
        tokio::spawn(pod_stream);
        tokio::spawn(slice_stream);
        pods.wait_until_ready().await.unwrap();
        slices.wait_until_ready().await.unwrap();
        Seen { pods, slices }
    }

    fn ready_endpoints(&self, ns: &str, app: &str) -> usize {
        self.slices
            .state()
            .iter()
            .filter(|s| s.namespace().as_deref() == Some(ns))
            .filter(|s| {
                s.labels()
                    .get("kubernetes.io/service-name")
                    .map(String::as_str)
                    == Some(app)
            })
            .flat_map(|s| s.endpoints.iter())
            .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(false))
            .count()
    }

    /// Uids of the live (Running, not being deleted) pods of `ns`.
    fn live_pods(&self, ns: &str) -> BTreeSet<String> {
        self.pods
            .state()
            .iter()
            .filter(|p| p.namespace().as_deref() == Some(ns))
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .filter_map(|p| p.metadata.uid.clone())
            .collect()
    }

    /// Nodes hosting a live pod of `ns`.
    fn hosts(&self, ns: &str) -> BTreeSet<String> {
        self.pods
            .state()
            .iter()
            .filter(|p| p.namespace().as_deref() == Some(ns))
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| p.spec.as_ref()?.node_name.clone())
            .collect()
    }
}

/// One test run of a pipeline.
#[derive(Clone, Debug)]
struct TestRun {
    pipeline: usize,
    /// Seconds into the day it started.
    at: f64,
    seconds: f64,
    /// Seconds in which some Deployment of the pipeline had no ready endpoint.
    downtime: f64,
    /// Whether a pod that was live at the start went away during the run.
    pod_gone: bool,
}

/// Windows open now, by namespace (the harness's own count, for the outside measure).
type OpenWindows = Arc<Mutex<HashMap<String, usize>>>;

fn open_window(open: &OpenWindows, ns: &str, by: isize) {
    let mut open = open.lock().unwrap();
    let n = open.entry(ns.to_string()).or_default();
    *n = (*n as isize + by).max(0) as usize;
}

async fn rollout_done(deployments: &Api<Deployment>, name: &str) -> bool {
    let Ok(d) = deployments.get(name).await else {
        return false;
    };
    let (Some(spec), Some(status)) = (d.spec, d.status) else {
        return false;
    };
    status.observed_generation == d.metadata.generation
        && status.updated_replicas == spec.replicas
        && status.available_replicas == spec.replicas
        && status.replicas == spec.replicas
}

/// A rollout restart of every Deployment of the pipeline, waited for.
async fn deploy(client: &Client, ns: &str, apps: usize) {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let now = jiff::Timestamp::now().to_string();
    for i in 0..apps {
        let patch = json!({"spec": {"template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": now}}}}});
        let _ = deployments
            .patch(&app_name(i), &PatchParams::default(), &Patch::Merge(&patch))
            .await;
    }
    let started = Instant::now();
    for i in 0..apps {
        while !rollout_done(&deployments, &app_name(i)).await
            && started.elapsed() < Duration::from_secs(300)
        {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

/// One test run: samples every 100 ms for `length`; with windows, inside the real CLI.
#[allow(clippy::too_many_arguments)]
async fn test_run(
    seen: &Seen,
    op: Option<&Operator>,
    open: &OpenWindows,
    ns: &str,
    pipeline: &Pipeline,
    length: Duration,
    day_start: Instant,
    marker: PathBuf,
) -> TestRun {
    let _ = std::fs::remove_file(&marker);
    let mut runner = op.map(|op| {
        let script = format!("touch {} && sleep {}", marker.display(), length.as_secs());
        tokio::process::Command::new(support::operator::binary())
            .args([
                "run",
                "--server",
                &op.api,
                "-n",
                ns,
                "-l",
                &format!("{LABEL}=true"),
            ])
            .args(["--ttl", "30m", "--reason", "ci-day test"])
            .args(["--", "sh", "-c", &script])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("disruption-guard run")
    });
    if runner.is_some() {
        let waited = Instant::now();
        while !marker.exists() && waited.elapsed() < Duration::from_secs(120) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        open_window(open, ns, 1);
    }
    let at = day_start.elapsed().as_secs_f64();
    let before = seen.live_pods(ns);
    let mut run = TestRun {
        pipeline: pipeline.index,
        at,
        seconds: length.as_secs_f64(),
        downtime: 0.0,
        pod_gone: false,
    };
    let started = Instant::now();
    while started.elapsed() < length {
        if (0..pipeline.apps).any(|i| seen.ready_endpoints(ns, &app_name(i)) == 0) {
            run.downtime += SAMPLE_EVERY.as_secs_f64();
        }
        let now = seen.live_pods(ns);
        if !before.is_subset(&now) {
            run.pod_gone = true;
        }
        tokio::time::sleep(SAMPLE_EVERY).await;
    }
    if let Some(mut runner) = runner.take() {
        let _ = runner.wait().await;
        open_window(open, ns, -1);
    }
    run
}

/// A pipeline's day: deploy, test, idle, until the day is over.
#[allow(clippy::too_many_arguments)]
async fn pipeline_day(
    client: Client,
    seen: Seen,
    op: Option<Arc<Operator>>,
    open: OpenWindows,
    arm: Arm,
    pipeline: Pipeline,
    day_start: Instant,
    day: Duration,
) -> Vec<TestRun> {
    let ns = namespace(arm, pipeline.index);
    let marker = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{ns}.started"));
    tokio::time::sleep(pipeline.offset).await;
    let mut runs = Vec::new();
    for (test, idle) in &pipeline.cycles {
        if day_start.elapsed() >= day {
            break;
        }
        deploy(&client, &ns, pipeline.apps).await;
        let windows = op.as_deref().filter(|_| arm.windows());
        runs.push(
            test_run(
                &seen,
                windows,
                &open,
                &ns,
                &pipeline,
                *test,
                day_start,
                marker.clone(),
            )
            .await,
        );
        tokio::time::sleep(*idle).await;
    }
    runs
}

/// One node sample.
#[derive(Clone, Debug)]
struct NodeSample {
    at: f64,
    nodes: usize,
    draining: usize,
    /// Nodes Karpenter could disrupt that still host a pipeline's pod.
    blocked: usize,
    /// Of those, (window, node) pairs whose window is open: the outside measure of what
    /// windows hold.
    held_by_windows: usize,
}

/// Samples Karpenter's nodes every 2 s until `stop`.
async fn sample_nodes(
    client: Client,
    seen: Seen,
    open: OpenWindows,
    arm: Arm,
    pipelines: usize,
    day_start: Instant,
    stop: tokio_util::sync::CancellationToken,
) -> Vec<NodeSample> {
    let mut samples = Vec::new();
    while !stop.is_cancelled() {
        let nodes = karpenter::node_names(&client).await;
        let candidates = karpenter::candidates(&client).await;
        let draining = karpenter::tainted(&client).await;
        let mut blocked = BTreeSet::new();
        let mut held = 0;
        let open_now = open.lock().unwrap().clone();
        for p in 0..pipelines {
            let ns = namespace(arm, p);
            let hosts: BTreeSet<String> =
                seen.hosts(&ns).intersection(&candidates).cloned().collect();
            held += hosts.len() * open_now.get(&ns).copied().unwrap_or(0);
            blocked.extend(hosts);
        }
        samples.push(NodeSample {
            at: day_start.elapsed().as_secs_f64(),
            nodes: nodes.len(),
            draining: draining.len(),
            blocked: blocked.len(),
            held_by_windows: held,
        });
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(NODE_SAMPLE_EVERY) => {}
        }
    }
    samples
}

/// The integral of `f` over the samples (each held until the next), in node-minutes.
fn node_minutes(samples: &[NodeSample], f: impl Fn(&NodeSample) -> usize) -> f64 {
    samples
        .windows(2)
        .map(|w| f(&w[0]) as f64 * (w[1].at - w[0].at) / 60.0)
        .sum()
}

/// Karpenter's `voluntary_disruption_decisions_total` by decision and reason.
async fn karpenter_decisions() -> BTreeMap<String, f64> {
    let Some(port) = karpenter_metrics_port() else {
        return BTreeMap::new();
    };
    let Ok(resp) = reqwest::get(format!("http://127.0.0.1:{port}/metrics")).await else {
        return BTreeMap::new();
    };
    let text = resp.text().await.unwrap_or_default();
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("karpenter_voluntary_disruption_decisions_total{")
        else {
            continue;
        };
        let Some((labels, value)) = rest.split_once("} ") else {
            continue;
        };
        let label = |k: &str| {
            labels
                .split(',')
                .find_map(|l| l.strip_prefix(&format!("{k}=\"")))
                .map(|v| v.trim_end_matches('"').to_string())
                .unwrap_or_default()
        };
        let key = format!("{}/{}", label("decision"), label("reason"));
        *out.entry(key).or_default() += value.trim().parse::<f64>().unwrap_or(0.0);
    }
    out
}

fn karpenter_metrics_port() -> Option<u16> {
    let dir = std::env::var("DISRUPTION_GUARD_CLUSTER_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| support::repo_root().join(".cluster/default"));
    let ports = std::fs::read_to_string(dir.join("ports")).ok()?;
    ports
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("KARPENTER_METRICS_PORT=")?.parse().ok())
}

/// A burst: `legs` windows opened within 5 s over the pipelines (each held 60 s), then as many
/// bare PDBs (the floor) created within 5 s and deleted once settled. Returns the open → Ready
/// and the PDB latencies (ms), and the operator's protection writes from the burst's start
/// until its last leg was Ready.
async fn burst(
    client: &Client,
    op: &Operator,
    open: &OpenWindows,
    arm: Arm,
    pipelines: usize,
    legs: usize,
    round: usize,
) -> (Vec<f64>, Vec<f64>, f64) {
    let http = reqwest::Client::new();
    let spread = Duration::from_secs(5).as_secs_f64() / legs.max(1) as f64;
    let writes = || async { metric(&op.metrics().await, "disruption_guard_window_writes_total") };
    let writes_before = writes().await;
    let ready = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let writes_at_ready = async {
        while ready.load(std::sync::atomic::Ordering::Acquire) < legs {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        writes().await - writes_before
    };
    let opens = futures::future::join_all((0..legs).map(|leg| {
        let http = http.clone();
        let ns = namespace(arm, leg % pipelines);
        let open = open.clone();
        let ready = ready.clone();
        async move {
            tokio::time::sleep(Duration::from_secs_f64(spread * leg as f64)).await;
            let name = format!("leg-{round}-{leg}");
            let started = Instant::now();
            let resp = http
                .post(format!("{}/v1/namespaces/{ns}/windows?wait=true", op.api))
                .json(&json!({"name": name, "selector": format!("{LABEL}=true"), "ttl": "10m"}))
                .send()
                .await
                .unwrap();
            let ms = started.elapsed().as_secs_f64() * 1000.0;
            assert_eq!(resp.status(), 201, "{}", resp.text().await.unwrap());
            ready.fetch_add(1, std::sync::atomic::Ordering::Release);
            open_window(&open, &ns, 1);
            tokio::time::sleep(Duration::from_secs(60)).await;
            let _ = http
                .delete(format!(
                    "{}/v1/namespaces/{ns}/windows/{name}?wait=true",
                    op.api
                ))
                .send()
                .await;
            open_window(&open, &ns, -1);
            ms
        }
    }));
    let floor = async {
        // The floor starts once the windows are open: the same moment of the day.
        tokio::time::sleep(Duration::from_secs(10)).await;
        futures::future::join_all((0..legs).map(|leg| {
            let ns = floor_namespace(arm);
            let client = client.clone();
            async move {
                tokio::time::sleep(Duration::from_secs_f64(spread * leg as f64)).await;
                bare_pdb(&client, &ns, &format!("floor-{round}-{leg}")).await
            }
        }))
        .await
    };
    let (opens, floor, writes) = tokio::join!(opens, floor, writes_at_ready);
    (opens, floor, writes)
}

/// Creates a bare `minAvailable: 1` PDB over the floor's app in `ns`, times it until the
/// disruption controller reports it current, and deletes it.
async fn bare_pdb(client: &Client, ns: &str, name: &str) -> f64 {
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), ns);
    let mut p = pdb(&app_name(0), json!({"minAvailable": 1}));
    p.metadata.name = Some(name.to_string());
    let started = Instant::now();
    pdbs.create(&PostParams::default(), &p).await.unwrap();
    let ms = loop {
        let current = pdbs.get(name).await.ok().and_then(|p| {
            let s = p.status?;
            (s.observed_generation.is_some() && s.observed_generation == p.metadata.generation)
                .then_some(())
        });
        if current.is_some() {
            break started.elapsed().as_secs_f64() * 1000.0;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let _ = pdbs.delete(name, &DeleteParams::default()).await;
    ms
}

/// Everything an arm measured.
#[derive(Debug, Default)]
struct ArmResult {
    runs: Vec<TestRun>,
    nodes: Vec<NodeSample>,
    /// Seconds from the last test's end to the node count's last fall; `None`: it did not fall.
    last_to_consolidated: Option<f64>,
    /// After the settle: Karpenter's nodes, and the guard's annotations and PDBs still there.
    end_nodes: usize,
    end_traces: usize,
    decisions: BTreeMap<String, f64>,
    opens: Vec<f64>,
    floor: Vec<f64>,
    /// Per burst: the operator's protection writes per window until its last leg was Ready.
    burst_writes: Vec<f64>,
    /// The operator: CPU-seconds, peak RSS (MiB), API requests, windows opened.
    cost: Option<(f64, f64, f64, usize)>,
    /// The operator's `held_node_seconds_total` by reason.
    held_metric: BTreeMap<String, f64>,
}

fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 (11 and 12 after the command).
    (ticks(11) + ticks(12)) / 100.0
}

fn metric_sum(text: &str, prefix: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

/// Creates namespace `ns` with the bench's label (kept if it exists).
async fn create_namespace(namespaces: &Api<Namespace>, ns: &str) {
    let namespace = json!({"metadata": {"name": ns, "labels": {LABEL: "true"}}});
    let _ = namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(namespace).unwrap(),
        )
        .await;
}

async fn set_up(client: &Client, arm: Arm, pipelines: &[Pipeline]) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if arm.windows() {
        let ns = floor_namespace(arm);
        create_namespace(&namespaces, &ns).await;
        Api::<Deployment>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &floor_deployment())
            .await
            .unwrap();
    }
    for p in pipelines {
        let ns = namespace(arm, p.index);
        create_namespace(&namespaces, &ns).await;
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        let services: Api<Service> = Api::namespaced(client.clone(), &ns);
        let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns);
        let replicas = if arm == Arm::TwoReplicas { 2 } else { 1 };
        for i in 0..p.apps {
            let name = app_name(i);
            services
                .create(&PostParams::default(), &service(&name))
                .await
                .unwrap();
            deployments
                .create(&PostParams::default(), &deployment(&name, replicas))
                .await
                .unwrap();
            match arm {
                Arm::Pdb => drop(
                    pdbs.create(
                        &PostParams::default(),
                        &pdb(&name, json!({"minAvailable": 1})),
                    )
                    .await
                    .unwrap(),
                ),
                Arm::TwoReplicas => drop(
                    pdbs.create(
                        &PostParams::default(),
                        &pdb(&name, json!({"maxUnavailable": 1})),
                    )
                    .await
                    .unwrap(),
                ),
                _ => {}
            }
        }
    }
    for p in pipelines {
        let ns = namespace(arm, p.index);
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        for i in 0..p.apps {
            let name = app_name(i);
            wait::until(
                "the pipeline's first version to run",
                Duration::from_secs(600),
                || rollout_done(&deployments, &name),
            )
            .await;
        }
    }
}

async fn tear_down(client: &Client, arm: Arm, pipelines: &[Pipeline]) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let names = pipelines.iter().map(|p| namespace(arm, p.index));
    for ns in names.chain([floor_namespace(arm)]) {
        let _ = namespaces.delete(&ns, &DeleteParams::default()).await;
    }
    wait::until(
        "the arm's namespaces to go",
        Duration::from_secs(300),
        || async {
            namespaces
                .list(&ListParams::default().labels(&format!("{LABEL}=true")))
                .await
                .is_ok_and(|l| l.items.is_empty())
        },
    )
    .await;
    karpenter::until_no_nodes(client).await;
}

#[allow(clippy::too_many_arguments)]
async fn run_arm(
    client: &Client,
    seen: &Seen,
    op: Option<Arc<Operator>>,
    arm: Arm,
    pipelines: &[Pipeline],
    day: Duration,
    legs: usize,
) -> ArmResult {
    set_up(client, arm, pipelines).await;
    let open: OpenWindows = Arc::default();
    let decisions_before = karpenter_decisions().await;
    let before = match &op {
        Some(op) => Some((cpu_seconds(op.pid().unwrap()), op.metrics().await)),
        None => None,
    };
    let day_start = Instant::now();
    let stop = tokio_util::sync::CancellationToken::new();
    let sampler = tokio::spawn(sample_nodes(
        client.clone(),
        seen.clone(),
        open.clone(),
        arm,
        pipelines.len(),
        day_start,
        stop.clone(),
    ));
    let days = pipelines.iter().cloned().map(|p| {
        tokio::spawn(pipeline_day(
            client.clone(),
            seen.clone(),
            op.clone(),
            open.clone(),
            arm,
            p,
            day_start,
            day,
        ))
    });
    let days: Vec<_> = days.collect();
    let mut result = ArmResult::default();
    if let Some(op) = op.as_deref().filter(|_| arm.windows()) {
        for round in 1..=2 {
            let at = day.mul_f64(round as f64 / 3.0);
            tokio::time::sleep_until((day_start + at).into()).await;
            eprintln!(
                "ci-day [{}] burst {round}: {legs} windows within 5 s",
                arm.letter()
            );
            let (opens, floor, writes) =
                burst(client, op, &open, arm, pipelines.len(), legs, round).await;
            result.opens.extend(opens);
            result.floor.extend(floor);
            result.burst_writes.push(writes / legs.max(1) as f64);
        }
    }
    for day in days {
        result.runs.extend(day.await.unwrap());
    }
    // After the last test (the apps still deployed, idle): until the node count last fell,
    // once it has stayed put for SETTLED (at most 10 minutes).
    let settle = Instant::now();
    let mut count = karpenter::node_names(client).await.len();
    let mut changed = settle;
    let mut fell = None;
    while changed.elapsed() < SETTLED && settle.elapsed() < Duration::from_secs(600) {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let n = karpenter::node_names(client).await.len();
        if n != count {
            if n < count {
                fell = Some(settle.elapsed().as_secs_f64());
            }
            count = n;
            changed = Instant::now();
        }
    }
    result.last_to_consolidated = fell;
    result.end_nodes = count;
    result.end_traces = guard_traces(client, arm, pipelines).await;
    stop.cancel();
    result.nodes = sampler.await.unwrap();
    let decisions_after = karpenter_decisions().await;
    result.decisions = decisions_after
        .into_iter()
        .map(|(k, v)| {
            let was = decisions_before.get(&k).copied().unwrap_or(0.0);
            (k, v - was)
        })
        .filter(|(_, v)| *v > 0.0)
        .collect();
    if let (Some(op), Some((cpu_before, text_before))) = (&op, before) {
        let text = op.metrics().await;
        let requests = metric_sum(&text, "disruption_guard_kube_requests_total")
            - metric_sum(&text_before, "disruption_guard_kube_requests_total");
        let windows = result.runs.len() * usize::from(arm.windows()) + result.opens.len();
        let (_, peak) = op.rss_kib();
        result.cost = Some((
            cpu_seconds(op.pid().unwrap()) - cpu_before,
            peak as f64 / 1024.0,
            requests,
            windows,
        ));
        for reason in ["annotation", "pdb", "eviction"] {
            let held: f64 = pipelines
                .iter()
                .map(|p| {
                    let series = format!(
                        "disruption_guard_held_node_seconds_total{{workload_namespace=\"{}\",reason=\"{reason}\"}}",
                        namespace(arm, p.index)
                    );
                    metric(&text, &series)
                })
                .sum();
            result.held_metric.insert(reason.to_string(), held);
        }
    }
    tear_down(client, arm, pipelines).await;
    result
}

/// The guard's protection still on Karpenter's nodes and the arm's pods after the day: nodes and
/// pods with a `disruption-guard/…` field manager, and PDBs labelled as the guard's.
async fn guard_traces(client: &Client, arm: Arm, pipelines: &[Pipeline]) -> usize {
    let guarded = |meta: &kube::api::ObjectMeta| !guard_managers(meta).is_empty();
    let mut traces = 0;
    let nodes: Api<Node> = Api::all(client.clone());
    if let Ok(list) = nodes.list(&ListParams::default()).await {
        traces += list.items.iter().filter(|n| guarded(&n.metadata)).count();
    }
    for p in pipelines {
        let ns = namespace(arm, p.index);
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        if let Ok(list) = pods.list(&ListParams::default()).await {
            traces += list.items.iter().filter(|p| guarded(&p.metadata)).count();
        }
        traces += guard_pdbs(client, &ns).await.len();
    }
    traces
}

fn p50_p99(v: &[f64]) -> String {
    if v.is_empty() {
        return "-".to_string();
    }
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    format!("{:.0} / {:.0}", percentile(&v, 50.0), percentile(&v, 99.0))
}

fn report(arm: Arm, r: &ArmResult) -> serde_json::Value {
    let disrupted = r
        .runs
        .iter()
        .filter(|t| t.pod_gone || t.downtime > 0.0)
        .count();
    let downtime: f64 = r.runs.iter().map(|t| t.downtime).sum();
    let nm = node_minutes(&r.nodes, |s| s.nodes);
    let draining = node_minutes(&r.nodes, |s| s.draining);
    let blocked = node_minutes(&r.nodes, |s| s.blocked);
    let held_outside = node_minutes(&r.nodes, |s| s.held_by_windows) * 60.0;
    let peak = r.nodes.iter().map(|s| s.nodes).max().unwrap_or(0);
    eprintln!("ci-day [{}]", arm.title());
    eprintln!(
        "  test runs: {}, disrupted (a pod went or an app had no ready endpoint): {disrupted}, seconds without a ready endpoint: {downtime:.1}",
        r.runs.len()
    );
    eprintln!(
        "  node-minutes: {nm:.1} (peak {peak} nodes); draining: {draining:.1}; eligible but kept: {blocked:.1}"
    );
    eprintln!(
        "  from the last test's end to the node count's last fall: {:?} s",
        r.last_to_consolidated.map(|s| s.round())
    );
    eprintln!(
        "  at the end: {} nodes, {} of the guard's annotations and PDBs left",
        r.end_nodes, r.end_traces
    );
    eprintln!("  Karpenter's decisions: {:?}", r.decisions);
    if !r.opens.is_empty() {
        eprintln!(
            "  burst open → Ready p50/p99 (ms): {} (n={}); bare PDB floor: {} (n={})",
            p50_p99(&r.opens),
            r.opens.len(),
            p50_p99(&r.floor),
            r.floor.len()
        );
        eprintln!(
            "  protection writes per window, each burst until its last leg was Ready: {:?}",
            r.burst_writes
        );
    }
    if let Some((cpu, rss, requests, windows)) = r.cost {
        eprintln!(
            "  operator: {cpu:.1} CPU-s, peak RSS {rss:.1} MiB, {requests:.0} API requests ({:.1} per window, {windows} windows)",
            requests / windows.max(1) as f64
        );
        eprintln!(
            "  node-seconds held, by the operator's metric: {:?}; by windows, measured outside: {held_outside:.0}",
            r.held_metric
        );
    }
    json!({
        "arm": arm.letter(), "title": arm.title(), "test_runs": r.runs.len(), "disrupted_runs": disrupted,
        "downtime_seconds": downtime, "node_minutes": nm, "peak_nodes": peak,
        "draining_node_minutes": draining, "blocked_node_minutes": blocked,
        "last_test_to_consolidated_seconds": r.last_to_consolidated,
        "end_nodes": r.end_nodes, "end_guard_traces": r.end_traces, "karpenter_decisions": r.decisions,
        "burst_open_ready_ms": r.opens, "bare_pdb_floor_ms": r.floor,
        "burst_writes_per_window": r.burst_writes,
        "operator": r.cost.map(|(cpu, rss, requests, windows)| json!({"cpu_seconds": cpu, "peak_rss_mib": rss, "api_requests": requests, "windows": windows})),
        "held_node_seconds_metric": r.held_metric, "held_node_seconds_outside": held_outside,
    })
}

/// One row's cell of an arm, from its summary.
type Cell = Box<dyn Fn(&serde_json::Value) -> String>;

/// The arms side by side, as the Markdown table docs/benchmarks.md carries.
fn table(summary: &[serde_json::Value]) -> String {
    let num = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap_or(0.0);
    let base = summary
        .iter()
        .find(|v| v["arm"] == "a")
        .map(|v| num(v, "node_minutes"));
    let ms = |v: &serde_json::Value, k: &str| {
        let list: Vec<f64> = v[k]
            .as_array()
            .map(|a| a.iter().filter_map(|x| x.as_f64()).collect())
            .unwrap_or_default();
        p50_p99(&list)
    };
    let op = |v: &serde_json::Value, f: &dyn Fn(&serde_json::Value) -> String| {
        if v["operator"].is_null() {
            "-".to_string()
        } else {
            f(&v["operator"])
        }
    };
    let rows: Vec<(&str, Cell)> = vec![
        ("test runs", Box::new(|v| v["test_runs"].to_string())),
        (
            "test runs disrupted (a pod went or an app had no ready endpoint)",
            Box::new(|v| v["disrupted_runs"].to_string()),
        ),
        (
            "seconds without a ready endpoint",
            Box::new(move |v| format!("{:.1}", num(v, "downtime_seconds"))),
        ),
        (
            "node-minutes (× arm a)",
            Box::new(move |v| match base {
                Some(b) if b > 0.0 => format!(
                    "{:.1} ({:.2})",
                    num(v, "node_minutes"),
                    num(v, "node_minutes") / b
                ),
                _ => format!("{:.1}", num(v, "node_minutes")),
            }),
        ),
        ("peak nodes", Box::new(|v| v["peak_nodes"].to_string())),
        (
            "node-minutes draining / eligible but kept",
            Box::new(move |v| {
                format!(
                    "{:.1} / {:.1}",
                    num(v, "draining_node_minutes"),
                    num(v, "blocked_node_minutes")
                )
            }),
        ),
        (
            "last test's end → the node count's last fall (s)",
            Box::new(|v| match v["last_test_to_consolidated_seconds"].as_f64() {
                Some(s) => format!("{s:.0}"),
                None => "none in 3 min".to_string(),
            }),
        ),
        (
            "then: nodes left / the guard's annotations and PDBs left",
            Box::new(|v| format!("{} / {}", v["end_nodes"], v["end_guard_traces"])),
        ),
        (
            "Karpenter's decisions",
            Box::new(|v| {
                v["karpenter_decisions"]
                    .as_object()
                    .map(|m| {
                        m.iter()
                            .map(|(k, n)| format!("{k} {}", n.as_f64().unwrap_or(0.0)))
                            .collect::<Vec<_>>()
                            .join(", ")
                    })
                    .unwrap_or_default()
            }),
        ),
        (
            "burst open → Ready p50 / p99 (ms)",
            Box::new(move |v| ms(v, "burst_open_ready_ms")),
        ),
        (
            "bare PDB floor p50 / p99 (ms)",
            Box::new(move |v| ms(v, "bare_pdb_floor_ms")),
        ),
        (
            "operator CPU-seconds / peak RSS (MiB)",
            Box::new(move |v| {
                op(v, &|o| {
                    format!(
                        "{:.1} / {:.1}",
                        num(o, "cpu_seconds"),
                        num(o, "peak_rss_mib")
                    )
                })
            }),
        ),
        (
            "operator API requests per window",
            Box::new(move |v| {
                op(v, &|o| {
                    let (requests, windows) = (num(o, "api_requests"), num(o, "windows"));
                    if windows > 0.0 {
                        format!("{:.1}", requests / windows)
                    } else {
                        format!("- ({requests:.0} requests, no window)")
                    }
                })
            }),
        ),
        (
            "node-seconds held by windows: metric / outside; by held evictions",
            Box::new(move |v| {
                op(v, &|_| {
                    let held = &v["held_node_seconds_metric"];
                    format!(
                        "{:.0} / {:.0}; {:.0}",
                        num(held, "annotation") + num(held, "pdb"),
                        num(v, "held_node_seconds_outside"),
                        num(held, "eviction")
                    )
                })
            }),
        ),
    ];
    let mut out = String::from("| |");
    for v in summary {
        out.push_str(&format!(" {} |", v["title"].as_str().unwrap_or("?")));
    }
    out.push_str("\n|---|");
    out.push_str(&"---:|".repeat(summary.len()));
    out.push('\n');
    for (name, cell) in &rows {
        out.push_str(&format!("| {name} |"));
        for v in summary {
            out.push_str(&format!(" {} |", cell(v)));
        }
        out.push('\n');
    }
    out
}

fn write_csvs(out: &std::path::Path, results: &[(Arm, ArmResult)]) {
    std::fs::create_dir_all(out).unwrap();
    let mut nodes = String::from("arm,seconds,nodes,draining,blocked\n");
    let mut runs = String::from("arm,pipeline,seconds,length,downtime,pod_gone\n");
    for (arm, r) in results {
        for s in &r.nodes {
            nodes.push_str(&format!(
                "{},{:.1},{},{},{}\n",
                arm.letter(),
                s.at,
                s.nodes,
                s.draining,
                s.blocked
            ));
        }
        for t in &r.runs {
            runs.push_str(&format!(
                "{},{},{:.1},{:.0},{:.1},{}\n",
                arm.letter(),
                t.pipeline,
                t.at,
                t.seconds,
                t.downtime,
                t.pod_gone
            ));
        }
    }
    std::fs::write(out.join("nodes.csv"), nodes).unwrap();
    std::fs::write(out.join("runs.csv"), runs).unwrap();
}

#[tokio::test]
#[ignore = "the CI-day benchmark: tests/bench/ci-day"]
async fn a_day_of_ci_under_karpenter() {
    karpenter::require();
    let seed: u64 = env_or("CI_DAY_SEED", 1);
    let minutes: f64 = env_or("CI_DAY_MINUTES", 30.0);
    let count: usize = env_or("CI_DAY_PIPELINES", 40);
    let legs: usize = env_or("CI_DAY_BURST", 150);
    let arms: Vec<Arm> = std::env::var("CI_DAY_ARMS")
        .unwrap_or_else(|_| "a,b,c,d,e".to_string())
        .split(',')
        .map(Arm::parse)
        .collect();
    let out = std::env::var("CI_DAY_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|_| support::repo_root().join("target/ci-day"));
    let day = Duration::from_secs_f64(minutes * 60.0);
    let pipelines = schedule(seed, count, day);
    eprintln!(
        "ci-day: seed {seed}, {count} pipelines ({} Deployments), a {minutes}-minute day, bursts of {legs}, arms {:?}",
        pipelines.iter().map(|p| p.apps).sum::<usize>(),
        arms.iter().map(|a| a.letter()).collect::<Vec<_>>()
    );
    let client = support::client().await;
    karpenter::until_no_nodes(&client).await;
    let seen = Seen::start(&client).await;
    let (tx, rx) = tokio::sync::oneshot::channel();
    with_namespace(move |client, op_ns| async move {
        let mut results = Vec::new();
        let mut summary = Vec::new();
        let waits = format!("--max-waits-per-identity={}", 2 * legs + count);
        for arm in arms {
            let op = match arm {
                // A burst's legs are separate CI jobs, each its own identity in a real
                // cluster; here every client is the one anonymous identity, so its cap on
                // waits in progress is raised to the legs of a burst and the day's runs.
                Arm::Guard | Arm::InterceptOnly => Some(Arc::new(
                    Operator::intercepting_in(&op_ns, None, &[&waits]).await,
                )),
                _ => None,
            };
            let started = Instant::now();
            let result = run_arm(&client, &seen, op.clone(), arm, &pipelines, day, legs).await;
            summary.push(report(arm, &result));
            eprintln!(
                "ci-day [{}] took {:.0} s",
                arm.letter(),
                started.elapsed().as_secs_f64()
            );
            drop(op);
            results.push((arm, result));
        }
        write_csvs(&out, &results);
        std::fs::write(
            out.join("summary.json"),
            serde_json::to_string_pretty(&summary).unwrap(),
        )
        .unwrap();
        let table = table(&summary);
        std::fs::write(out.join("table.md"), &table).unwrap();
        eprintln!("{table}");
        eprintln!("ci-day: figures in {}", out.display());
        let _ = tx.send(results.len());
    })
    .await;
    assert!(rx.await.unwrap() > 0);
}
