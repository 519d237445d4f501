//! Helpers of the drain watcher's integration tests (`tests/drain.rs`): lone-replica
//! Deployments under blocking PDBs, a readiness sampler, `kubectl drain`, Events, metrics and
//! taints.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use super::fixtures::{DeploymentBuilder, deployment, pdb_max_unavailable_zero};
use super::pods::{is_ready, ready_pods};
use super::{TEST_NAMESPACE_LABEL, kubectl, wait};

const LIMIT: Duration = Duration::from_secs(60);

/// A one-replica Deployment whose pods may run on any private node of the test.
pub fn lone(ns: &str, app: &str) -> DeploymentBuilder {
    deployment(app).node_selector(TEST_NAMESPACE_LABEL, ns)
}

pub fn node_of(pod: &Pod) -> Option<String> {
    pod.spec.as_ref()?.node_name.clone()
}

/// Creates `app` and waits until its one pod is Ready on `node`; returns the pod.
pub async fn deploy_on(client: &Client, ns: &str, app: DeploymentBuilder, node: &str) -> Pod {
    let d = app.build();
    let name = d.metadata.name.clone().unwrap();
    Api::<Deployment>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &d)
        .await
        .unwrap();
    wait::for_some("the pod to be Ready on its node", LIMIT, || async {
        let ready = ready_pods(client, ns, &name).await;
        (ready.len() == 1 && node_of(&ready[0]).as_deref() == Some(node)).then(|| ready[0].clone())
    })
    .await
}

/// Creates `app` and its `maxUnavailable: 0` PDB, and waits until its one pod is Ready on
/// `node` and the PDB allows no disruption; returns the app's name.
pub async fn deploy_lone(client: &Client, ns: &str, app: DeploymentBuilder, node: &str) -> String {
    let pod = deploy_on(client, ns, app, node).await;
    let name = pod.metadata.labels.as_ref().unwrap()["app"].clone();
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), ns);
    pdbs.create(
        &PostParams::default(),
        &pdb_max_unavailable_zero(&name, &name),
    )
    .await
    .unwrap();
    wait::until("the PDB to allow no disruption", LIMIT, || async {
        let Ok(pdb) = pdbs.get(&name).await else {
            return false;
        };
        pdb.status.is_some_and(|s| {
            s.observed_generation == pdb.metadata.generation
                && s.current_healthy == 1
                && s.disruptions_allowed == 0
        })
    })
    .await;
    name
}

/// Waits until `app` has a ready pod on a node other than `node`: its replacement started
/// elsewhere.
pub async fn until_ready_elsewhere(
    client: &Client,
    ns: &str,
    app: &str,
    node: &str,
    limit: Duration,
) {
    wait::until(
        &format!("a ready pod of {app} on another node"),
        limit,
        || async {
            ready_pods(client, ns, app)
                .await
                .iter()
                .any(|p| node_of(p).is_some_and(|n| n != node))
        },
    )
    .await;
}

/// Samples every 100 ms how many Ready pods each app has, until stopped.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Samples>,
}

#[derive(Debug, Default)]
pub struct Samples {
    /// Sampling rounds.
    pub rounds: usize,
    /// (app, rounds in which it had no Ready pod).
    pub without_ready_pod: Vec<(String, usize)>,
}

impl Samples {
    pub fn downtime_samples(&self) -> usize {
        self.without_ready_pod.iter().map(|(_, n)| n).sum()
    }
}

impl Sampler {
    pub fn start(client: &Client, ns: &str, apps: &[&str]) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let (client, ns) = (client.clone(), ns.to_string());
        let apps: Vec<String> = apps.iter().map(|a| a.to_string()).collect();
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let pods: Api<Pod> = Api::namespaced(client, &ns);
            let mut samples = Samples {
                without_ready_pod: apps.iter().map(|a| (a.clone(), 0)).collect(),
                ..Samples::default()
            };
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            while !flag.load(Ordering::SeqCst) {
                tick.tick().await;
                let list = pods
                    .list(&ListParams::default())
                    .await
                    .expect("listing pods");
                samples.rounds += 1;
                for (app, down) in samples.without_ready_pod.iter_mut() {
                    let ready = list.items.iter().any(|p| {
                        is_ready(p)
                            && p.metadata.labels.as_ref().and_then(|l| l.get("app")) == Some(app)
                    });
                    if !ready {
                        *down += 1;
                    }
                }
            }
            samples
        });
        Sampler { stop, task }
    }

    pub async fn finish(self) -> Samples {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.unwrap()
    }
}

