//! Starting the responder: off unless `--respond-evictions`; idle, with one log line, when the
//! cluster does not serve `lifecycle.k8s.io/v1alpha1` Evictions (the `EvictionRequestAPI` gate
//! off); else a watch of the Evictions labelled for [`RESPONDER`] and, every
//! `--respond-interval` while this replica leads, one decision per Eviction from the shared
//! caches, and its writes. The target pod of each response under way is watched on its own
//! ([`Scope::Pod`]) until the response ends.
//!
//! What this replica wrote is remembered ([`Written`]) and laid over the cached Eviction before
//! deciding, so a write the watch has not shown back yet is not made twice (a second
//! `completionTime` would be refused: it is immutable). A restarted replica starts from the
//! Eviction as the API server has it: the rollout it made is found on the Deployment, the
//! heartbeats go on.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use kube::{Api, Client};
use tracing::{debug, info, warn};

use super::act::{self, Entry};
use super::decide::{self, Facts, Step};
use super::eviction::{Eviction, GROUP, VERSION};
use super::{RespondArgs, RespondMetrics};
use crate::k8s::decoded::Decoded;
use crate::resources::names::RESPONDER;
use crate::rollout::restart::Rollouts;
use crate::rollout::workload;
use crate::runtime::caches::{Caches, reflect};
use crate::runtime::{Runtime, Scope};

pub use super::args::Shared;

/// The watch's name (logs, readiness).
const WATCH: &str = "evictions";

/// How long a decision waits for its pod's watch to list the pod; it is made on a later tick
/// when the watch is slower.
const POD_SYNC: Duration = Duration::from_secs(2);

/// What this replica wrote into one Eviction's entry.
#[derive(Debug, Clone, Default)]
struct Written {
    heartbeat: Option<Timestamp>,
    done: bool,
}

/// Runs the responder until shutdown.
pub async fn run(
    runtime: Runtime,
    args: RespondArgs,
    shared: Shared,
    metrics: Arc<RespondMetrics>,
    caches: Caches,
) -> anyhow::Result<()> {
    if !args.respond_evictions {
        return Ok(());
    }
    if !served(&runtime.client).await {
        info!(
            "EvictionRequest responder idle: the cluster does not serve {GROUP}/{VERSION} \
             evictions (feature gate EvictionRequestAPI off)"
        );
        return Ok(());
    }
    let (store, writer) = reflector::store::<Eviction>();
    let selector = format!("{RESPONDER} in (responder,requester-responder)");
    let api: Api<Decoded<Eviction>> = match runtime.watch_scope() {
        Some(ns) => Api::namespaced(runtime.client.clone(), ns),
        None => Api::all(runtime.client.clone()),
    };
    let task = reflect(
        WATCH,
        api,
        watcher::Config::default().labels(&selector),
        writer,
        runtime.ready.clone(),
        |_| {},
    );
    info!(responder = RESPONDER, %selector, "EvictionRequest responder started");
    let mut responder = Responder {
        rollouts: Rollouts::new(&runtime),
        runtime: runtime.clone(),
        caches,
        shared,
        metrics,
        written: HashMap::new(),
    };
    let mut tick = tokio::time::interval(args.respond_interval);
    loop {
        tokio::select! {
            _ = runtime.shutdown.cancelled() => break,
            _ = tick.tick() => responder.pass(&store).await,
        }
    }
    task.abort();
    Ok(())
}

/// Whether the API server serves Evictions in `lifecycle.k8s.io/v1alpha1`.
async fn served(client: &Client) -> bool {
    match client
        .list_api_group_resources(&format!("{GROUP}/{VERSION}"))
        .await
    {
        Ok(list) => list.resources.iter().any(|r| r.name == "evictions/status"),
        Err(error) => {
            debug!(%error, "discovery of {GROUP}/{VERSION}");
            false
        }
    }
}

struct Responder {
    runtime: Runtime,
    caches: Caches,
    rollouts: Rollouts,
    shared: Shared,
    metrics: Arc<RespondMetrics>,
    written: HashMap<String, Written>,
}

impl Responder {
    /// One decision per cached Eviction, while this replica leads.
    async fn pass(&mut self, store: &Store<Eviction>) {
        if !self.runtime.leader.is_leader() {
            self.caches.pods.retain(|s| !matches!(s, Scope::Pod(..)));
            return;
        }
        let evictions = store.state();
        let live: Vec<String> = evictions
            .iter()
            .filter_map(|e| e.metadata.uid.clone())
            .collect();
        self.written.retain(|uid, _| live.contains(uid));
        for eviction in &evictions {
            if let Err(error) = self.respond(eviction).await {
                warn!(
                    eviction = ?eviction.metadata.name, namespace = ?eviction.metadata.namespace,
                    %error, "EvictionRequest response failed; trying again"
                );
            }
        }
        // The pods of the responses still under way stay watched; the others' watches end.
        let under_way: HashSet<Scope> = evictions
            .iter()
            .filter(|e| self.under_way(e))
            .filter_map(|e| act::scope(e))
            .collect();
        self.caches
            .pods
            .retain(|s| !matches!(s, Scope::Pod(..)) || under_way.contains(s));
    }

