//! The users' story end to end with the real Karpenter: a rollout provisions a fresh node,
//! tests start, consolidation drains that node and the lone pod dies — unless
//! `disruption-guard run` holds a test window around the tests.
//!
//! Run twice in one test (sequentially: Karpenter is cluster-wide) — without the guard, then
//! with it — and print, per run, the seconds each Deployment had no ready endpoint, the pods
//! disrupted and the Karpenter node count over time. Needs `tests/cluster/up --with-karpenter`.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use disruption_guard::resources::TestWindow;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use support::drain::metric;
use support::operator::Operator;
use support::{karpenter, wait, with_namespace};

const APPS: [&str; 2] = ["cart", "checkout"];
/// Long enough for several Karpenter disruption cycles (10 s poll + 15 s validation each).
const TEST_PERIOD: Duration = Duration::from_secs(75);
const SAMPLE_EVERY: Duration = Duration::from_millis(100);

#[derive(Debug, Default)]
struct RunFigures {
    /// Seconds with no ready endpoint, per Deployment.
    downtime: BTreeMap<String, f64>,
    /// Pods of the Deployments that went away during the test period.
    pods_disrupted: usize,
    /// (seconds since the period started, Karpenter nodes).
    nodes_over_time: Vec<(u64, usize)>,
    /// Guarded runs: how long after the window closed Karpenter consolidated again (a node of
    /// the window's time removed, and no more nodes than the unguarded run ended with).
    consolidated_after_close: Option<Duration>,
    /// Node-seconds during the test period in which a node Karpenter could disrupt
    /// (`karpenter::candidates`) hosted a live pod of the Deployments, measured from outside.
    held_outside: f64,
    /// Guarded runs: the node-seconds held, as the window's report says after it closed.
    held_reported: Option<u64>,
    /// Guarded runs: `disruption_guard_held_node_seconds_total` of the namespace after the close.
    held_metric: Option<f64>,
}

/// Nodes among `candidates` that host a live pod labelled `story=true`.
async fn held_nodes(pods: &Api<Pod>, candidates: &BTreeSet<String>) -> usize {
    let Ok(list) = pods.list(&ListParams::default().labels("story=true")).await else {
        return 0;
    };
    let hosts: BTreeSet<String> = list
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .filter_map(|p| p.spec?.node_name)
        .collect();
    hosts.intersection(candidates).count()
}

fn app(name: &str, tag: &str) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                // Containers take 3 s to become Ready (kwok's pod-ready delay), as real ones do.
                "metadata": {"labels": {"app": name, "story": "true"},
                             "annotations": {"pod-ready.stage.kwok.x-k8s.io/delay": "3s"}},
                "spec": {
                    "nodeSelector": {"karpenter.sh/nodepool": "default", "karpenter.kwok.sh/instance-family": "c"},
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "app", "image": format!("registry.invalid/{name}:{tag}"),
                                    "resources": {"requests": {"cpu": "1500m", "memory": "512Mi"}}}]
                }
            }
        }
    }))
    .unwrap()
}

fn service(name: &str) -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"selector": {"app": name}, "ports": [{"port": 80}]}
    }))
    .unwrap()
}

async fn ready_endpoints(slices: &Api<EndpointSlice>, app: &str) -> usize {
    let Ok(list) = slices
        .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={app}")))
        .await
    else {
        return 0;
    };
    list.items
        .iter()
        .flat_map(|s| s.endpoints.iter())
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(false))
        .count()
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