/// Runs `kubectl drain` the way an operator would, returning (success, seconds, stderr).
pub async fn drain(node: &str, timeout: &str) -> (bool, f64, String) {
    let node = node.to_string();
    let timeout = format!("--timeout={timeout}");
    tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        let out = kubectl()
            .args([
                "drain",
                &node,
                "--ignore-daemonsets",
                "--delete-emptydir-data",
                &timeout,
            ])
            .output()
            .unwrap();
        (
            out.status.success(),
            started.elapsed().as_secs_f64(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    })
    .await
    .unwrap()
}

pub async fn events_about(client: &Client, ns: &str, name: &str) -> Vec<Event> {
    Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .collect()
}

/// Waits until `name` in `ns` has an Event with `reason`, of `type_` when given, whose note
/// contains `note_has` ("" for any note).
pub async fn until_event(
    client: &Client,
    ns: &str,
    name: &str,
    type_: Option<&str>,
    reason: &str,
    note_has: &str,
) {
    let what = format!(
        "a {} Event {reason} on {name}",
        type_.unwrap_or("Normal or Warning")
    );
    wait::until(&what, LIMIT, || async {
        events_about(client, ns, name).await.iter().any(|e| {
            e.reason.as_deref() == Some(reason)
                && type_.is_none_or(|t| e.type_.as_deref() == Some(t))
                && e.note.as_deref().unwrap_or_default().contains(note_has)
        })
    })
    .await;
}

/// The value of one sample line of the operator's metrics, 0 when absent.
pub fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

pub fn uid(node: &Node) -> String {
    node.metadata.uid.clone().unwrap()
}

