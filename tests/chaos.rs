//! Chaos: CI-like traffic against two operator replicas while faults hit them, the API server
//! and etcd; after every round, with every window ended, nothing of the guard may be left and
//! the release may not come late.
//!
//! Seeded and reproducible: the seed is printed, and `CHAOS_SEED=<seed>` replays the same
//! schedule of windows, actions and faults. `CHAOS_ROUNDS` sets the number of rounds (the
//! suite runs one round per fault kind; the long run is documented in docs/benchmarks.md).
//!
//! Each round opens overlapping windows over three lone Deployments through the HTTP API of
//! either replica (some with `?wait=true`, every one with an idempotency key, retried as the
//! CLI retries), renews some, rolls Deployments out, and ends every window — closed through
//! the API, deleted with `kubectl delete tw`, or left to expire — while one fault strikes:
//! - SIGKILL or SIGTERM of a replica, or SIGKILL of the leader, started again a moment later;
//! - the kube-apiserver killed and started again;
//! - the replicas cut off from the API server by a proxy that stalls, or resets connections;
//! - etcd paused.
//!
//! After the last window of a round ended, the test waits until no PDB is left in the
//! namespace, no guard annotation or field manager on the pods and the node, and no window
//! waits on its finalizer. How late that came after the last end, and after the fault healed,
//! is measured; every answer of the HTTP API is counted by status.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use disruption_guard::resources::TestWindow;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use support::faults::Cluster;
use support::fixtures::deployment;
use support::operator::Operator;
use support::proxy::Proxy;
use support::windows::{DND, SAFE_TO_EVICT, SCALE_DOWN_DISABLED, annotation, guard_managers};
use support::{create_ready_node, with_namespace};
use tokio::sync::Mutex;

