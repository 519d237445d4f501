//! `POST /evictions`: the webhook's one route. Each review is answered from the caches alone —
//! the answer never waits on the API server — and the rollout a first deny calls for is started
//! beside the answer ([`Actions::start_rollout`] spawns it), never inside it.
//!
//! HA: any replica may answer, and each remembers its own denies ([`Denials`]). The rollout is
//! still made once per (Deployment, node) whichever replica answered, without the leader Lease:
//! the shared rollout action writes the rolled-out-for-node record with the rollout, guarded by
//! the resourceVersion it checked, so a second writer gets a conflict, reads again and finds
//! the record. Leader-only writes would tie every intercepted eviction to one replica (a deny
//! answered elsewhere would start nothing until a retry happened to reach the leader, and
//! nothing at all during a Lease hand-over) for no gain in safety. The first deny is also
//! recorded on the Deployment (`disruption-guard.io/eviction-held-since`, beside the answer),
//! and with the record's `restartedAt` it dates the deny for every replica, so the timeout
//! holds whichever replica answers and however often replicas restart, even when the rollout
//! patch keeps failing.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::Extension;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, State};
use axum::routing::post;
use axum::{Json, Router};
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Namespace, Node, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::admission::AdmissionReview;
use kube::core::{DynamicObject, PartialObjectMeta};
use kube::runtime::reflector::{ObjectRef, Store};
use tracing::{debug, info, warn};

use super::InterceptMetrics;
use super::decide::{self, AllowReason, Eviction, Facts, Hold, Verdict};
use super::denials::{Denials, Key, Skips};
use super::limit::{Requester, ReviewLimiter};
use super::metrics::{MALFORMED, NOT_SYNCED, OUT_OF_SCOPE, RATE_LIMITED, TIMEOUT};
use super::probe;
use super::review::{self, Parsed};
use crate::k8s::selector;
use crate::k8s::signals::Signal;
use crate::resources::names::INTERCEPT_EVICTIONS;
use crate::rollout::records;
use crate::rollout::target::NodeRef;
use crate::rollout::workload::{self, SkipReason};
use crate::runtime::{Pods, in_scope, lookup};

/// How long a review waits at most for the pods of nodes whose disruption was just seen.
const NODE_PODS_SETTLE: Duration = Duration::from_secs(2);

/// The route the webhook registration points at.
pub const PATH: &str = "/evictions";

/// What a deny or a timeout sets going, beside the answer.
pub trait Actions: Send + Sync {
    /// Starts the rollout that moves the held pod (spawned; returns at once).
    fn start_rollout(&self, hold: &Hold, key: Key);
    /// Records on the Deployment that evictions on the hold's node are held since `since`
    /// (spawned; returns at once).
    fn record_hold(&self, hold: &Hold, key: Key, since: Timestamp);
    /// Reports an eviction let through after the timeout (spawned; returns at once).
    fn report_timeout(&self, hold: &Hold, since: Timestamp);
    /// Reports an eviction let through at once because a rollout cannot save the pod, on a
    /// node being disrupted (spawned; returns at once).
    fn report_skip(&self, pod: &ObjectReference, reason: SkipReason);
}

/// The caches the answers read.
#[derive(Clone)]
pub struct Stores {
    /// Pods, among them every pod of a node being disrupted.
    pub pods: Pods,
    pub nodes: Store<Node>,
    pub replica_sets: Store<ReplicaSet>,
    pub deployments: Store<Deployment>,
    /// Namespace labels, for the opt-out.
    pub namespaces: Store<PartialObjectMeta<Namespace>>,
}

/// The flags the answers depend on.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `--drain-signals`.
    pub signals: Vec<Signal>,
    /// `--max-replicas`.
    pub max_replicas: i32,
    /// `--intercept-timeout`.
    pub timeout: Option<Duration>,
    /// `--namespaces`.
    pub namespaces: Arc<[String]>,
    /// `--intercept-namespace-selector`: the labels a namespace must match (every namespace
    /// when `None`).
    pub namespace_selector: Option<LabelSelector>,
    /// This replica's name, in the answer to the webhook probe.
    pub replica: Arc<str>,
}

/// What the handler shares; cheap to clone.
#[derive(Clone)]
pub struct InterceptState {
    pub stores: Stores,
    pub settings: Arc<Settings>,
    pub denials: Arc<Denials>,
    /// The pods already reported as let through because a rollout cannot save them.
    pub skips: Arc<Skips>,
    pub metrics: Arc<InterceptMetrics>,
    pub actions: Arc<dyn Actions>,
    /// True once every cache holds its first list; until then every eviction is allowed.
    pub synced: Arc<AtomicBool>,
    /// The rate limit per requester, for reviews that could hold an eviction; over it, they
    /// are allowed with nothing set going.
    pub limiter: Arc<ReviewLimiter>,
}

