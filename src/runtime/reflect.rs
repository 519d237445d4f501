//! How the operator watches a kind into a cache: [`reflect`] (the one way a reflector is
//! started), the list page size, an [`Api`] over the operator's scope, and [`hand_on`] (what a
//! watch does with each event: the changed object to the window controller, a
//! [`NodeTrigger`] to the drain watcher). Shared by [`super::caches`] and
//! [`super::pod_scopes`].

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::NamespaceResourceScope;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc::UnboundedSender;
use tokio::task::JoinHandle;
use tracing::warn;

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

/// An Api over `scope`: one namespace, or every namespace.
pub fn scoped<K>(client: &Client, scope: Option<&str>) -> Api<K>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>,
{
    match scope {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// What a reflector can hold: a statically typed, deserializable object shared across tasks.
pub trait Cacheable:
    Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static
{
}

impl<K> Cacheable for K where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static
{
}

/// Starts a watch of `api` (with `config`) into the store `writer` feeds, each object trimmed
/// by `trim`; every event, once the store took it, is shown to `on_event`. The one way the
/// operator starts a reflector; the task runs until aborted.
pub fn reflect<K>(
    name: &'static str,
    api: Api<K>,
    config: watcher::Config,
    trim: fn(&mut K),
    writer: reflector::store::Writer<K>,
    mut on_event: impl FnMut(watcher::Event<K>) + Send + 'static,
) -> JoinHandle<()>
where
    K: Cacheable,
{
    let stream = watcher(api, config)
        .default_backoff()
        .modify(trim)
        .reflect(writer);
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(event) => on_event(event),
                Err(error) => warn!(watch = name, %error, "watch failed; retrying"),
            }
        }
    })
}

/// Objects per page of the initial list (the default is 500). A page is parsed whole before its
/// objects are stored: smaller pages lower the start-up peak, which stays resident as
/// fragmentation, for a few more round trips (100 for 10,000 pods).
const LIST_PAGE: u32 = 100;

pub fn list_in_small_pages() -> watcher::Config {
    watcher::Config::default().page_size(LIST_PAGE)
}

/// A watch whose first list is answered from the API server's watch cache
/// (`resourceVersion=0`, as client-go's informers list), in one page, for the pod scopes that
/// something waits for: a node's pods (at most the kubelet's `maxPods`) on the way from its
/// disruption to a rollout, a namespace's pods before its first window is protected.
///
/// The default, a consistent list, waits until the watch cache has caught up with etcd's
/// latest revision, which any write anywhere in the cluster moves on: measured here at 55–95 ms
/// per list against 1–3 ms from the cache (docs/benchmarks.md). The cache may be a moment
/// behind; the watch that follows starts from the version the list returned, so the store
/// catches up with every change after it. One page, because the API server answers
/// `resourceVersion=0` from the cache whole and kube does not send it with a limit: a
/// namespace's pods are parsed in one response.
pub fn list_from_watch_cache() -> watcher::Config {
    watcher::Config {
        page_size: None,
        ..watcher::Config::default()
    }
    .any_semantic()
}

/// What an event asks the drain watcher to look at, if anything.
pub type ToTrigger<K> = Box<dyn Fn(&watcher::Event<K>) -> Option<NodeTrigger> + Send>;

/// What the pod and node watches do with each event (after the store took it): hand the
/// changed object (the stored `Arc`, or the last state of a deleted one) to the window
/// controller, when it is given, and its trigger to the drain watcher.
pub fn hand_on<K>(
    store: Store<K>,
    window: Option<UnboundedSender<Arc<K>>>,
    drain: UnboundedSender<NodeTrigger>,
    to_trigger: ToTrigger<K>,
) -> impl FnMut(watcher::Event<K>) + Send + 'static
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    // Until the first list is complete nothing is handed to the window controller: its
    // reconciles wait for the caches anyway, and holding 10,000 listed pods in the channel
    // would double the start-up peak.
    let mut listed = false;
    move |event| {
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
                    return;
                }
                Arc::new(obj)
            }
            watcher::Event::Delete(obj) => Arc::new(obj),
            watcher::Event::InitDone => {
                listed = true;
                return;
            }
            watcher::Event::InitApply(_) | watcher::Event::Init => return,
        };
        if let Some(window) = &window {
            let _ = window.send(changed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_scopes_list_from_the_watch_cache_in_one_page_the_other_caches_consistently_in_pages() {
        let config = list_from_watch_cache();
        assert_eq!(config.list_semantic, watcher::ListSemantic::Any);
        assert_eq!(config.page_size, None);
        // The others: consistent, paged.
        let config = list_in_small_pages();
        assert_eq!(config.list_semantic, watcher::ListSemantic::MostRecent);
        assert_eq!(config.page_size, Some(LIST_PAGE));
    }
}