/// Cordons `node` (a disruption signal by itself, as `kubectl drain` starts with it).
pub fn cordon(node: &str) {
    let out = kubectl().args(["cordon", node]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

pub async fn generation(client: &Client, ns: &str, app: &str) -> Option<i64> {
    Api::<Deployment>::namespaced(client.clone(), ns)
        .get(app)
        .await
        .unwrap()
        .metadata
        .generation
}

/// The merge patch that sets or removes the `karpenter.sh/disrupted` taint, keeping others.
pub async fn disrupted_taint_patch(nodes: &Api<Node>, name: &str, on: bool) -> serde_json::Value {
    let node = nodes.get(name).await.unwrap();
    let mut taints: Vec<serde_json::Value> = node
        .spec
        .and_then(|s| s.taints)
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t.key != "karpenter.sh/disrupted")
        .map(|t| serde_json::to_value(t).unwrap())
        .collect();
    if on {
        taints.push(json!({"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}));
    }
    json!({"spec": {"taints": taints}})
}

pub async fn set_disrupted_taint(nodes: &Api<Node>, name: &str, on: bool) {
    let patch = disrupted_taint_patch(nodes, name, on).await;
    nodes
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
}

/// Disrupts the node hosting lone Deployment `app` `n` times (the `karpenter.sh/disrupted`
/// taint, alternating between the two `nodes`) and returns, in milliseconds from just before
/// each taint PATCH, when a bare watch saw the taint (the floor) and when a bare watch saw the
/// operator's rollout patch. Each round waits for the pod to move, the rollout to complete and
/// the PDB to block again, so every round measures the steady path.
pub async fn signal_to_rollout(
    client: &Client,
    ns: &str,
    names: &[String; 2],
    app: &str,
    n: usize,
) -> (Vec<f64>, Vec<f64>) {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};

    let nodes: Api<Node> = Api::all(client.clone());
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), ns);
    // (instant, node name, tainted) and (instant, generation), from bare watches.
    let (node_tx, mut node_rx) = tokio::sync::mpsc::unbounded_channel();
    let node_watch = watcher(
        nodes.clone(),
        watcher::Config::default().labels(&format!("{TEST_NAMESPACE_LABEL}={ns}")),
    )
    .default_backoff()
    .applied_objects();
    let node_task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(node_watch);
        while let Some(event) = stream.next().await {
            let Ok(node) = event else { continue };
            let tainted = node
                .spec
                .and_then(|s| s.taints)
                .unwrap_or_default()
                .iter()
                .any(|t| t.key == "karpenter.sh/disrupted");
            let _ = node_tx.send((Instant::now(), node.metadata.name.unwrap(), tainted));
        }
    });
    let (dep_tx, mut dep_rx) = tokio::sync::mpsc::unbounded_channel();
    let dep_watch = watcher(
        deployments.clone(),
        watcher::Config::default().fields(&format!("metadata.name={app}")),
    )
    .default_backoff()
    .applied_objects();
    let dep_task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(dep_watch);
        while let Some(event) = stream.next().await {
            let Ok(d) = event else { continue };
            let _ = dep_tx.send((Instant::now(), d.metadata.generation.unwrap_or(0)));
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;

    let (mut floor, mut rollout) = (Vec::new(), Vec::new());
    let mut expected_generation = generation(client, ns, app).await.unwrap();
    // Start from the node the pod runs on now (an earlier call may have left it on either).
    let on_second = ready_pods(client, ns, app)
        .await
        .first()
        .and_then(node_of)
        .is_some_and(|n| n == names[1]);
    for i in usize::from(on_second)..n + usize::from(on_second) {
        let (from, to) = (&names[i % 2], &names[(i + 1) % 2]);
        while node_rx.try_recv().is_ok() {}
        while dep_rx.try_recv().is_ok() {}
        expected_generation += 1;
        let patch = disrupted_taint_patch(&nodes, from, true).await;
        let started = Instant::now();
        nodes
            .patch(from, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .unwrap();
        let seen = loop {
            let (at, name, tainted) = node_rx.recv().await.unwrap();
            if &name == from && tainted {
                break at;
            }
        };
        let patched = loop {
            let (at, generation) = tokio::time::timeout(LIMIT, dep_rx.recv())
                .await
                .expect("the rollout within the limit")
                .unwrap();
            if generation >= expected_generation {
                break at;
            }
        };
        floor.push((seen - started).as_secs_f64() * 1000.0);
        rollout.push((patched - started).as_secs_f64() * 1000.0);
        // On a time-out, say where each pod is: a new pod bound to its node but never started
        // means the simulated kubelets (kwok) fell behind, not the operator.
        let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
        let mine = ListParams::default().labels(&format!("app={app}"));
        wait::until_ok(&format!("the pod to move to {to}"), LIMIT, || async {
            let all = pods.list(&mine).await.unwrap().items;
            if all.len() == 1 && is_ready(&all[0]) && node_of(&all[0]).as_deref() == Some(to) {
                return Ok(());
            }
            let each = all.iter().map(|p| {
                let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
                format!(
                    "{} on {} ({}, {})",
                    p.metadata.name.as_deref().unwrap_or_default(),
                    node_of(p).as_deref().unwrap_or("no node"),
                    phase.unwrap_or("no phase"),
                    if is_ready(p) { "Ready" } else { "not Ready" },
                )
            });
            Err(format!("the pods: {}", each.collect::<Vec<_>>().join(", ")))
        })
        .await;
        set_disrupted_taint(&nodes, from, false).await;
        // Measure the steady path: the next disruption finds no rollout in progress.
        wait::until("the rollout to complete", LIMIT, || async {
            let d = deployments.get(app).await.unwrap();
            let s = d.status.unwrap_or_default();
            s.observed_generation == d.metadata.generation
                && s.replicas == Some(1)
                && s.updated_replicas == Some(1)
                && s.available_replicas == Some(1)
        })
        .await;
        wait::until("the PDB to block again", LIMIT, || async {
            let pdb = pdbs.get(app).await.unwrap();
            pdb.status.is_some_and(|s| {
                s.observed_generation == pdb.metadata.generation
                    && s.current_healthy == 1
                    && s.disruptions_allowed == 0
            })
        })
        .await;
    }
    node_task.abort();
    dep_task.abort();
    (floor, rollout)
}