/// The webhook's routes.
pub fn router(state: InterceptState) -> Router {
    Router::new()
        .route(PATH, post(review_eviction))
        .with_state(state)
}

async fn review_eviction(
    State(state): State<InterceptState>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    body: Bytes,
) -> Json<AdmissionReview<DynamicObject>> {
    let started = Instant::now();
    let client = peer.map(|Extension(ConnectInfo(addr))| addr.ip());
    // A node whose disruption was seen a moment ago may not have its pods listed yet (a drain
    // cordons and evicts at once): wait for them, briefly, so its pods are known.
    state.stores.pods.nodes_settled(NODE_PODS_SETTLE).await;
    let answer = state.answer(&body, client, Timestamp::now());
    state
        .metrics
        .answer
        .observe(started.elapsed().as_secs_f64());
    Json(answer)
}

impl InterceptState {
    /// The answer to one review body from `client`. Whatever cannot hold the eviction (no
    /// eviction, caches not synced, out of scope, and every allow the caches decide: a pod they
    /// do not hold, a node not being disrupted, …) is answered at no cost; only a verdict that
    /// would hold it (a deny, or the timeout's allow) takes a token of the requester's bucket,
    /// and over the limit the eviction is allowed with nothing set going.
    pub fn answer(
        &self,
        body: &[u8],
        client: Option<IpAddr>,
        now: Timestamp,
    ) -> AdmissionReview<DynamicObject> {
        let metrics = &self.metrics;
        metrics.reviews.inc();
        let (request, eviction) = match review::parse(body) {
            Ok(Parsed::Eviction { request, eviction }) => (request, eviction),
            Ok(Parsed::Other(request)) => {
                warn!(kind = ?request.kind, "allowing a review that is not of an eviction");
                metrics.allow(MALFORMED);
                return review::allow(&request);
            }
            Err(malformed) => {
                warn!(uid = %malformed.uid, "allowing an unreadable review");
                metrics.allow(MALFORMED);
                return review::allow_unreadable(&malformed);
            }
        };
        // The probe proves the API server reaches this webhook: answered whatever the caches
        // and the scope, and nothing is held, counted as a deny or set going.
        if probe::is_probe(&eviction.name, eviction.dry_run) {
            info!(namespace = %eviction.namespace, username = request.user_info.username.as_deref().unwrap_or_default(), "answering the webhook probe");
            return review::answer_probe(&request, probe::answer(&self.settings.replica));
        }
        if !self.synced.load(Ordering::Acquire) {
            metrics.allow(NOT_SYNCED);
            return review::allow(&request);
        }
        if !in_scope(&self.settings.namespaces, &eviction.namespace)
            || !self.namespace_selected(&eviction.namespace)
        {
            metrics.allow(OUT_OF_SCOPE);
            return review::allow(&request);
        }
        let (ns, pod) = (&eviction.namespace, &eviction.name);
        let verdict = self.decide(&eviction, now);
        let requester = Requester {
            client,
            username: request.user_info.username.as_deref().unwrap_or_default(),
            namespace: ns,
        };
        if !matches!(verdict, Verdict::Allow(_)) && !self.limiter.allow(&requester) {
            debug!(namespace = %ns, pod = %pod, username = requester.username, "allowing a review over the rate limit");
            metrics.allow(RATE_LIMITED);
            return review::allow(&request);
        }
        match verdict {
            Verdict::Allow(reason) => {
                debug!(namespace = %ns, pod = %pod, reason = reason.as_str(), "eviction allowed");
                metrics.allow(reason.as_str());
                if let AllowReason::Cannot(skip) = reason {
                    self.report_skip(&eviction, skip, now);
                }
                review::allow(&request)
            }
            Verdict::Deny {
                start_rollout,
                record_hold,
                hold,
            } => {
                let key = key(&hold);
                let claims = self.denials.deny(&key, now, start_rollout, record_hold);
                if claims.hold_record {
                    self.actions
                        .record_hold(&hold, key.clone(), claims.first_denied);
                }
                if claims.rollout {
                    info!(
                        namespace = %ns, pod = %pod, deployment = %hold.target.deployment,
                        node = %hold.target.node.name, signal = %hold.raised.signal,
                        "eviction held; rolling the Deployment out"
                    );
                    self.actions.start_rollout(&hold, key);
                }
                metrics.denied.inc();
                review::deny(&request, message(&hold))
            }
            Verdict::AllowAfterTimeout { hold, since } => {
                metrics.allow(TIMEOUT);
                if self.denials.timed_out(&key(&hold), since) {
                    warn!(
                        namespace = %ns, pod = %pod, deployment = %hold.target.deployment,
                        node = %hold.target.node.name, %since, timeout = ?hold.timeout,
                        "eviction allowed after the timeout"
                    );
                    metrics.timeouts.inc();
                    self.actions.report_timeout(&hold, since);
                }
                review::allow(&request)
            }
        }
    }

