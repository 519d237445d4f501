//! What every namespace's pass shares: the caches (reflector stores) the plan is computed from,
//! the writer, the queue of namespaces, the Events publisher and the operator's runtime.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DynamicObject, ListParams};
use kube::runtime::events::EventType;
use kube::runtime::reflector::Store;
use kube::{Api, Resource, ResourceExt};

use super::apply::Writer;
use super::namespaces::NamespaceQueue;
use super::plan::World;
use super::{WindowArgs, WindowMetrics};
use crate::k8s::decoded::Decoded;
use crate::k8s::signals::Signal;
use crate::resources::{TestWindow, TestWindowStatus};
use crate::runtime::events::{Events, Note};
use crate::runtime::readable::readable_items;
use crate::runtime::{Pods, Runtime};

/// Reflector stores of everything the planner reads.
#[derive(Clone)]
pub struct WindowStores {
    pub windows: Store<TestWindow>,
    /// Pods, among them every pod of each namespace that has a window.
    pub pods: Pods,
    pub nodes: Store<Node>,
    pub pdbs: Store<PodDisruptionBudget>,
    pub replica_sets: Store<ReplicaSet>,
    pub deployments: Store<Deployment>,
    pub stateful_sets: Store<StatefulSet>,
    pub node_claims: Option<Store<DynamicObject>>,
}

/// Shared by all reconciles.
pub struct Context {
    pub runtime: Runtime,
    /// The window controller's flags.
    pub args: WindowArgs,
    /// The window controller's metrics.
    pub metrics: Arc<WindowMetrics>,
    /// What marks a node as being disrupted (`--drain-signals`), for the report.
    pub signals: Vec<Signal>,
    pub stores: WindowStores,
    pub writer: Writer,
    /// The namespaces reconciled, and what wakes them.
    pub queue: Arc<NamespaceQueue>,
    pub events: Events,
    /// The status last written per window UID, until the cache shows it: a reconcile that
    /// runs before the watch delivers our own write must not see the older status (it would
    /// repeat Events such as `Opened`).
    pub written: Mutex<HashMap<String, TestWindowStatus>>,
    /// Namespaces the sweep found the guard's traces in, until a pass over each found none.
    pub swept: Mutex<HashSet<String>>,
}

fn in_ns<K: Resource>(items: Vec<Arc<K>>, ns: &str) -> Vec<Arc<K>> {
    items
        .into_iter()
        .filter(|o| o.meta().namespace.as_deref() == Some(ns))
        .collect()
}

impl Context {
    /// The cached windows of namespace `ns`.
    pub fn windows_in(&self, ns: &str) -> Vec<Arc<TestWindow>> {
        in_ns(self.stores.windows.state(), ns)
    }

    /// The cached world of namespace `ns` (plus all nodes and NodeClaims).
    pub fn world(&self, ns: &str) -> World {
        let s = &self.stores;
        World {
            pods: s.pods.in_namespace(ns),
            replica_sets: in_ns(s.replica_sets.state(), ns),
            deployments: in_ns(s.deployments.state(), ns),
            stateful_sets: in_ns(s.stateful_sets.state(), ns),
            pdbs: in_ns(s.pdbs.state(), ns),
            nodes: s.nodes.state(),
            node_claims: s.node_claims.as_ref().map(Store::state),
        }
    }

    /// The windows of `ns` read from the API server rather than the cache, one at a time: a
    /// release is confirmed against them, so a window cache that lags never releases a live
    /// window's pods. Also whether one of them could not be read (reported and left out): what
    /// it selects is unknown, so the pass then releases nothing.
    pub async fn fresh_windows(
        &self,
        ns: &str,
    ) -> Result<(Vec<Arc<TestWindow>>, bool), kube::Error> {
        let api = Api::<Decoded<TestWindow>>::namespaced(self.runtime.client.clone(), ns);
        let listed = api.list(&ListParams::default()).await?;
        let (count, refusals) = (listed.items.len(), &self.runtime.ready.refusals);
        let windows = readable_items("testwindows", &(), refusals, listed.items);
        let unreadable = windows.len() < count;
        Ok((windows.into_iter().map(Arc::new).collect(), unreadable))
    }

    /// Whether a pass over `ns` has anything to look at: a window there, or traces the sweep
    /// found. A namespace with neither needs no pass, and its pods no cache.
    pub fn concerns(&self, ns: &str) -> bool {
        !self.windows_in(ns).is_empty() || self.swept.lock().expect("swept lock").contains(ns)
    }

    /// The window's status as last known: its cached status, or the one this operator wrote
    /// last when the cache has not caught up with that write yet.
    pub fn previous_status(&self, window: &TestWindow) -> TestWindowStatus {
        let cached = window.status.clone().unwrap_or_default();
        let uid = window.metadata.uid.clone().unwrap_or_default();
        let mut written = self.written.lock().expect("written lock");
        match written.get(&uid) {
            Some(status) if *status != cached => status.clone(),
            Some(_) => {
                written.remove(&uid);
                cached
            }
            None => cached,
        }
    }

    /// Records a status this operator wrote.
    pub fn remember_status(&self, window: &TestWindow, status: &TestWindowStatus) {
        let uid = window.metadata.uid.clone().unwrap_or_default();
        self.written
            .lock()
            .expect("written lock")
            .insert(uid, status.clone());
    }

    /// Forgets a window that is gone.
    pub fn forget(&self, window: &TestWindow) {
        let uid = window.metadata.uid.clone().unwrap_or_default();
        self.written.lock().expect("written lock").remove(&uid);
    }

    /// The API of a window's namespace.
    pub fn windows(&self, window: &TestWindow) -> Api<TestWindow> {
        Api::namespaced(
            self.runtime.client.clone(),
            &window.namespace().unwrap_or_default(),
        )
    }

    /// Publishes an Event on the window (queued: the reconcile does not wait for it).
    pub fn publish(
        &self,
        window: &TestWindow,
        type_: EventType,
        reason: &'static str,
        note: String,
    ) {
        let note = Note {
            type_,
            reason,
            action: "Reconcile",
            note: note.chars().take(1000).collect(),
            secondary: None,
        };
        self.events.publish(&window.object_ref(&()), note);
    }
}
