//! The caches the window controller and the drain watcher share: one watch of pods and one of
//! nodes, the two largest collections in a cluster, each held once in a reflector store.
//!
//! Every change is handed on cheaply: the window controller receives the stored object (an
//! `Arc`, no copy) and decides which windows it concerns; the drain watcher receives a
//! [`NodeTrigger`] naming the node to look at again.
//!
//! - pods: [`PodDigest`]s (all phases: a window protects pending pods too) with only the guard's
//!   managedFields entries;
//! - nodes: trimmed to their metadata and disruption marks ([`trim::node`]).

use std::sync::Arc;

use futures::future::{BoxFuture, Shared};
use futures::{FutureExt, Stream, StreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::task::JoinHandle;
use tracing::warn;

use crate::k8s::trim;
use crate::resources::PodDigest;

/// What a change in the caches asks a node-keyed consumer (the drain watcher) to look at again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeTrigger {
    /// A node was added or changed, or a pod on it.
    Node(String),
    /// A node was deleted (its uid).
    NodeGone(String),
    /// Something other than a node or pod changed (a ReplicaSet, Deployment, PDB or
    /// namespace): look at every node of interest again.
    All,
}

/// The shared stores.
#[derive(Clone)]
pub struct Caches {
    pub pods: Store<PodDigest>,
    pub nodes: Store<Node>,
    /// Resolves (true) once both stores hold their initial lists. Wait on this, not on the
    /// stores: a store's own readiness wakes only one waiting task.
    ready: Shared<BoxFuture<'static, bool>>,
}

/// What the window controller receives: every pod and node that changed (applied, deleted, or
/// changed while a re-list was under way), as stored.
pub struct WindowFeed {
    pub pods: UnboundedReceiver<Arc<PodDigest>>,
    pub nodes: UnboundedReceiver<Arc<Node>>,
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
    /// Starts both watches. `scope` limits the pod watch to one namespace; the drain watcher's
    /// triggers go to `drain`.
    pub fn start(
        client: &Client,
        scope: Option<&str>,
        drain: UnboundedSender<NodeTrigger>,
    ) -> (Caches, WindowFeed, Tasks) {
        let (pods_tx, pods_rx) = unbounded_channel();
        let (nodes_tx, nodes_rx) = unbounded_channel();

        let pod_api: Api<PodDigest> = match scope {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        };
        let (pods, writer) = reflector::store();
        let stream = watcher(pod_api, list_in_small_pages())
            .default_backoff()
            .modify(PodDigest::trim)
            .reflect(writer);
        let pod_task = fan_out(
            "pods",
            stream,
            pods.clone(),
            pods_tx,
            drain.clone(),
            |event| match event {
                watcher::Event::Apply(pod) | watcher::Event::Delete(pod) => {
                    pod.node_name().map(|n| NodeTrigger::Node(n.to_string()))
                }
                watcher::Event::InitDone => Some(NodeTrigger::All),
                watcher::Event::Init | watcher::Event::InitApply(_) => None,
            },
        );

        let (nodes, writer) = reflector::store();
        let stream = watcher(Api::<Node>::all(client.clone()), list_in_small_pages())
            .default_backoff()
            .modify(trim::node)
            .reflect(writer);
        let node_task = fan_out(
            "nodes",
            stream,
            nodes.clone(),
            nodes_tx,
            drain,
            |event| match event {
                watcher::Event::Apply(n) | watcher::Event::InitApply(n) => {
                    n.metadata.name.clone().map(NodeTrigger::Node)
                }
                watcher::Event::Delete(n) => n.metadata.uid.clone().map(NodeTrigger::NodeGone),
                watcher::Event::InitDone => Some(NodeTrigger::All),
                watcher::Event::Init => None,
            },
        );

        let feed = WindowFeed {
            pods: pods_rx,
            nodes: nodes_rx,
        };
        let ready = {
            let (pods, nodes) = (pods.clone(), nodes.clone());
            async move {
                pods.wait_until_ready().await.is_ok() && nodes.wait_until_ready().await.is_ok()
            }
            .boxed()
            .shared()
        };
        let caches = Caches { pods, nodes, ready };
        (caches, feed, Tasks(vec![pod_task, node_task]))
    }

    /// Waits until both stores hold their initial lists; false if a watch stopped first.
    pub async fn wait_until_ready(&self) -> bool {
        self.ready.clone().await
    }

    /// Whether both stores hold their initial lists, without waiting.
    pub fn is_ready(&self) -> bool {
        self.ready.peek() == Some(&true)
    }
}

/// Objects per page of the initial list (the default is 500). A page is parsed whole before its
/// objects are stored: smaller pages lower the start-up peak, which stays resident as
/// fragmentation, for a few more round trips (100 for 10,000 pods).
const LIST_PAGE: u32 = 100;

fn list_in_small_pages() -> watcher::Config {
    watcher::Config::default().page_size(LIST_PAGE)
}

/// Drives one watch: hands each changed object (the stored `Arc`, or the last state of a
/// deleted one) to the window controller and its trigger to the drain watcher.
fn fan_out<K, S>(
    name: &'static str,
    stream: S,
    store: Store<K>,
    window: UnboundedSender<Arc<K>>,
    drain: UnboundedSender<NodeTrigger>,
    to_trigger: impl Fn(&watcher::Event<K>) -> Option<NodeTrigger> + Send + 'static,
) -> JoinHandle<()>
where
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        // Until the first list is complete nothing is handed to the window controller: its
        // reconciles wait for the caches anyway, and holding 10,000 listed pods in the channel
        // would double the start-up peak.
        let mut listed = false;
        while let Some(event) = stream.next().await {
            let event = match event {
                Ok(event) => event,
                Err(error) => {
                    warn!(watch = name, %error, "watch failed; retrying");
                    continue;
                }
            };
            if let Some(trigger) = to_trigger(&event) {
                // A closed receiver means its consumer stopped (shutdown): nothing to do.
                let _ = drain.send(trigger);
            }
            let changed = match event {
                watcher::Event::Apply(obj) => store
                    .get(&ObjectRef::from_obj(&obj))
                    .unwrap_or_else(|| Arc::new(obj)),
                // A re-list (after the watch lost its place): the store still holds the previous
                // state until it completes, so only what changed in between is handed on.
                watcher::Event::InitApply(obj) if listed => {
                    let before = store.get(&ObjectRef::from_obj(&obj));
                    let version = |o: &K| o.meta().resource_version.clone();
                    if before.is_some_and(|b| version(&b) == version(&obj)) {
                        continue;
                    }
                    Arc::new(obj)
                }
                watcher::Event::Delete(obj) => Arc::new(obj),
                watcher::Event::InitDone => {
                    listed = true;
                    continue;
                }
                watcher::Event::InitApply(_) | watcher::Event::Init => continue,
            };
            let _ = window.send(changed);
        }
    })
}
