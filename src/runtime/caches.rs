//! The operator's caches: one watch of each kind both components read — nodes, ReplicaSets,
//! Deployments and PodDisruptionBudgets — each held once in a reflector store, trimmed to what
//! their readers use ([`crate::k8s::trim`]); and pods, only where they matter
//! ([`super::pod_scopes`]: the namespaces that have windows, the nodes being disrupted).
//!
//! Every change is handed on cheaply: a [`ChangeFeed`] carries the stored pods and nodes (an
//! `Arc`, no copy) and every PDB event to the window controller, which decides which windows
//! they concern; the drain watcher receives a [`NodeTrigger`] naming the node to look at again
//! (or all of them, when a workload or PDB changed).
//!
//! - pods: [`PodDigest`]s (all phases: a window protects pending pods too) with only the guard's
//!   managedFields entries, per scope;
//! - nodes: their metadata and disruption marks ([`trim::node`]);
//! - ReplicaSets: metadata, selector and replicas ([`trim::replica_set`]);
//! - Deployments: metadata, what a rollout decision reads and the template's `restartedAt`
//!   ([`trim::deployment`]);
//! - PDBs: spec, status, the guard's managedFields entries and the labels it reads ([`trim::pdb`]);
//! - CITrusts (for the API): their spec ([`trim::ci_trust`]).
//!
//! `scope` limits the namespaced watches to one namespace (`--namespaces` naming exactly one).

use std::sync::Arc;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Namespace, Node};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Client, Resource};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::task::JoinHandle;

use super::Readiness;
use super::pod_scopes::{Pods, Scope};
pub use super::reflect::{Cacheable, NodeTrigger, decoded, reflect, scoped};
use super::reflect::{hand_on, list_in_small_pages};
use crate::k8s::decoded::Decoded;
use crate::k8s::signals::{self, Signal};
use crate::resources::citrust::CI_TRUST_LABEL;
use crate::resources::{CITrust, PodDigest};

/// The shared stores.
#[derive(Clone)]
pub struct Caches {
    /// Pods where they matter: in the namespaces that have windows, on the nodes being
    /// disrupted.
    pub pods: Pods,
    pub nodes: Store<Node>,
    pub replica_sets: Store<ReplicaSet>,
    pub deployments: Store<Deployment>,
    pub pdbs: Store<PodDisruptionBudget>,
    /// Resolves (true) once every store holds its initial list. Wait on this, not on the
    /// stores: a store's own readiness wakes only one waiting task.
    ready: Shared<BoxFuture<'static, bool>>,
}

/// What changed, for a consumer that maps objects to what they concern (the window
/// controller): every pod and node that changed (applied, deleted, or changed while a re-list
/// was under way), as stored, and every PDB watch event.
pub struct ChangeFeed {
    pub pods: UnboundedReceiver<Arc<PodDigest>>,
    pub nodes: UnboundedReceiver<Arc<Node>>,
    pub pdbs: UnboundedReceiver<watcher::Event<PodDisruptionBudget>>,
}

/// The watches' tasks; they run until aborted.
pub struct Tasks(Vec<JoinHandle<()>>);

impl Drop for Tasks {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

impl Caches {
    /// Starts every watch. `scope` limits the namespaced ones to one namespace; the drain
    /// watcher's triggers go to `drain`; a node disrupted by one of `signals` gets its pods
    /// watched.
    pub fn start(
        client: &Client,
        ready: &Arc<Readiness>,
        scope: Option<&str>,
        drain: UnboundedSender<NodeTrigger>,
        signals: &[Signal],
    ) -> (Caches, ChangeFeed, Tasks) {
        let (pods_tx, pods_rx) = unbounded_channel();
        let (nodes_tx, nodes_rx) = unbounded_channel();
        let (pdbs_tx, pdbs_rx) = unbounded_channel();

        let pods = Pods::new(client, ready.clone(), scope, pods_tx, drain.clone());

        let (nodes, writer) = reflector::store::<Node>();
        let mut on_node = hand_on(
            nodes.clone(),
            Some(nodes_tx),
            drain.clone(),
            Box::new(|event: &watcher::Event<Node>| match event {
                watcher::Event::Apply(n) | watcher::Event::InitApply(n) => {
                    n.metadata.name.clone().map(NodeTrigger::Node)
                }
                watcher::Event::Delete(n) => n.metadata.uid.clone().map(NodeTrigger::NodeGone),
                watcher::Event::InitDone => Some(NodeTrigger::All),
                watcher::Event::Init => None,
            }),
        );
        let node_scopes = NodeScopes {
            pods: pods.clone(),
            nodes: nodes.clone(),
            signals: signals.to_vec(),
        };
        let node_task = reflect(
            "nodes",
            Api::<Decoded<Node>>::all(client.clone()),
            list_in_small_pages(),
            writer,
            ready.clone(),
            move |event| {
                // The node's pods are watched (or not) before the drain watcher hears of it.
                node_scopes.on(&event);
                on_node(event);
            },
        );

        let (replica_sets, rs_task) =
            watch_workloads("replicasets", client, ready, scope, &drain, |_| {});
        let (deployments, dep_task) =
            watch_workloads("deployments", client, ready, scope, &drain, |_| {});
        let (pdbs, pdb_task) = watch_workloads(
            "poddisruptionbudgets",
            client,
            ready,
            scope,
            &drain,
            move |event| {
                // A closed receiver means its consumer stopped (shutdown): nothing to do.
                let _ = pdbs_tx.send(event.clone());
            },
        );

        let feed = ChangeFeed {
            pods: pods_rx,
            nodes: nodes_rx,
            pdbs: pdbs_rx,
        };
        let ready = {
            let nodes = nodes.clone();
            let (rs, deps, pdbs) = (replica_sets.clone(), deployments.clone(), pdbs.clone());
            async move {
                futures::try_join!(
                    nodes.wait_until_ready(),
                    rs.wait_until_ready(),
                    deps.wait_until_ready(),
                    pdbs.wait_until_ready(),
                )
                .is_ok()
            }
            .boxed()
            .shared()
        };
        let caches = Caches {
            pods,
            nodes,
            replica_sets,
            deployments,
            pdbs,
            ready,
        };
        let tasks = vec![node_task, rs_task, dep_task, pdb_task];
        (caches, feed, Tasks(tasks))
    }

