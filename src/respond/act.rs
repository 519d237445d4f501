//! The responder's I/O: the reads one decision needs from the shared caches (the pod, from a
//! watch of that one pod while the response lasts; its ReplicaSet, Deployment and node), the rollout through the shared guarded write
//! ([`Rollouts::roll_out_for_pod`], so the drain watcher, the webhook and the responder make it
//! once per (Deployment, node)), the guard's entry in `evictions/status` by server-side apply
//! under its own field manager, and the Events on the pod and the Deployment.

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod};
use kube::api::Patch;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Client};
use serde_json::json;

use super::decide::Progress;
use super::eviction::{Eviction, GROUP, VERSION};
use crate::k8s::references::reference;
use crate::resources::names::{RESPONDER, RESPONDER_FIELD_MANAGER};
use crate::rollout::restart::{self, Cause, Check, Outcome, Rollouts};
use crate::rollout::target::{NodeRef, Target};
use crate::runtime::Scope;
use crate::runtime::caches::Caches;
use crate::runtime::events::Note;
use crate::runtime::lookup;
use crate::runtime::write;

/// Action of the responder's Events.
pub const ACTION: &str = "RespondToEvictionRequest";

/// The objects one decision reads, from the shared caches.
#[derive(Default)]
pub struct Reads {
    pub pod: Option<Pod>,
    pub replica_set: Option<Arc<ReplicaSet>>,
    pub deployment: Option<Arc<Deployment>>,
    pub node: Option<Arc<Node>>,
}

/// The guard's entry in an Eviction's status, as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub heartbeat: Timestamp,
    pub expected: Timestamp,
    pub completion: Option<Timestamp>,
    pub message: String,
}

/// The pod's own cache: one pod watched while the guard responds for it.
pub fn scope(eviction: &Eviction) -> Option<Scope> {
    let ns = eviction.metadata.namespace.clone()?;
    Some(Scope::Pod(ns, eviction.pod()?.name.clone()))
}

/// Reads the pod of `eviction` from its [`scope`] and its node, ReplicaSet and Deployment from
/// the shared caches (the owner chain as the drain watcher and the webhook follow it).
pub fn read(caches: &Caches, eviction: &Eviction) -> Reads {
    let ns = eviction.metadata.namespace.as_deref().unwrap_or_default();
    let Some(pod) = eviction
        .pod()
        .and_then(|target| caches.pods.get(ns, &target.name))
        .map(|p| p.to_pod())
    else {
        return Reads::default();
    };
    let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
    let (replica_set, deployment) =
        lookup::owner_chain(&caches.replica_sets, &caches.deployments, &pod);
    Reads {
        node: node.and_then(|n| caches.nodes.get(&ObjectRef::new(n))),
        replica_set,
        deployment,
        pod: Some(pod),
    }
}

/// Writes the guard's entry of `eviction`'s `status.responders` (server-side apply, forced,
/// as [`RESPONDER_FIELD_MANAGER`]; `startTime` is the controller's and left out).
pub async fn write_entry(
    client: &Client,
    eviction: &Eviction,
    entry: &Entry,
) -> Result<(), kube::Error> {
    let ns = eviction.metadata.namespace.as_deref().unwrap_or_default();
    let name = eviction.metadata.name.as_deref().unwrap_or_default();
    Api::<Eviction>::namespaced(client.clone(), ns)
        .patch_status(
            name,
            &write::apply_forced(RESPONDER_FIELD_MANAGER),
            &Patch::Apply(body(eviction, entry)),
        )
        .await?;
    Ok(())
}

/// The server-side apply body of the guard's entry.
pub fn body(eviction: &Eviction, entry: &Entry) -> serde_json::Value {
    let mut responder = json!({
        "name": RESPONDER,
        "heartbeatTime": time(entry.heartbeat),
        "expectedCompletionTime": time(entry.expected),
        "message": entry.message.chars().take(4000).collect::<String>(),
    });
    if let Some(done) = entry.completion {
        responder["completionTime"] = json!(time(done));
    }
    json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": "Eviction",
        "metadata": {"name": eviction.metadata.name, "namespace": eviction.metadata.namespace},
        "status": {"responders": [responder]},
    })
}

/// A time as the API writes it: RFC 3339 to the second.
fn time(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The rollout target of `reads`, when the chain pod → ReplicaSet → Deployment and the node are
/// all there.
pub fn target(reads: &Reads) -> Option<Target> {
    let pod = reads.pod.as_ref()?;
    let rs = reads.replica_set.as_ref()?;
    let deployment = reads.deployment.as_ref()?;
    let node = reads.node.as_ref()?;
    Some(Target {
        namespace: pod.metadata.namespace.clone()?,
        deployment: deployment.metadata.name.clone()?,
        deployment_uid: deployment.metadata.uid.clone()?,
        replica_set: rs.metadata.name.clone()?,
        pod: pod.metadata.name.clone()?,
        node: NodeRef {
            name: node.metadata.name.clone()?,
            uid: node.metadata.uid.clone()?,
        },
    })
}

/// Rolls the Deployment of `target` out (the fresh re-check must still find a Deployment a
/// rollout can save) and reports it on the Deployment and the node. `Ok(true)` when a
/// rollout is under way (made now or already recorded for this node).
pub async fn roll_out(
    rollouts: &Rollouts,
    target: &Target,
    max_replicas: i32,
    progress: &Progress,
) -> Result<bool, restart::Error> {
    let check = |fresh: &restart::Fresh| {
        if restart::still_saves(fresh, max_replicas) {
            Check::Go(())
        } else {
            Check::Stop(())
        }
    };
    match rollouts.roll_out_for_pod(target, check).await? {
        Outcome::RolledOut(()) => {
            let cause = Cause {
                reason: "RolledOutForEvictionRequest",
                action: ACTION,
                why: format!(
                    "an EvictionRequest asks for pod {} ({})",
                    target.pod, progress.message
                ),
            };
            rollouts.report(target, &cause);
            Ok(true)
        }
        Outcome::AlreadyRolledOut => Ok(true),
        Outcome::MovedOn | Outcome::Declined(()) => Ok(false),
    }
}

/// An Event on the pod and on its Deployment (when known) at the end of a response.
pub fn report(
    rollouts: &Rollouts,
    reads: &Reads,
    eviction: &Eviction,
    warning: bool,
    reason: &'static str,
    message: &str,
) {
    let pod = match reads.pod.as_ref() {
        Some(pod) => reference(&pod.metadata, "v1", "Pod"),
        None => ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: eviction.metadata.namespace.clone(),
            name: eviction.pod().map(|p| p.name.clone()),
            uid: eviction.pod().map(|p| p.uid.clone()),
            ..Default::default()
        },
    };
    let deployment = reads
        .deployment
        .as_ref()
        .map(|d| reference(&d.metadata, "apps/v1", "Deployment"));
    let type_ = if warning {
        EventType::Warning
    } else {
        EventType::Normal
    };
    let note = format!(
        "EvictionRequest responder {RESPONDER} (Eviction {}): {message}",
        eviction.metadata.name.as_deref().unwrap_or_default()
    );
    let mut regarding = vec![(pod.clone(), deployment.clone())];
    if let Some(d) = deployment {
        regarding.push((d, Some(pod)));
    }
    for (about, secondary) in regarding {
        let event = Note {
            type_,
            reason,
            action: ACTION,
            note: note.clone(),
            secondary,
        };
        rollouts.events().publish(&about, event);
    }
}