    /// Whether the guard's response to `cached` is Active, started and not finished.
    fn under_way(&self, cached: &Eviction) -> bool {
        let uid = cached.metadata.uid.as_deref().unwrap_or_default();
        let written = self.written.get(uid).cloned().unwrap_or_default();
        !written.done && decide::turn(&overlay(cached, &written)).is_none()
    }

    async fn respond(&mut self, cached: &Eviction) -> anyhow::Result<()> {
        let uid = cached.metadata.uid.clone().unwrap_or_default();
        let written = self.written.get(&uid).cloned().unwrap_or_default();
        if written.done {
            return Ok(());
        }
        let eviction = overlay(cached, &written);
        // Only an Active, unfinished response needs the reads.
        match decide::turn(&eviction) {
            None => {}
            Some(Step::Withdrawn) => {
                info!(eviction = ?eviction.metadata.name, "EvictionRequest withdrawn: response stopped");
                self.metrics.response("withdrawn");
                self.written.entry(uid).or_default().done = true;
                return Ok(());
            }
            Some(_) => return Ok(()),
        }
        if let Some(scope) = act::scope(&eviction)
            && !self.caches.pods.synced(scope, POD_SYNC).await
        {
            return Ok(());
        }
        let reads = act::read(&self.caches, &eviction);
        let namespace = eviction.metadata.namespace.as_deref().unwrap_or_default();
        let owner = match reads.pod.as_ref() {
            Some(pod) => workload::owner(
                pod,
                reads.replica_set.as_ref().map(|rs| &rs.metadata),
                reads.deployment.as_deref(),
            ),
            None => workload::Owner::None,
        };
        let now = Timestamp::now();
        let step = decide::decide(&Facts {
            eviction: &eviction,
            pod: reads.pod.as_ref(),
            owner,
            in_scope: self.runtime.in_scope(namespace),
            max_replicas: self.shared.max_replicas,
            timeout: self.shared.timeout,
            now,
        });
        debug!(eviction = ?eviction.metadata.name, ?step, "EvictionRequest response");
        let started = eviction.entry(RESPONDER).and_then(|e| e.start_time);
        let rolls_out = matches!(step, Step::RollOut(_));
        match step {
            Step::Idle | Step::Wait => Ok(()),
            Step::Withdrawn => Ok(()),
            Step::RollOut(progress) | Step::Heartbeat(progress) => {
                if rolls_out {
                    let Some(target) = act::target(&reads) else {
                        return Ok(());
                    };
                    let max = self.shared.max_replicas;
                    if !act::roll_out(&self.rollouts, &target, max, &progress).await? {
                        return Ok(());
                    }
                    info!(namespace, deployment = %target.deployment, pod = %target.pod,
                        "rolled out for an EvictionRequest");
                }
                let (expected, message) = (progress.expected, progress.message);
                self.beat(&eviction, &uid, now, expected, message, None)
                    .await
            }
            Step::Complete { message } => {
                self.beat(&eviction, &uid, now, now, message.clone(), Some(now))
                    .await?;
                if let Some(started) = started {
                    let seconds = now.duration_since(started).as_secs_f64().max(0.0);
                    self.metrics.time_to_completion.observe(seconds);
                }
                self.metrics.response("completed");
                info!(namespace, eviction = ?eviction.metadata.name, %message, "EvictionRequest response completed");
                act::report(
                    &self.rollouts,
                    &reads,
                    &eviction,
                    false,
                    "EvictionRequestCompleted",
                    &message,
                );
                Ok(())
            }
            Step::StepAside(aside) => {
                let message = format!("stepping aside: {}", aside.explain());
                self.beat(&eviction, &uid, now, now, message.clone(), Some(now))
                    .await?;
                self.metrics.response(aside.outcome());
                info!(namespace, eviction = ?eviction.metadata.name, %message, "EvictionRequest handed over");
                let warning = matches!(aside, decide::Aside::TimedOut(_));
                act::report(
                    &self.rollouts,
                    &reads,
                    &eviction,
                    warning,
                    "EvictionRequestHandedOver",
                    &message,
                );
                Ok(())
            }
        }
    }

    /// Writes the guard's entry and remembers it.
    async fn beat(
        &mut self,
        eviction: &Eviction,
        uid: &str,
        now: Timestamp,
        expected: Timestamp,
        message: String,
        completion: Option<Timestamp>,
    ) -> anyhow::Result<()> {
        let entry = Entry {
            heartbeat: now,
            expected,
            completion,
            message,
        };
        if let Err(error) = act::write_entry(&self.runtime.client, eviction, &entry).await {
            self.metrics.response("write_failed");
            return Err(error.into());
        }
        let written = self.written.entry(uid.to_string()).or_default();
        written.heartbeat = Some(now);
        written.done = completion.is_some();
        Ok(())
    }
}

/// The cached Eviction with this replica's own later heartbeat laid over it.
fn overlay(cached: &Eviction, written: &Written) -> Eviction {
    let mut eviction = cached.clone();
    if let (Some(status), Some(beat)) = (eviction.status.as_mut(), written.heartbeat) {
        for entry in status.responders.iter_mut().filter(|r| r.name == RESPONDER) {
            entry.heartbeat_time = Some(entry.heartbeat_time.map_or(beat, |t| t.max(beat)));
        }
    }
    eviction
}
