//! The pod cache, held only where pods matter: one watch per namespace that has a window, and
//! one per node being disrupted. Nothing else the operator does reads a pod, so a cluster's
//! other pods — nearly all of them in a shared cluster — cost it no memory and no CPU.
//!
//! - **Namespace scopes** are wanted by the window controller while the namespace has a
//!   window (its reconciles read every pod there: what a window selects, what it protected,
//!   what was disrupted); their changes go to the window controller's [`ChangeFeed`].
//! - **Node scopes** follow the node cache: a node disrupted by one of `--drain-signals` gets a
//!   watch of its pods (`fieldSelector=spec.nodeName=<node>`, which the API server's watch
//!   cache serves from an index, as it does for every kubelet) until the disruption ends or the
//!   node goes; their changes ask the drain watcher to look at the node again.
//! - **Pod scopes** are wanted by the EvictionRequest responder while it responds for a pod: a
//!   watch of that one pod (`fieldSelector=metadata.name=<name>` in its namespace), read on the
//!   responder's own ticks.
//!
//! A pod deleted from a node scope after the Eviction API evicted it
//! ([`PodDigest::evicted_through_eviction_api`]) is counted in the counter handed to
//! [`Pods::count_evictions`] (the drain watcher's `drain_pods_evicted_total`): every such
//! eviction passed the admission webhooks, so it tells whether the eviction webhook sees drains.
//!
//! A scope's first list is read from the API server's watch cache
//! ([`list_from_watch_cache`]): a consistent one would wait tens of milliseconds for the cache
//! to catch up with etcd, on the way from a node's disruption to its rollout and from a
//! namespace's first window to its protection.
//!
//! A pod can be in both kinds of scope; readers get it once. Each scope is its own reflector
//! store: a re-list of one scope replaces only that scope's pods.
//!
//! Figures (docs/benchmarks.md, "Scale"): a cluster-wide pod cache cost about 3 KiB per pod in
//! the cluster (150 MiB at 50,000 pods); scoped, the cost follows the windowed namespaces and
//! the disrupted nodes, whatever the cluster's size.
//!
//! [`ChangeFeed`]: super::caches::ChangeFeed

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Client};
use prometheus_client::metrics::counter::Counter;
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::Readiness;
use super::readable::readable_items;
use super::reflect::{NodeTrigger, ToTrigger, decoded, hand_on, list_from_watch_cache, reflect};
use crate::k8s::decoded::Decoded;
use crate::resources::PodDigest;

/// Where a pod watch looks.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Every pod of a namespace that has a window.
    Namespace(String),
    /// Every pod bound to a node being disrupted.
    Node(String),
    /// One pod (namespace, name) the EvictionRequest responder responds for.
    Pod(String, String),
}

/// One scope's watch: its store, whether its first list is complete, and its task (aborted
/// when the scope is released).
struct ScopeWatch {
    store: Store<PodDigest>,
    synced: watch::Receiver<bool>,
    task: Option<JoinHandle<()>>,
}

