//! How the operator watches a kind into a shared cache: [`reflect`] (the one way such a
//! reflector is started; the window controller's own two watches, of TestWindows and of
//! Karpenter's dynamically typed NodeClaims, are streams kube's `Controller` consumes itself, in
//! `window::run` and `window::wakeups`), the list page size, an [`Api`] over the operator's scope, and [`hand_on`] (what a
//! watch does with each event: the changed object to the window controller, a
//! [`NodeTrigger`] to the drain watcher). Shared by [`super::caches`] and
//! [`super::pod_scopes`].

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use k8s_openapi::NamespaceResourceScope;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc::UnboundedSender;
use tokio::task::JoinHandle;
use tracing::{error, warn};

use super::Readiness;
use super::readable::readable;
use crate::k8s::decoded::Decoded;
use crate::k8s::stub::Stub;
use crate::k8s::trim::Keep;

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

/// What a reflector can hold: a statically typed, deserializable object shared across tasks
/// ([`Shared`]), that can be named by its metadata alone ([`Stub`]).
pub trait Cacheable: Resource<DynamicType = ()> + Stub + Keep + Shared + DeserializeOwned {}

impl<K: Resource<DynamicType = ()> + Stub + Keep + Shared + DeserializeOwned> Cacheable for K {}

/// A value tasks share: cloned, logged, sent between threads.
pub trait Shared: Clone + std::fmt::Debug + Send + Sync + 'static {}

impl<T: Clone + std::fmt::Debug + Send + Sync + 'static> Shared for T {}

/// What a watch reads: an Api of one kind, read one object at a time ([`Decoded`]), and the
/// kind's type information (`()` for a statically typed kind, whose Api converts into this).
pub struct Source<K: Resource> {
    pub api: Api<Decoded<K>>,
    pub dt: K::DynamicType,
}

impl<K: Resource<DynamicType = ()>> From<Api<Decoded<K>>> for Source<K> {
    fn from(api: Api<Decoded<K>>) -> Self {
        Source { api, dt: () }
    }
}

/// An Api reading `K` one object at a time ([`Decoded`]), over `scope`: one namespace, or every
/// namespace.
pub fn decoded<K>(client: &Client, scope: Option<&str>) -> Api<Decoded<K>>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>,
{
    scoped::<Decoded<K>>(client, scope)
}

/// Starts a watch of `source` (with `config`) into the store `writer` feeds; every event, once
/// the store took it, is shown to `on_event`. The one way the operator starts a shared cache;
/// the task runs until aborted.
///
/// Objects are read one at a time ([`Decoded`]), each trimmed as it is decoded to what its
/// kind's caches keep ([`Keep`]): one the operator cannot represent is left out of the store and
/// reported ([`Readiness::refusals`]), and the rest of its list is served.
///
/// The task supervises its watch: should the watch panic (a parser deep inside the client, a
/// bug in `on_event`) or its stream end, that is logged as an error, `ready` says the replica
/// is not ready ([`Readiness::watch_down`]), and the watch is started again after a backoff
/// (1 s doubling to [`MAX_RESTART_DELAY`]); the store keeps its last state until the new list is
/// complete. A watch never goes silent, and no object can stop a cache for good.
pub fn reflect<K>(
    name: &'static str,
    source: impl Into<Source<K>>,
    config: watcher::Config,
    mut writer: reflector::store::Writer<K>,
    ready: Arc<Readiness>,
    mut on_event: impl FnMut(watcher::Event<K>) + Send + 'static,
) -> JoinHandle<()>
where
    K: Resource + Stub + Keep + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Clone + Eq + std::hash::Hash + Send + Sync + 'static,
{
    let Source { api, dt } = source.into();
    tokio::spawn(async move {
        let mut deaths: u32 = 0;
        loop {
            let decoded = watcher(api.clone(), config.clone()).default_backoff();
            let stream = readable(name, dt.clone(), ready.clone(), decoded);
            let mut stream = std::pin::pin!(stream);
            let why = loop {
                let event = match AssertUnwindSafe(stream.next()).catch_unwind().await {
                    Ok(Some(Ok(event))) => event,
                    Ok(Some(Err(error))) => {
                        warn!(watch = name, %error, "watch failed; retrying");
                        continue;
                    }
                    Ok(None) => break "its stream ended".to_string(),
                    Err(panic) => break panic_text(panic.as_ref()),
                };
                writer.apply_watcher_event(&event);
                let listed = matches!(event, watcher::Event::InitDone);
                if let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(|| on_event(event))) {
                    break panic_text(panic.as_ref());
                }
                if listed {
                    deaths = 0;
                    ready.watch_listed(name);
                    // A list's pages are parsed and dropped: give their memory back now, not
                    // only after start-up (a watch lists again whenever it loses its place).
                    super::memory::release_free_pages();
                }
            };
            deaths = deaths.saturating_add(1);
            let delay = restart_delay(deaths);
            error!(watch = name, reason = %why, restart_in = ?delay, "watch died; restarting it");
            ready.watch_down(name);
            tokio::time::sleep(delay).await;
        }
    })
}

/// The longest a dead watch waits before it is started again.
pub const MAX_RESTART_DELAY: Duration = Duration::from_secs(60);

/// How long to wait before the `deaths`-th restart in a row: 1 s, doubling, at most
/// [`MAX_RESTART_DELAY`].
fn restart_delay(deaths: u32) -> Duration {
    let secs = 1u64 << deaths.saturating_sub(1).min(6);
    Duration::from_secs(secs).min(MAX_RESTART_DELAY)
}

/// A panic's message, when it has one.
fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    let text = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".to_string());
    format!("panicked: {}", text.chars().take(300).collect::<String>())
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
    fn a_dead_watch_restarts_after_a_doubling_bounded_delay() {
        let delays: Vec<u64> = (1..=9).map(|n| restart_delay(n).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(restart_delay(u32::MAX), MAX_RESTART_DELAY);
    }

    #[test]
    fn a_panic_is_described_by_its_message() {
        let caught = std::panic::catch_unwind(|| panic!("bad duration {}", 7)).unwrap_err();
        assert_eq!(panic_text(caught.as_ref()), "panicked: bad duration 7");
        let caught = std::panic::catch_unwind(|| panic!("plain")).unwrap_err();
        assert_eq!(panic_text(caught.as_ref()), "panicked: plain");
    }

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