    /// Waits until every store holds its initial list; false if a watch stopped first.
    pub async fn wait_until_ready(&self) -> bool {
        self.ready.clone().await
    }

    /// Whether every store holds its initial list, without waiting.
    pub fn is_ready(&self) -> bool {
        self.ready.peek() == Some(&true)
    }
}

/// The CI trusts the HTTP API authorizes id-tokens with: every `CITrust` in `scope`, and the
/// namespaces labelled `disruption-guard.io/ci-trust` (only those: a narrow watch, by label
/// selector, metadata kept), whose value `false` (in any case) forbids CI trust there. Started only when the
/// operator trusts an OIDC issuer.
pub fn ci_trusts(
    client: &Client,
    ready: &Arc<Readiness>,
    scope: Option<&str>,
) -> (Store<CITrust>, Store<Namespace>, Tasks) {
    let (trusts, trusts_task) = read_only("citrusts", decoded::<CITrust>(client, scope), ready);
    let (namespaces, writer) = reflector::store();
    // Any value: `False` forbids as `false` does, and label selectors are case-sensitive.
    let selector = CI_TRUST_LABEL.to_string();
    let ns_task = reflect(
        "namespaces-without-ci-trust",
        Api::<Decoded<Namespace>>::all(client.clone()),
        watcher::Config::default().labels(&selector),
        writer,
        ready.clone(),
        |_| {},
    );
    (trusts, namespaces, Tasks(vec![trusts_task, ns_task]))
}

/// A store of `api` that is only read, driven by its own task.
pub fn read_only<K: Cacheable>(
    name: &'static str,
    api: Api<Decoded<K>>,
    ready: &Arc<Readiness>,
) -> (Store<K>, JoinHandle<()>) {
    store_of(name, api, ready, |_| {})
}

/// A store of all of `api`, listed in small pages and driven by its own task; each event is
/// shown to `on_event`.
fn store_of<K: Cacheable>(
    name: &'static str,
    api: Api<Decoded<K>>,
    ready: &Arc<Readiness>,
    on_event: impl FnMut(watcher::Event<K>) + Send + 'static,
) -> (Store<K>, JoinHandle<()>) {
    let (store, writer) = reflector::store();
    let task = reflect(
        name,
        api,
        list_in_small_pages(),
        writer,
        ready.clone(),
        on_event,
    );
    (store, task)
}

/// A namespaced kind watched into a store: every change asks the drain watcher to look at
/// every node again, and is shown to `on_event`.
fn watch_workloads<K>(
    name: &'static str,
    client: &Client,
    ready: &Arc<Readiness>,
    scope: Option<&str>,
    drain: &UnboundedSender<NodeTrigger>,
    mut on_event: impl FnMut(&watcher::Event<K>) + Send + 'static,
) -> (Store<K>, JoinHandle<()>)
where
    K: Cacheable + Resource<Scope = NamespaceResourceScope>,
{
    let drain = drain.clone();
    store_of(name, decoded::<K>(client, scope), ready, move |event| {
        if matches!(
            event,
            watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone
        ) {
            let _ = drain.send(NodeTrigger::All);
        }
        on_event(&event);
    })
}

/// Keeps a pod scope for each node being disrupted, from the node watch's events.
struct NodeScopes {
    pods: Pods,
    nodes: Store<Node>,
    signals: Vec<Signal>,
}

impl NodeScopes {
    fn on(&self, event: &watcher::Event<Node>) {
        let disrupted = |node: &Node| signals::disruption(node, &self.signals).is_some();
        match event {
            watcher::Event::Apply(node) | watcher::Event::InitApply(node) => {
                let scope = Scope::Node(node.metadata.name.clone().unwrap_or_default());
                if disrupted(node) {
                    self.pods.want(scope);
                } else {
                    self.pods.release(&scope);
                }
            }
            watcher::Event::Delete(node) => self
                .pods
                .release(&Scope::Node(node.metadata.name.clone().unwrap_or_default())),
            // After a (re-)list, nodes deleted meanwhile lose their scope too.
            watcher::Event::InitDone => self.pods.retain(|scope| match scope {
                Scope::Node(name) => self
                    .nodes
                    .get(&ObjectRef::new(name))
                    .is_some_and(|n| disrupted(&n)),
                Scope::Namespace(_) | Scope::Pod(..) => true,
            }),
            watcher::Event::Init => {}
        }
    }
}