    /// Whether `--intercept-namespace-selector` (when set) selects the namespace, by its labels
    /// in the cache (a namespace the cache does not hold is not selected).
    fn namespace_selected(&self, namespace: &str) -> bool {
        let Some(wanted) = &self.settings.namespace_selector else {
            return true;
        };
        self.stores
            .namespaces
            .get(&ObjectRef::new(namespace))
            .is_some_and(|ns| {
                let labels = ns.metadata.labels.clone().unwrap_or_default();
                selector::matches(wanted, &labels)
            })
    }

    /// One Event per (pod, reason) for an eviction a rollout cannot save (never for a dry run).
    fn report_skip(&self, eviction: &Eviction, skip: SkipReason, now: Timestamp) {
        if eviction.dry_run {
            return;
        }
        let Some(pod) = self.stores.pods.get(&eviction.namespace, &eviction.name) else {
            return;
        };
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if self.skips.first(&uid, skip.as_str(), now) {
            let reference = ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                namespace: Some(eviction.namespace.clone()),
                name: Some(eviction.name.clone()),
                uid: Some(uid),
                ..ObjectReference::default()
            };
            self.actions.report_skip(&reference, skip);
        }
    }

    /// Gathers the facts from the caches and decides.
    fn decide(&self, eviction: &Eviction, now: Timestamp) -> Verdict {
        let stores = &self.stores;
        let pod = stores
            .pods
            .get(&eviction.namespace, &eviction.name)
            .map(|p| p.to_pod());
        let node = pod
            .as_ref()
            .and_then(|p| p.spec.as_ref()?.node_name.as_deref())
            .and_then(|n| stores.nodes.get(&ObjectRef::new(n)));
        let (rs, deployment) = match &pod {
            Some(p) => lookup::owner_chain(&stores.replica_sets, &stores.deployments, p),
            None => (None, None),
        };
        let namespace_opted_out = stores
            .namespaces
            .get(&ObjectRef::new(&eviction.namespace))
            .and_then(|ns| {
                ns.metadata
                    .labels
                    .as_ref()?
                    .get(INTERCEPT_EVICTIONS)
                    .cloned()
            })
            .is_some_and(|v| v == "false");
        let memory = match (&deployment, &node) {
            (Some(d), Some(n)) => {
                let node = NodeRef {
                    name: n.metadata.name.clone().unwrap_or_default(),
                    uid: n.metadata.uid.clone().unwrap_or_default(),
                };
                let key = (d.metadata.uid.clone().unwrap_or_default(), node.uid.clone());
                self.denials.recall(&key, records::recorded_for(d, &node))
            }
            _ => Default::default(),
        };
        let owner = match &pod {
            Some(p) => workload::owner(p, rs.as_ref().map(|r| &r.metadata), deployment.as_deref()),
            None => workload::Owner::None,
        };
        let settings = &self.settings;
        decide::decide(&Facts {
            eviction,
            pod: pod.as_ref(),
            node: node.as_deref(),
            owner,
            namespace_opted_out,
            signals: &settings.signals,
            max_replicas: settings.max_replicas,
            now,
            first_denied: memory.first_denied,
            rollout_started: memory.rollout_started,
            timeout: settings.timeout,
        })
    }
}

/// The denial key of a hold: (Deployment uid, node uid).
pub fn key(hold: &Hold) -> Key {
    (
        hold.target.deployment_uid.clone(),
        hold.target.node.uid.clone(),
    )
}

/// The deny message: why, what happens now, and how long at most.
fn message(hold: &Hold) -> String {
    let t = &hold.target;
    format!(
        "pod {}/{} is the lone replica of Deployment {} and node {} is being disrupted ({}): \
         disruption-guard rolls the Deployment out so that a new pod starts on another node \
         first, then the old pod goes by itself; retry the eviction (it is allowed after {}s at \
         the latest)",
        t.namespace,
        t.pod,
        t.deployment,
        t.node.name,
        hold.raised.signal,
        hold.timeout.as_secs()
    )
}

#[cfg(test)]
#[path = "handler_tests.rs"]
mod tests;