/// Deploys, rolls out, then samples for the test period; `guard` opens a window around it.
async fn run_story(
    client: Client,
    ns: String,
    guard: Option<&Operator>,
    target_nodes: usize,
) -> RunFigures {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    for name in APPS {
        services
            .create(&PostParams::default(), &service(name))
            .await
            .unwrap();
        deployments
            .create(&PostParams::default(), &app(name, "v1"))
            .await
            .unwrap();
    }
    for name in APPS {
        wait::until("the first version to run", Duration::from_secs(120), || {
            rollout_done(&deployments, name)
        })
        .await;
    }
    // 2. The rollout: the surge pod does not fit beside the others, Karpenter adds a node.
    let before = karpenter::node_names(&client).await.len();
    let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "registry.invalid/cart:v2"}]}}}});
    deployments
        .patch("cart", &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .unwrap();
    wait::until("the rollout to finish", Duration::from_secs(120), || {
        rollout_done(&deployments, "cart")
    })
    .await;
    eprintln!(
        "story: Karpenter nodes before the rollout {before}, after {}",
        karpenter::node_names(&client).await.len()
    );

    // 3./4. The tests start; when guarded, `disruption-guard run` starts them only once the
    // window's protection is in effect (the marker file is the first thing they do).
    let marker =
        std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("story-{ns}.started"));
    let mut runner = guard.map(|op| {
        let script = format!(
            "touch {} && sleep {}",
            marker.display(),
            TEST_PERIOD.as_secs()
        );
        tokio::process::Command::new(support::operator::binary())
            .args([
                "run",
                "--server",
                &op.api,
                "-n",
                &ns,
                "-l",
                "story=true",
                "--ttl",
                "10m",
                "--reason",
                "story",
            ])
            .args(["--", "sh", "-c", &script])
            .kill_on_drop(true)
            .spawn()
            .expect("disruption-guard run")
    });
    if runner.is_some() {
        wait::until(
            "disruption-guard run to start the tests",
            Duration::from_secs(60),
            || async { marker.exists() },
        )
        .await;
    }
    let seen_before: BTreeSet<String> = pods
        .list(&ListParams::default().labels("story=true"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    let mut figures = RunFigures::default();
    let mut seen = seen_before.clone();
    let started = Instant::now();
    let mut last_node_sample = None::<Instant>;
    let mut last_held = (Instant::now(), 0usize);
    while started.elapsed() < TEST_PERIOD {
        // Each held sample stands until the next one.
        let candidates = karpenter::candidates(&client).await;
        let held = held_nodes(&pods, &candidates).await;
        figures.held_outside += last_held.1 as f64 * last_held.0.elapsed().as_secs_f64();
        last_held = (Instant::now(), held);
        for name in APPS {
            if ready_endpoints(&slices, name).await == 0 {
                *figures.downtime.entry(name.to_string()).or_default() +=
                    SAMPLE_EVERY.as_secs_f64();
            } else {
                figures.downtime.entry(name.to_string()).or_default();
            }
        }
        if last_node_sample.is_none_or(|t| t.elapsed() >= Duration::from_secs(5)) {
            last_node_sample = Some(Instant::now());
            figures.nodes_over_time.push((
                started.elapsed().as_secs(),
                karpenter::node_names(&client).await.len(),
            ));
            if let Ok(list) = pods.list(&ListParams::default().labels("story=true")).await {
                seen.extend(list.items.into_iter().filter_map(|p| p.metadata.name));
            }
        }
        tokio::time::sleep(SAMPLE_EVERY).await;
    }
    figures.held_outside += last_held.1 as f64 * last_held.0.elapsed().as_secs_f64();
    // Every pod that ever ran beyond the one per Deployment at the start was a replacement.
    figures.pods_disrupted = seen.len() - seen_before.len();
    if let Some(mut runner) = runner.take() {
        let status = runner.wait().await.unwrap();
        assert!(
            status.success(),
            "disruption-guard run exits with sleep's code 0"
        );
        let closed = Instant::now();
        let windows: Api<TestWindow> = Api::namespaced(client.clone(), &ns);
        let window = windows.list(&ListParams::default()).await.unwrap().items;
        assert_eq!(window.len(), 1, "disruption-guard run opened one window");
        let report = window[0].status.as_ref().map(|s| s.report.clone());
        figures.held_reported = report.map(|r| r.held_node_seconds.total());
        if let Some(op) = guard {
            let text = op.metrics().await;
            let held = ["annotation", "pdb"].map(|reason| {
                let series = format!(
                    "disruption_guard_held_node_seconds_total{{workload_namespace=\"{ns}\",reason=\"{reason}\"}}"
                );
                metric(&text, &series)
            });
            figures.held_metric = Some(held.iter().sum());
        }
        let at_close = karpenter::node_names(&client).await;
        wait::until(
            "Karpenter to consolidate again after the window",
            Duration::from_secs(240),
            || async {
                let now = karpenter::node_names(&client).await;
                now.len() <= target_nodes && !at_close.is_subset(&now)
            },
        )
        .await;
        figures.consolidated_after_close = Some(closed.elapsed());
    }
    figures
}

/// Node-minutes the Karpenter nodes were up during the test period (each node sample held
/// until the next one).
fn node_minutes(f: &RunFigures) -> f64 {
    let end = TEST_PERIOD.as_secs();
    f.nodes_over_time
        .iter()
        .enumerate()
        .map(|(i, (t, n))| {
            let next = f.nodes_over_time.get(i + 1).map_or(end, |(t, _)| *t);
            (*n as f64) * next.saturating_sub(*t) as f64 / 60.0
        })
        .sum()
}

fn print(label: &str, f: &RunFigures) {
    eprintln!(
        "story [{label}] seconds without a ready endpoint: {:?}",
        f.downtime
    );
    eprintln!("story [{label}] pods disrupted: {}", f.pods_disrupted);
    eprintln!(
        "story [{label}] Karpenter nodes over time (s, nodes): {:?}",
        f.nodes_over_time
    );
    eprintln!(
        "story [{label}] node-minutes during the {}s test period: {:.2}",
        TEST_PERIOD.as_secs(),
        node_minutes(f)
    );
    if let Some(after) = f.consolidated_after_close {
        eprintln!("story [{label}] Karpenter consolidated again {after:?} after the window closed");
    }
    eprintln!(
        "story [{label}] node-seconds a node Karpenter could disrupt hosted the pods (outside): {:.1}",
        f.held_outside
    );
    if let Some(reported) = f.held_reported {
        eprintln!(
            "story [{label}] node-seconds held, by the window's report: {reported}, by the metric: {:?}",
            f.held_metric
        );
    }
}

async fn story(guarded: bool, target_nodes: usize) -> RunFigures {
    let client = support::client().await;
    karpenter::until_no_nodes(&client).await;
    let (tx, rx) = tokio::sync::oneshot::channel();
    with_namespace(move |client, ns| async move {
        let op = if guarded {
            Some(Operator::start(&ns, &[]).await)
        } else {
            None
        };
        let figures = run_story(client, ns, op.as_ref(), target_nodes).await;
        let _ = tx.send(figures);
    })
    .await;
    rx.await.expect("the story run reports its figures")
}

#[tokio::test]
async fn karpenter_consolidation_kills_lone_pods_mid_test_unless_a_window_protects_them() {
    karpenter::require();

    let without = story(false, 0).await;
    print("without the guard", &without);
    let lost: f64 = without.downtime.values().sum();
    assert!(
        lost > 0.0 && without.pods_disrupted > 0,
        "the control run must reproduce the problem (Karpenter consolidating mid-test), else the guarded run proves nothing"
    );

    let target = without.nodes_over_time.last().map_or(1, |(_, n)| *n);
    let with = story(true, target).await;
    print("with the guard", &with);
    assert_eq!(
        with.pods_disrupted, 0,
        "no pod of the window's selection was disrupted"
    );
    assert!(
        with.downtime.values().all(|s| *s == 0.0),
        "every Deployment kept a ready endpoint: {:?}",
        with.downtime
    );
    // What protection cost, as the product reports it, agrees with the outside measure: the
    // window's holds run from its open to its close, the outside samples from the tests' start
    // to the end of the test period, a second or two apart at each end, per node.
    let reported = with.held_reported.expect("the window's report") as f64;
    assert!(
        with.held_outside > 0.0,
        "Karpenter found a protected node it could disrupt during the tests"
    );
    let slack = 5.0 + 0.1 * with.held_outside;
    assert!(
        (reported - with.held_outside).abs() <= slack,
        "the report's {reported} node-seconds held agree with the {:.1} measured outside (±{slack:.1})",
        with.held_outside
    );
    assert_eq!(
        with.held_metric,
        Some(reported),
        "the metric counts what the report says"
    );
}