const APPS: [&str; 3] = ["a", "b", "c"];
/// How long after the later of the last window's end and the fault's healing every trace must
/// be gone.
const RELEASE_BOUND: Duration = Duration::from_secs(60);
/// A call to the HTTP API that takes longer than this hangs (the CLI's own timeout).
const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a CI client keeps retrying one call (the CLI's `--retry-for`).
const RETRY_FOR: Duration = Duration::from_secs(120);

/// `path` asking the API to answer only once the change is in effect when `wait`, and how long
/// the call may take: the wait's 120 s and a margin, else the client's timeout.
fn waiting(path: String, wait: bool) -> (String, Duration) {
    if wait {
        (
            format!("{path}?wait=true&timeout=120s"),
            Duration::from_secs(130),
        )
    } else {
        (path, CLIENT_TIMEOUT)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    KillReplica,
    TermReplica,
    KillLeader,
    RestartApiServer,
    StallConnections,
    ResetConnections,
    PauseEtcd,
}

const FAULTS: [Fault; 7] = [
    Fault::KillReplica,
    Fault::TermReplica,
    Fault::KillLeader,
    Fault::RestartApiServer,
    Fault::StallConnections,
    Fault::ResetConnections,
    Fault::PauseEtcd,
];

#[derive(Clone, Copy, Debug, PartialEq)]
enum Ending {
    CloseThroughApi,
    KubectlDelete,
    Expire,
}

struct Opened {
    name: String,
    ending: Ending,
    /// When it ended: the close or delete answered, or its expiry.
    ended: Option<SystemTime>,
}

/// What a round measured.
struct RoundFigures {
    fault: Fault,
    /// From the last window's end to no trace left.
    after_end: Duration,
    /// From the fault's healing to no trace left, when the fault healed after the last end and
    /// before everything was released (else the release did not wait for it).
    after_heal: Option<Duration>,
    /// Whether the last window to end expired (else it was closed or deleted).
    last_expired: bool,
}

/// The HTTP API of the replicas, called as a CI client calls it: any replica, retried on
/// 429, 502, 503, 504 and connection errors for [`RETRY_FOR`]. Every answer is counted.
#[derive(Clone)]
struct Ci {
    urls: Vec<String>,
    http: reqwest::Client,
    answers: Arc<std::sync::Mutex<BTreeMap<String, usize>>>,
}

impl Ci {
    fn count(&self, what: String) {
        *self.answers.lock().unwrap().entry(what).or_default() += 1;
    }

    /// Sends the request built by `req` until an answer that is not worth a retry; returns
    /// its status and body.
    async fn call(
        &self,
        rng_seed: u64,
        req: impl Fn(&reqwest::Client, &str) -> reqwest::RequestBuilder,
        timeout: Duration,
    ) -> (u16, Value) {
        let started = Instant::now();
        let mut attempt = rng_seed as usize;
        loop {
            let url = &self.urls[attempt % self.urls.len()];
            attempt += 1;
            let sent = Instant::now();
            match req(&self.http, url).timeout(timeout).send().await {
                Ok(resp) => {
                    let status = resp.status().as_u16();
                    let body: Value = resp.json().await.unwrap_or(Value::Null);
                    self.count(status.to_string());
                    if !matches!(status, 429 | 502 | 503 | 504) {
                        return (status, body);
                    }
                }
                Err(e) if e.is_timeout() => {
                    self.count(format!("no answer within {}s", sent.elapsed().as_secs()));
                }
                Err(_) => self.count("connection refused or reset".into()),
            }
            assert!(
                started.elapsed() < RETRY_FOR,
                "no replica answered within {RETRY_FOR:?}"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// Retries a call to the API server from the test's side (the API server may be down).
async fn retrying<T, F, Fut>(what: &str, mut call: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let deadline = Instant::now() + RETRY_FOR;
    loop {
        match call().await {
            Ok(v) => return v,
            Err(e) => assert!(Instant::now() < deadline, "{what}: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// What of the guard is left in `ns`: any PDB, guard annotations and field managers on the
/// apps' pods and the node, windows not yet released or waiting on their finalizer.
async fn leftovers(client: &Client, ns: &str, node: &str) -> Result<Vec<String>, kube::Error> {
    let mut left = Vec::new();
    for pdb in Api::<PodDisruptionBudget>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await?
    {
        left.push(format!("PDB {}", pdb.metadata.name.unwrap_or_default()));
    }
    for pod in Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await?
    {
        let name = pod.metadata.name.clone().unwrap_or_default();
        for key in [DND, SAFE_TO_EVICT] {
            if annotation(&pod.metadata, key).is_some() {
                left.push(format!("pod {name} annotation {key}"));
            }
        }
        left.extend(
            guard_managers(&pod.metadata)
                .into_iter()
                .map(|m| format!("pod {name} manager {m}")),
        );
    }
    let n = Api::<Node>::all(client.clone()).get(node).await?;
    for key in [DND, SCALE_DOWN_DISABLED] {
        if annotation(&n.metadata, key).is_some() {
            left.push(format!("node annotation {key}"));
        }
    }
    left.extend(
        guard_managers(&n.metadata)
            .into_iter()
            .map(|m| format!("node manager {m}")),
    );
    for w in Api::<TestWindow>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await?
    {
        let name = w.metadata.name.clone().unwrap_or_default();
        if w.metadata.deletion_timestamp.is_some() {
            left.push(format!("window {name} waits on its finalizer"));
        } else if !support::windows::is_released(&w) {
            left.push(format!("window {name} not released"));
        }
    }
    Ok(left)
}

/// The replicas, shared between the traffic and the fault.
type Replicas = Arc<Mutex<Vec<Operator>>>;

async fn leader(replicas: &Replicas) -> Option<usize> {
    let ops = replicas.lock().await;
    for (i, op) in ops.iter().enumerate() {
        if op.pid().is_some() && op.leads().await {
            return Some(i);
        }
    }
    None
}

/// Strikes `fault` and heals it; returns when it healed.
async fn strike(
    fault: Fault,
    rng: &mut StdRng,
    replicas: &Replicas,
    proxy: &Proxy,
    cluster: &Cluster,
) -> SystemTime {
    let pause = Duration::from_millis(rng.random_range(500..3000));
    match fault {
        Fault::KillReplica | Fault::TermReplica | Fault::KillLeader => {
            let i = match fault {
                Fault::KillLeader => leader(replicas).await.unwrap_or(0),
                _ => rng.random_range(0..2),
            };
            {
                let mut ops = replicas.lock().await;
                if fault == Fault::TermReplica {
                    assert!(
                        ops[i].terminate(Duration::from_secs(20)).await,
                        "a replica did not stop within 20 s of SIGTERM"
                    );
                } else {
                    ops[i].kill();
                }
            }
            tokio::time::sleep(pause).await;
            replicas.lock().await[i].respawn();
        }
        Fault::RestartApiServer => {
            let down = cluster.kill_api_server();
            tokio::time::sleep(pause).await;
            drop(down);
        }
        Fault::StallConnections => {
            let stalled = proxy.stall();
            tokio::time::sleep(pause * 3).await;
            drop(stalled);
        }
        Fault::ResetConnections => {
            proxy.reset();
            tokio::time::sleep(pause).await;
            proxy.reset();
        }
        Fault::PauseEtcd => {
            let paused = cluster.pause_etcd();
            tokio::time::sleep(pause).await;
            drop(paused);
        }
    }
    SystemTime::now()
}

fn expiry_of(body: &Value) -> Option<SystemTime> {
    let at: jiff::Timestamp = body["expiresAt"].as_str()?.parse().ok()?;
    Some(SystemTime::from(at))
}

/// One round: windows, actions, one fault; returns its figures once nothing is left.
#[allow(clippy::too_many_arguments)]
async fn round(
    n: usize,
    fault: Fault,
    rng: &mut StdRng,
    ci: &Ci,
    client: &Client,
    ns: &str,
    node: &str,
    replicas: &Replicas,
    proxy: &Proxy,
    cluster: &Cluster,
) -> RoundFigures {
    // The fault strikes at a random moment of the round, on its own task.
    let mut fault_rng = StdRng::seed_from_u64(rng.random());
    // Anywhere from the first open to the ends and expiries (a round's traffic takes 3–10 s).
    let strike_after = Duration::from_millis(rng.random_range(0..10_000));
    let (replicas_f, proxy_ref, cluster_ref) = (replicas.clone(), proxy, cluster);
    let fault_task = async move {
        tokio::time::sleep(strike_after).await;
        strike(fault, &mut fault_rng, &replicas_f, proxy_ref, cluster_ref).await
    };

    let traffic = async {
        let mut opened = Vec::new();
        for i in 0..rng.random_range(2..=4) {
            let mut apps: Vec<&str> = APPS.to_vec();
            apps.shuffle(rng);
            apps.truncate(rng.random_range(1..=2));
            let ending = [
                Ending::CloseThroughApi,
                Ending::KubectlDelete,
                Ending::Expire,
            ][rng.random_range(0..3)];
            let ttl = if ending == Ending::Expire {
                format!("{}s", rng.random_range(4..10))
            } else {
                "10m".into()
            };
            let wait = rng.random_bool(0.5);
            let name = format!("r{n}-w{i}");
            let body = json!({
                "name": name,
                "ttl": ttl,
                "reason": format!("chaos round {n}"),
                "selector": format!("app in ({})", apps.join(",")),
                "idempotencyKey": name,
            });
            let (path, timeout) = waiting(format!("/v1/namespaces/{ns}/windows"), wait);
            let (status, answer) = ci
                .call(
                    rng.random(),
                    |http, url| http.post(format!("{url}{path}")).json(&body),
                    timeout,
                )
                .await;
            // A short ttl may run out before a fault lets the controller protect anything:
            // a waiting open then says so (409) at once.
            assert!(
                status == 200
                    || status == 201
                    || (status == 409 && wait && ending == Ending::Expire),
                "opening {name}: {status} {answer}"
            );
            let ended = (ending == Ending::Expire && status != 409)
                .then(|| expiry_of(&answer))
                .flatten();
            opened.push(Opened {
                name,
                ending,
                ended,
            });
            // Between opens: a renew, or a rollout of a selected Deployment.
            match rng.random_range(0..3) {
                0 => {
                    let app = apps[0].to_string();
                    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
                    let patch = Patch::Merge(json!({"spec": {"template": {"metadata": {
                        "annotations": {"chaos/rollout": format!("{n}-{i}")}}}}}));
                    let params = PatchParams::default();
                    retrying("rolling out", || deployments.patch(&app, &params, &patch)).await;
                }
                1 => {
                    if let Some(w) = opened.iter().find(|w| w.ending != Ending::Expire) {
                        let path = format!("/v1/namespaces/{ns}/windows/{}/renew", w.name);
                        let (status, answer) = ci
                            .call(
                                rng.random(),
                                |http, url| {
                                    http.post(format!("{url}{path}"))
                                        .json(&json!({"ttl": "10m"}))
                                },
                                CLIENT_TIMEOUT,
                            )
                            .await;
                        assert_eq!(status, 200, "renewing {}: {answer}", w.name);
                    }
                }
                _ => {}
            }
            tokio::time::sleep(Duration::from_millis(rng.random_range(0..1500))).await;
        }
        // The tests run a while, then CI ends the windows it opened.
        tokio::time::sleep(Duration::from_millis(rng.random_range(1000..5000))).await;
        for w in opened.iter_mut() {
            match w.ending {
                Ending::CloseThroughApi => {
                    let wait = rng.random_bool(0.5);
                    let (path, timeout) =
                        waiting(format!("/v1/namespaces/{ns}/windows/{}", w.name), wait);
                    let (status, answer) = ci
                        .call(
                            rng.random(),
                            |http, url| http.delete(format!("{url}{path}")),
                            timeout,
                        )
                        .await;
                    assert_eq!(status, 200, "closing {}: {answer}", w.name);
                    w.ended = Some(SystemTime::now());
                }
                Ending::KubectlDelete => {
                    let deadline = Instant::now() + RETRY_FOR;
                    loop {
                        let out = support::kubectl()
                            .args(["delete", "tw", &w.name, "-n", ns, "--wait=false"])
                            .args(["--ignore-not-found", "--request-timeout=10s"])
                            .output()
                            .unwrap();
                        if out.status.success() {
                            break;
                        }
                        assert!(
                            Instant::now() < deadline,
                            "kubectl delete tw {}: {}",
                            w.name,
                            String::from_utf8_lossy(&out.stderr)
                        );
                        tokio::time::sleep(Duration::from_millis(250)).await;
                    }
                    w.ended = Some(SystemTime::now());
                }
                Ending::Expire => {
                    // Opened without waiting, the answer may predate the controller's
                    // expiry: read it from the window.
                    let path = format!("/v1/namespaces/{ns}/windows/{}", w.name);
                    while w.ended.is_none() {
                        let (status, answer) = ci
                            .call(
                                rng.random(),
                                |http, url| http.get(format!("{url}{path}")),
                                CLIENT_TIMEOUT,
                            )
                            .await;
                        assert_eq!(status, 200, "reading {}: {answer}", w.name);
                        w.ended = expiry_of(&answer);
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
            }
        }
        opened
    };
    let (healed, opened) = tokio::join!(fault_task, traffic);

    let (last_end, last) = opened
        .iter()
        .map(|w| (w.ended.expect("every window has an end"), w.ending))
        .max_by_key(|(t, _)| *t)
        .unwrap();
    // Nothing may be left once the last window ended.
    if let Ok(wait) = last_end.duration_since(SystemTime::now()) {
        tokio::time::sleep(wait).await;
    }
    let deadline = Instant::now() + RELEASE_BOUND + Duration::from_secs(60);
    let mut left = Vec::new();
    loop {
        match leftovers(client, ns, node).await {
            Ok(l) if l.is_empty() => break,
            Ok(l) => left = l,
            Err(_) => {}
        }
        assert!(
            Instant::now() < deadline,
            "round {n} ({fault:?}): still left long after every window ended: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let clean = SystemTime::now();
    let after_end = clean.duration_since(last_end).unwrap_or_default();
    let after_heal = (healed > last_end)
        .then(|| clean.duration_since(healed).ok())
        .flatten();
    // The next round starts with every replica back.
    for op in replicas.lock().await.iter_mut() {
        op.wait_ready().await;
    }
    RoundFigures {
        fault,
        after_end,
        after_heal,
        last_expired: last == Ending::Expire,
    }
}

#[tokio::test]
async fn nothing_is_left_and_nothing_released_late_whatever_dies() {
    let Some(cluster) = Cluster::local() else {
        panic!(
            "the chaos test restarts the API server: run it on the cluster tests/cluster/up runs"
        );
    };
    let seed: u64 = std::env::var("CHAOS_SEED")
        .ok()
        .map(|s| s.parse().expect("CHAOS_SEED is a number"))
        .unwrap_or_else(rand::random);
    let rounds: usize = std::env::var("CHAOS_ROUNDS")
        .ok()
        .map(|s| s.parse().expect("CHAOS_ROUNDS is a number"))
        .unwrap_or(FAULTS.len());
    println!("chaos: seed {seed} ({rounds} rounds); replay with CHAOS_SEED={seed}");

    with_namespace(move |client, ns| async move {
        let mut rng = StdRng::seed_from_u64(seed);
        let node = format!("{ns}-n");
        create_ready_node(&client, &ns, &node).await;
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        for app in APPS {
            deployments
                .create(
                    &PostParams::default(),
                    &deployment(app)
                        .node_selector("disruption-guard.io/test-node", &node)
                        .build(),
                )
                .await
                .unwrap();
        }
        let proxy = Proxy::start().await;
        let mut ops = Vec::new();
        for identity in ["chaos-0", "chaos-1"] {
            let args = vec![
                format!("--namespaces={ns}"),
                "--insecure-no-auth".into(),
                "--leader-election".into(),
                format!("--leader-election-namespace={ns}"),
                format!("--leader-election-identity={identity}"),
                "--lease-duration-seconds=3".into(),
            ];
            ops.push(Operator::start_as(&ns, args, proxy.kubeconfig()).await);
        }
        let ci = Ci {
            urls: ops.iter().map(|o| o.api.clone()).collect(),
            http: reqwest::Client::new(),
            answers: Arc::default(),
        };
        let replicas: Replicas = Arc::new(Mutex::new(ops));

        // Every kind once per seven rounds, in the seed's order.
        let mut schedule = Vec::new();
        while schedule.len() < rounds {
            let mut kinds = FAULTS.to_vec();
            kinds.shuffle(&mut rng);
            schedule.extend(kinds);
        }
        schedule.truncate(rounds);
        let mut figures = Vec::new();
        for (n, fault) in schedule.into_iter().enumerate() {
            let f = round(
                n, fault, &mut rng, &ci, &client, &ns, &node, &replicas, &proxy, &cluster,
            )
            .await;
            println!(
                "chaos: round {n} {:?}: clean {:.1} s after the last end ({}){}",
                f.fault,
                f.after_end.as_secs_f64(),
                if f.last_expired { "expiry" } else { "close" },
                f.after_heal.map_or(String::new(), |d| format!(
                    ", {:.1} s after the fault healed",
                    d.as_secs_f64()
                ))
            );
            figures.push(f);
        }

        let mut by_fault: BTreeMap<String, usize> = BTreeMap::new();
        for f in &figures {
            *by_fault.entry(format!("{:?}", f.fault)).or_default() += 1;
        }
        let worst = |expired: bool| {
            figures
                .iter()
                .filter(|f| f.last_expired == expired)
                .map(|f| f.after_end)
                .max()
        };
        let worst_heal = figures
            .iter()
            .filter_map(|f| f.after_heal)
            .max()
            .unwrap_or_default();
        let answers = ci.answers.lock().unwrap().clone();
        println!("chaos: seed {seed}, {} rounds, faults {by_fault:?}", figures.len());
        println!(
            "chaos: worst release after a close {:?}, after an expiry {:?}, after a fault that healed after the end {worst_heal:?}",
            worst(false),
            worst(true)
        );
        println!("chaos: HTTP API answers {answers:?}");

        for f in &figures {
            let late = f.after_heal.unwrap_or(f.after_end);
            assert!(
                late <= RELEASE_BOUND,
                "{:?}: a release came {late:?} after the later of the end and the fault's healing (bound {RELEASE_BOUND:?})",
                f.fault
            );
        }
        let bad: Vec<_> = answers
            .iter()
            .filter(|(k, _)| k.starts_with('5') && k.as_str() != "503" || k.starts_with("no answer"))
            .collect();
        assert!(
            bad.is_empty(),
            "the HTTP API answered a 5xx other than 503, or hung: {bad:?}"
        );
    })
    .await;
}