impl Drop for ScopeWatch {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// The scoped pod cache; cheap to clone.
#[derive(Clone)]
pub struct Pods {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    /// Told when a scope's watch dies and is restarted.
    ready: Arc<Readiness>,
    /// The one namespace namespaced watches are limited to (`--namespaces` naming one).
    limit: Option<String>,
    /// The window controller's feed of changed pods (namespace scopes).
    window: UnboundedSender<Arc<PodDigest>>,
    /// The drain watcher's triggers (node scopes).
    drain: UnboundedSender<NodeTrigger>,
    watches: RwLock<HashMap<Scope, ScopeWatch>>,
    /// Pods of node scopes deleted after an eviction through the Eviction API.
    evicted: Arc<OnceLock<Counter>>,
}

impl Pods {
    /// A cache with no scope yet.
    pub fn new(
        client: &Client,
        ready: Arc<Readiness>,
        limit: Option<&str>,
        window: UnboundedSender<Arc<PodDigest>>,
        drain: UnboundedSender<NodeTrigger>,
    ) -> Pods {
        Pods {
            inner: Arc::new(Inner {
                client: client.clone(),
                ready,
                limit: limit.map(str::to_string),
                window,
                drain,
                watches: RwLock::default(),
                evicted: Arc::default(),
            }),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<Scope, ScopeWatch>> {
        self.inner.watches.read().expect("pod scopes lock")
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<Scope, ScopeWatch>> {
        self.inner.watches.write().expect("pod scopes lock")
    }

    /// Counts in `counter` each pod of a node scope that is deleted after the Eviction API
    /// evicted it (once per pod: on its deletion). The first counter given stays.
    pub fn count_evictions(&self, counter: Counter) {
        let _ = self.inner.evicted.set(counter);
    }

    /// Starts watching `scope` unless it is watched already.
    pub fn want(&self, scope: Scope) {
        if self.read().contains_key(&scope) {
            return;
        }
        if let std::collections::hash_map::Entry::Vacant(entry) = self.write().entry(scope) {
            let started = self.start(entry.key());
            entry.insert(started);
        }
    }

    /// Stops watching `scope` and forgets its pods.
    pub fn release(&self, scope: &Scope) {
        let gone = self.write().remove(scope);
        drop(gone);
    }

    /// Stops watching every scope for which `keep` is false.
    pub fn retain(&self, mut keep: impl FnMut(&Scope) -> bool) {
        let mut watches = self.write();
        let gone: Vec<Scope> = watches.keys().filter(|s| !keep(s)).cloned().collect();
        for scope in gone {
            watches.remove(&scope);
        }
    }

    /// Wants `scope` and waits (at most `bound`) until its first list is complete; false if it
    /// is not by then.
    pub async fn synced(&self, scope: Scope, bound: Duration) -> bool {
        self.want(scope.clone());
        let Some(mut synced) = self.read().get(&scope).map(|w| w.synced.clone()) else {
            return false;
        };
        matches!(
            tokio::time::timeout(bound, synced.wait_for(|done| *done)).await,
            Ok(Ok(_))
        )
    }

    /// Waits (at most `bound`) until every node scope has its first list: a pod on a node whose
    /// disruption was seen a moment ago is then found.
    pub async fn nodes_settled(&self, bound: Duration) {
        let pending: Vec<watch::Receiver<bool>> = self
            .read()
            .iter()
            .filter(|(scope, w)| matches!(scope, Scope::Node(_)) && !*w.synced.borrow())
            .map(|(_, w)| w.synced.clone())
            .collect();
        if pending.is_empty() {
            return;
        }
        let all = futures::future::join_all(pending.into_iter().map(|mut rx| async move {
            let _ = rx.wait_for(|done| *done).await;
        }));
        let _ = tokio::time::timeout(bound, all).await;
    }

    /// The scopes watched now.
    pub fn scopes(&self) -> Vec<Scope> {
        self.read().keys().cloned().collect()
    }

    /// The cached pods of `namespace` (none unless the namespace is watched).
    pub fn in_namespace(&self, namespace: &str) -> Vec<Arc<PodDigest>> {
        self.read()
            .get(&Scope::Namespace(namespace.to_string()))
            .map(|w| w.store.state())
            .unwrap_or_default()
    }

    /// The cached pods bound to `node`: all of them while the node is disrupted, else those in
    /// the watched namespaces.
    pub fn on_node(&self, node: &str) -> Vec<Arc<PodDigest>> {
        let watches = self.read();
        let mut seen = HashSet::new();
        let mut out = vec![];
        let node_scope = Scope::Node(node.to_string());
        let mut add = |pod: Arc<PodDigest>| {
            if seen.insert(ObjectRef::from_obj(&*pod)) {
                out.push(pod);
            }
        };
        if let Some(w) = watches.get(&node_scope) {
            w.store.state().into_iter().for_each(&mut add);
        }
        for (scope, w) in watches.iter() {
            if matches!(scope, Scope::Namespace(_)) {
                w.store
                    .state_filter(|p| p.node_name() == Some(node))
                    .into_iter()
                    .for_each(&mut add);
            }
        }
        out
    }

    /// The cached pod `name` in `namespace`, from its namespace's scope, its own or its node's.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<PodDigest>> {
        let key = ObjectRef::new(name).within(namespace);
        let watches = self.read();
        let own = [
            Scope::Namespace(namespace.to_string()),
            Scope::Pod(namespace.to_string(), name.to_string()),
        ];
        if let Some(pod) = own
            .iter()
            .find_map(|scope| watches.get(scope).and_then(|w| w.store.get(&key)))
        {
            return Some(pod);
        }
        watches
            .iter()
            .filter(|(scope, _)| matches!(scope, Scope::Node(_)))
            .find_map(|(_, w)| w.store.get(&key))
    }

    /// Every pod's metadata in the operator's scope, read from the API server by pages, one
    /// page at a time (for the sweep, which looks for leftovers outside the watched scopes).
    pub async fn each_page(
        &self,
        mut page: impl FnMut(Vec<Arc<PartialObjectMeta<Pod>>>),
    ) -> Result<(), kube::Error> {
        let api =
            decoded::<PartialObjectMeta<Pod>>(&self.inner.client, self.inner.limit.as_deref());
        let mut params = ListParams::default().limit(LIST_PAGE_FOR_SWEEP);
        let refusals = &self.inner.ready.refusals;
        loop {
            // Read one at a time: one pod a tenant stored out of range never fails a page.
            let list = api.list(&params).await?;
            let next = list.metadata.continue_.clone().filter(|c| !c.is_empty());
            let items = readable_items("pods", &(), refusals, list.items);
            page(items.into_iter().map(Arc::new).collect());
            match next {
                Some(token) => params = params.continue_token(&token),
                None => return Ok(()),
            }
        }
    }

    fn start(&self, scope: &Scope) -> ScopeWatch {
        let inner = &self.inner;
        let (store, writer) = reflector::store::<PodDigest>();
        let (synced_tx, synced) = watch::channel(false);
        let (api, config, window, to_trigger): (_, _, _, ToTrigger<PodDigest>) = match scope {
            Scope::Namespace(ns) => (
                Api::<Decoded<PodDigest>>::namespaced(inner.client.clone(), ns),
                list_from_watch_cache(),
                Some(inner.window.clone()),
                Box::new(|_: &watcher::Event<PodDigest>| None),
            ),
            Scope::Pod(ns, name) => (
                Api::<Decoded<PodDigest>>::namespaced(inner.client.clone(), ns),
                list_from_watch_cache().fields(&format!("metadata.name={name}")),
                None,
                Box::new(|_: &watcher::Event<PodDigest>| None),
            ),
            Scope::Node(node) => {
                let node = node.clone();
                let evicted = inner.evicted.clone();
                (
                    decoded::<PodDigest>(&inner.client, inner.limit.as_deref()),
                    list_from_watch_cache().fields(&format!("spec.nodeName={node}")),
                    None,
                    Box::new(move |event: &watcher::Event<PodDigest>| match event {
                        watcher::Event::Delete(pod) => {
                            if pod.evicted_through_eviction_api()
                                && let Some(counter) = evicted.get()
                            {
                                counter.inc();
                            }
                            Some(NodeTrigger::Node(node.clone()))
                        }
                        watcher::Event::Apply(_) | watcher::Event::InitDone => {
                            Some(NodeTrigger::Node(node.clone()))
                        }
                        watcher::Event::Init | watcher::Event::InitApply(_) => None,
                    }),
                )
            }
        };
        let mut on_event = hand_on(store.clone(), window, inner.drain.clone(), to_trigger);
        let task = reflect(
            "pods",
            api,
            config,
            writer,
            inner.ready.clone(),
            move |event: watcher::Event<PodDigest>| {
                // Synced before anything is handed on: whoever a trigger wakes reads a store
                // that says it is complete.
                if matches!(event, watcher::Event::InitDone) {
                    synced_tx.send_replace(true);
                }
                on_event(event);
            },
        );
        ScopeWatch {
            store,
            synced,
            task: Some(task),
        }
    }
}

/// Pods per page of the sweep's list.
const LIST_PAGE_FOR_SWEEP: u32 = 500;

#[cfg(test)]
impl Pods {
    /// A cache holding `pods`, each in its namespace's scope, with no watch behind it (every
    /// request of its client fails).
    pub fn holding(pods: Vec<PodDigest>) -> Pods {
        let service = tower::service_fn(|_: http::Request<kube::client::Body>| async {
            Err::<http::Response<kube::client::Body>, _>(std::io::Error::other("no API server"))
        });
        let client = Client::new(service, "default");
        let (window, _) = tokio::sync::mpsc::unbounded_channel();
        let (drain, _) = tokio::sync::mpsc::unbounded_channel();
        let cache = Pods::new(&client, Arc::default(), None, window, drain);
        let mut by_ns: HashMap<String, Vec<PodDigest>> = HashMap::new();
        for pod in pods {
            let ns = pod.metadata.namespace.clone().unwrap_or_default();
            by_ns.entry(ns).or_default().push(pod);
        }
        let mut watches = cache.write();
        for (ns, pods) in by_ns {
            let (store, mut writer) = reflector::store();
            writer.apply_watcher_event(&watcher::Event::Init);
            for pod in pods {
                writer.apply_watcher_event(&watcher::Event::InitApply(pod));
            }
            writer.apply_watcher_event(&watcher::Event::InitDone);
            let (_, synced) = watch::channel(true);
            watches.insert(
                Scope::Namespace(ns),
                ScopeWatch {
                    store,
                    synced,
                    task: None,
                },
            );
        }
        drop(watches);
        cache
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ns: &str, name: &str, node: Option<&str>) -> PodDigest {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": ns, "uid": format!("{ns}-{name}")},
            "spec": {"nodeName": node},
        }))
        .unwrap()
    }

