//! What wakes the window controller: each watched change as the namespaces whose pass reads it
//! (a pod or PDB its own namespace; a node or NodeClaim the namespaces of the pods on it and
//! those whose manager wrote to it), when what a pass reads of it changed ([`changes`]); and
//! the Karpenter NodeClaim watch only the window controller needs beside the shared caches.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::task::JoinHandle;
use tracing::info;

use super::changes::{self, Changes};
use super::context::Context;
use super::namespaces::NamespaceQueue;
use crate::k8s::decoded::Decoded;
use crate::k8s::fields::guard_managers;
use crate::resources::PodDigest;
use crate::runtime::caches::reflect;
use crate::runtime::reflect::Source;
use crate::runtime::{Pods, Readiness};

/// Hands each item of `feed` to `on`, until the feed ends.
fn each<T: Send + 'static>(
    mut feed: UnboundedReceiver<T>,
    mut on: impl FnMut(T) + Send + 'static,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        while let Some(item) = feed.recv().await {
            on(item);
        }
    })
}

/// Wakes the namespace of each changed pod, until the feed ends.
pub fn pods(changed: UnboundedReceiver<Arc<PodDigest>>, ctx: Arc<Context>) -> JoinHandle<()> {
    let mut seen = Changes::default();
    each(changed, move |pod| {
        let pods = &ctx.stores.pods;
        let (ns, name) = (pod.namespace().unwrap_or_default(), pod.name_any());
        let now = pods.get(&ns, &name).is_some().then(|| changes::pod(&pod));
        let present = |key: &str| {
            let (ns, name) = key.split_once('/').unwrap_or_default();
            pods.get(ns, name).is_some()
        };
        if seen.changed(format!("{ns}/{name}"), now, present) {
            ctx.queue.wake_known(&ns);
        }
    })
}

/// Wakes the namespaces a node's change concerns, until the feed ends.
pub fn nodes(changed: UnboundedReceiver<Arc<Node>>, ctx: Arc<Context>) -> JoinHandle<()> {
    let mut seen = Changes::default();
    each(changed, move |node| {
        let present = |name: &str| ctx.stores.nodes.get(&ObjectRef::new(name)).is_some();
        let name = node.name_any();
        let now = present(&name).then(|| changes::node(&node));
        if seen.changed(name.clone(), now, present) {
            wake_node(&ctx.queue, &ctx.stores.pods, &name, &node.metadata);
        }
    })
}

/// Wakes the namespaces with a pod on `node` and those whose manager wrote to it (`meta`: the
/// node's or its NodeClaim's).
fn wake_node(queue: &NamespaceQueue, pods: &Pods, node: &str, meta: &ObjectMeta) {
    let mut namespaces = guard_managers(meta);
    if !node.is_empty() {
        namespaces.extend(pods.on_node(node).iter().filter_map(|p| p.namespace()));
    }
    for ns in namespaces {
        queue.wake_known(&ns);
    }
}

/// Wakes the namespace of each PDB that changed or went, until the feed ends.
pub fn pdbs(
    events: UnboundedReceiver<watcher::Event<PodDisruptionBudget>>,
    ctx: Arc<Context>,
) -> JoinHandle<()> {
    each(events, move |event| {
        if let watcher::Event::Apply(pdb) | watcher::Event::Delete(pdb) = event
            && let Some(ns) = pdb.namespace()
        {
            ctx.queue.wake_known(&ns);
        }
    })
}

/// Watches Karpenter's NodeClaims (`ar`) into a store, one object at a time and supervised as
/// every cache is ([`reflect`]); a claim whose node, annotation or candidacy changed (or that
/// went) wakes the namespaces its node's change would. The task runs until aborted.
pub fn node_claims(
    client: &Client,
    ready: &Arc<Readiness>,
    ar: &ApiResource,
    queue: Arc<NamespaceQueue>,
    pods: Pods,
) -> (Store<DynamicObject>, JoinHandle<()>) {
    let writer = reflector::store::Writer::new(ar.clone());
    let store = writer.as_reader();
    let (claims, claim_ar) = (store.clone(), ar.clone());
    let mut seen = Changes::default();
    let mut on_claim = move |claim: DynamicObject| {
        let stored = |name: &str| {
            claims
                .get(&ObjectRef::new_with(name, claim_ar.clone()))
                .is_some()
        };
        let name = claim.name_any();
        let now = stored(&name).then(|| changes::node_claim(&claim));
        if seen.changed(name, now, stored) {
            let node = claim
                .data
                .pointer("/status/nodeName")
                .and_then(|v| v.as_str());
            wake_node(&queue, &pods, node.unwrap_or_default(), &claim.metadata);
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
    (store, task)
}

/// Karpenter's NodeClaim resource, when the cluster serves it.
pub async fn discover_node_claims(client: &Client) -> Option<ApiResource> {
    let gvk = GroupVersionKind::gvk("karpenter.sh", "v1", "NodeClaim");
    let (ar, _) = kube::discovery::pinned_kind(client, &gvk).await.ok()?;
    info!("Karpenter NodeClaims found: their nodes' claims are protected too");
    Some(ar)
}
