//! What wakes the window controller: each watched change as the windows it concerns
//! (decided by [`super::triggers`]), and the Karpenter NodeClaim watch only the window
//! controller needs beside the shared caches.

use std::collections::{BTreeMap, BTreeSet};

use futures::stream::BoxStream;
use futures::{Stream, StreamExt, future};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use std::sync::Arc;
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};
use tokio::task::JoinHandle;
use tracing::info;

use super::changes::{self, Change, Changes};
use super::triggers::{PdbTriggers, windows_for, windows_of_pods};
use crate::k8s::decoded::Decoded;
use crate::resources::{PodDigest, TestWindow};
use crate::runtime::caches::reflect;
use crate::runtime::reflect::Source;
use crate::runtime::{Caches, Pods, Readiness};

/// A changed pod wakes the windows that select it or wrote to it when what they read of it
/// changed, else only the windows whose own entry changed ([`changes`]).
pub fn pods(
    changed: UnboundedReceiver<Arc<PodDigest>>,
    windows: &Store<TestWindow>,
    caches: &Caches,
) -> impl Stream<Item = ObjectRef<TestWindow>> + use<> {
    let windows = windows.clone();
    let pods = caches.pods.clone();
    let mut seen = Changes::default();
    receive(changed).flat_map(move |pod| {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let stored = pods.get(&ns, &name).is_some();
        let now = stored.then(|| (changes::pod(&pod), changes::entries(&pod.metadata)));
        let present = |key: &str| {
            let (ns, name) = key.split_once('/').unwrap_or_default();
            pods.get(ns, name).is_some()
        };
        let change = seen.change(format!("{ns}/{name}"), now, present);
        let refs = if change.shared {
            windows_for(&windows, Some(&ns), pod.labels(), &change.windows)
        } else {
            owners(&windows, &change.windows)
        };
        futures::stream::iter(refs)
    })
}

/// A node whose disruption marks or guard annotations changed (or that went) wakes the windows
/// that wrote to it and those selecting a pod on it; a change of one window's entry wakes that
/// window.
pub fn nodes(
    changed: UnboundedReceiver<Arc<Node>>,
    windows: &Store<TestWindow>,
    caches: &Caches,
) -> impl Stream<Item = ObjectRef<TestWindow>> + use<> {
    let windows = windows.clone();
    let (pods, nodes) = (caches.pods.clone(), caches.nodes.clone());
    let mut seen = Changes::default();
    receive(changed).flat_map(move |node| {
        let name = node.metadata.name.clone().unwrap_or_default();
        let stored = nodes.get(&ObjectRef::new(&name)).is_some();
        let now = stored.then(|| (changes::node(&node), changes::entries(&node.metadata)));
        let present = |key: &str| nodes.get(&ObjectRef::new(key)).is_some();
        let change = seen.change(name.clone(), now, present);
        futures::stream::iter(on_node(&windows, &pods, &name, change))
    })
}

/// The windows a change of a node (or of its NodeClaim) concerns.
fn on_node(
    windows: &Store<TestWindow>,
    pods: &Pods,
    node: &str,
    change: Change,
) -> Vec<ObjectRef<TestWindow>> {
    let mut refs = owners(windows, &change.windows);
    if change.shared {
        refs.extend(windows_of_pods(windows, &pods.on_node(node)));
    }
    refs
}

/// The windows with these UIDs (none without a look at the store when there are none).
fn owners(windows: &Store<TestWindow>, uids: &BTreeSet<String>) -> Vec<ObjectRef<TestWindow>> {
    if uids.is_empty() {
        return vec![];
    }
    windows_for(windows, None, &BTreeMap::new(), uids)
}

/// A PDB event wakes the windows it can concern ([`PdbTriggers`]).
pub fn pdbs(
    events: UnboundedReceiver<watcher::Event<PodDisruptionBudget>>,
    windows: &Store<TestWindow>,
    caches: &Caches,
) -> impl Stream<Item = ObjectRef<TestWindow>> + use<> {
    let (windows, pods) = (windows.clone(), caches.pods.clone());
    let mut triggers = PdbTriggers::default();
    receive(events)
        .filter_map(move |event| {
            let refs = triggers
                .on(&event)
                .map(|concerns| PdbTriggers::refs(concerns, &windows, &pods));
            future::ready(refs)
        })
        .flat_map(futures::stream::iter)
}

/// Watches Karpenter's NodeClaims (`ar`) into a store, one object at a time and supervised as
/// every cache is ([`reflect`]); a claim whose node, annotation or candidacy changed (or that
/// went) wakes the windows that wrote to it and those selecting a pod on its node; a change of
/// one window's entry wakes that window. The task runs until aborted.
pub fn node_claims(
    client: &Client,
    ready: &Arc<Readiness>,
    ar: &ApiResource,
    windows: &Store<TestWindow>,
    caches: &Caches,
) -> (
    Store<DynamicObject>,
    BoxStream<'static, ObjectRef<TestWindow>>,
    JoinHandle<()>,
) {
    let writer = reflector::store::Writer::new(ar.clone());
    let store = writer.as_reader();
    let windows = windows.clone();
    let pods = caches.pods.clone();
    let claims = store.clone();
    let (wake, woken) = unbounded_channel();
    let mut seen = Changes::default();
    let mut on_claim = {
        let ar = ar.clone();
        move |claim: DynamicObject| {
            let name = claim.name_any();
            let stored = |name: &str| claims.get(&ObjectRef::new_with(name, ar.clone())).is_some();
            let now = stored(&name).then(|| {
                (
                    changes::node_claim(&claim),
                    changes::entries(&claim.metadata),
                )
            });
            let change = seen.change(name, now, stored);
            let node = claim
                .data
                .pointer("/status/nodeName")
                .and_then(|v| v.as_str())
                .unwrap_or_default();
            for window in on_node(&windows, &pods, node, change) {
                // A closed receiver means the controller stopped (shutdown).
                let _ = wake.send(window);
            }
        }
    };
    let task = reflect(
        "nodeclaims",
        Source {
            api: Api::<Decoded<DynamicObject>>::all_with(client.clone(), ar),
            dt: ar.clone(),
        },
        watcher::Config::default(),
        writer,
        ready.clone(),
        move |event| match event {
            watcher::Event::Apply(claim)
            | watcher::Event::InitApply(claim)
            | watcher::Event::Delete(claim) => on_claim(claim),
            watcher::Event::Init | watcher::Event::InitDone => {}
        },
    );
    (store, receive(woken).boxed(), task)
}

/// Karpenter's NodeClaim resource, when the cluster serves it.
pub async fn discover_node_claims(client: &Client) -> Option<ApiResource> {
    let gvk = GroupVersionKind::gvk("karpenter.sh", "v1", "NodeClaim");
    match kube::discovery::pinned_kind(client, &gvk).await {
        Ok((ar, _)) => {
            info!("Karpenter NodeClaims found: their nodes' claims are protected too");
            Some(ar)
        }
        Err(_) => None,
    }
}

/// The items of a channel as a stream.
pub fn receive<T>(
    mut rx: tokio::sync::mpsc::UnboundedReceiver<T>,
) -> impl futures::Stream<Item = T> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}