    fn names(pods: Vec<Arc<PodDigest>>) -> Vec<String> {
        let mut n: Vec<String> = pods
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect();
        n.sort();
        n
    }

    #[tokio::test]
    async fn pods_are_found_by_namespace_by_node_and_by_name() {
        let cache = Pods::holding(vec![
            pod("shop", "a", Some("n1")),
            pod("shop", "b", None),
            pod("ci", "c", Some("n1")),
        ]);
        assert_eq!(names(cache.in_namespace("shop")), ["a", "b"]);
        assert_eq!(names(cache.on_node("n1")), ["a", "c"]);
        assert!(cache.on_node("n2").is_empty());
        assert!(cache.in_namespace("other").is_empty());
        assert!(cache.get("ci", "c").is_some());
        assert!(cache.get("shop", "c").is_none());
    }

    #[tokio::test]
    async fn a_released_scope_forgets_its_pods_and_retain_keeps_only_what_it_is_told() {
        let cache = Pods::holding(vec![pod("shop", "a", Some("n1")), pod("ci", "c", None)]);
        cache.release(&Scope::Namespace("shop".into()));
        assert!(cache.in_namespace("shop").is_empty());
        assert!(cache.get("shop", "a").is_none());
        cache.retain(|scope| *scope != Scope::Namespace("ci".into()));
        assert!(cache.scopes().is_empty());
    }
}
