//! The namespaces the window controller reconciles: the keys of its queue. The controller runs
//! one pass per namespace at a time, however many changes woke it ([`kube`]'s `Controller`
//! keeps one request per key), so its keys are namespaces: each is kept as a bare `Namespace`
//! object in a store of its own, added when a window or a leftover of the guard's is first seen
//! there. Namespaces are never read from the API server (no RBAC on them is needed).

use std::sync::Mutex;

use futures::Stream;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::watcher;
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};

/// The keys and the channel that wakes them.
pub struct NamespaceQueue {
    writer: Mutex<Writer<Namespace>>,
    store: Store<Namespace>,
    wake: UnboundedSender<ObjectRef<Namespace>>,
}

impl NamespaceQueue {
    /// An empty queue (its store is ready at once) and the stream of wake-ups to feed the
    /// controller.
    pub fn new() -> (Self, impl Stream<Item = ObjectRef<Namespace>>) {
        let mut writer = Writer::<Namespace>::default();
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitDone);
        let store = writer.as_reader();
        let (wake, mut woken) = unbounded_channel();
        let queue = Self {
            writer: Mutex::new(writer),
            store,
            wake,
        };
        let woken = futures::stream::poll_fn(move |cx| woken.poll_recv(cx));
        (queue, woken)
    }

    /// The store the controller reads its keys from.
    pub fn store(&self) -> Store<Namespace> {
        self.store.clone()
    }

    /// Wakes namespace `ns`, making it a key first if it is not one yet.
    pub fn wake(&self, ns: &str) {
        let key = ObjectRef::new(ns);
        if self.store.get(&key).is_none() {
            let namespace = Namespace {
                metadata: ObjectMeta {
                    name: Some(ns.to_string()),
                    ..Default::default()
                },
                ..Default::default()
            };
            let mut writer = self.writer.lock().expect("namespace keys lock");
            writer.apply_watcher_event(&watcher::Event::Apply(namespace));
        }
        // A closed receiver means the controller stopped (shutdown).
        let _ = self.wake.send(key);
    }

    /// Wakes namespace `ns` if it is a key (a window or a leftover was seen there).
    pub fn wake_known(&self, ns: &str) {
        let key = ObjectRef::new(ns);
        if self.store.get(&key).is_some() {
            let _ = self.wake.send(key);
        }
    }
}
