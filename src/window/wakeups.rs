//! What wakes the window controller: each watched change as the windows it concerns
//! (decided by [`super::triggers`]), and the Karpenter NodeClaim watch only the window
//! controller needs beside the shared caches.

use std::collections::BTreeMap;

use futures::stream::BoxStream;
use futures::{Stream, StreamExt, future};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedReceiver;
use tracing::info;

use super::triggers::{NodeChanges, PdbTriggers, windows_for, windows_of_pods};
use crate::k8s::fields::{keep_own_entries, window_uids};
use crate::resources::{PodDigest, TestWindow};
use crate::runtime::Caches;

/// A changed pod wakes the windows that select it or wrote to it.
pub fn pods(
    changed: UnboundedReceiver<Arc<PodDigest>>,
    windows: &Store<TestWindow>,
) -> impl Stream<Item = ObjectRef<TestWindow>> + use<> {
    let windows = windows.clone();
    receive(changed).flat_map(move |pod| {
        futures::stream::iter(windows_for(
            &windows,
            pod.metadata.namespace.as_deref(),
            pod.labels(),
            &window_uids(&pod.metadata),
        ))
    })
}

/// A node whose disruption marks or guard annotations changed wakes the windows that wrote to
/// it and those selecting a pod on it.
pub fn nodes(
    changed: UnboundedReceiver<Arc<Node>>,
    windows: &Store<TestWindow>,
    caches: &Caches,
) -> impl Stream<Item = ObjectRef<TestWindow>> + use<> {
    let windows = windows.clone();
    let (pods, nodes) = (caches.pods.clone(), caches.nodes.clone());
    let mut node_changes = NodeChanges::default();
    receive(changed).flat_map(move |node| {
        let name = node.metadata.name.clone().unwrap_or_default();
        let stored = nodes.get(&ObjectRef::new(&name)).is_some();
        let mut refs = vec![];
        if node_changes.changed(&node, stored) {
            refs = windows_for(
                &windows,
                None,
                &BTreeMap::new(),
                &window_uids(&node.metadata),
            );
            refs.extend(windows_of_pods(&windows, &pods.on_node(&name)));
        }
        futures::stream::iter(refs)
    })
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

/// Watches Karpenter's NodeClaims (`ar`) into a store; a changed claim wakes the windows that
/// wrote to it and those selecting a pod on its node.
pub fn node_claims(
    client: &Client,
    ar: &ApiResource,
    windows: &Store<TestWindow>,
    caches: &Caches,
) -> (
    Store<DynamicObject>,
    BoxStream<'static, ObjectRef<TestWindow>>,
) {
    let writer = reflector::store::Writer::new(ar.clone());
    let store = writer.as_reader();
    let windows = windows.clone();
    let pods = caches.pods.clone();
    let stream = watcher(
        Api::<DynamicObject>::all_with(client.clone(), ar),
        watcher::Config::default(),
    )
    .default_backoff()
    .modify(|c: &mut DynamicObject| keep_own_entries(&mut c.metadata))
    .reflect(writer)
    .touched_objects()
    .filter_map(|r| future::ready(r.ok()))
    .flat_map(move |claim: DynamicObject| {
        let node = claim
            .data
            .pointer("/status/nodeName")
            .and_then(|v| v.as_str())
            .map(str::to_string);
        let mut refs = windows_for(
            &windows,
            None,
            &BTreeMap::new(),
            &window_uids(&claim.metadata),
        );
        if let Some(node) = node {
            refs.extend(windows_of_pods(&windows, &pods.on_node(&node)));
        }
        futures::stream::iter(refs)
    })
    .boxed();
    (store, stream)
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
fn receive<T>(mut rx: tokio::sync::mpsc::UnboundedReceiver<T>) -> impl futures::Stream<Item = T> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}
