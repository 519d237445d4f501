//! The I/O that restarts a Deployment: the one rollout write, shared by the drain watcher and
//! the eviction interception. [`Rollouts::roll_out`] reads the node, the pod, its ReplicaSet
//! and Deployment (and the PDB that called for it, if any) fresh from the API server, checks
//! the chain still holds, asks the caller's pure check whether the rollout is still wanted,
//! and then patches the Deployment the way `kubectl rollout restart` does, recording the node
//! on it ([`super::records::patch`]). [`Rollouts::report`] says so in Events on the Deployment
//! and the node.
//!
//! Once per (Deployment, node), whichever component or replica writes: the patch is guarded by
//! the resourceVersion that was checked, so of two writers that read the same Deployment one
//! gets a conflict, reads again, and finds the record of the other's rollout.
//!
//! The records of one disruption on the Deployment are kept by
//! [`super::record_writes`].

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::Patch;
use kube::core::PartialObjectMeta;
use kube::runtime::events::EventType;
use kube::{Api, Client};
use tracing::debug;

use super::records;
use super::target::Target;
use super::workload::{self, Chain, Surge};
use crate::k8s::references::controller_of;
use crate::k8s::signals::{self, Signal};
use crate::resources::names::FIELD_MANAGER;
use crate::runtime::Runtime;
use crate::runtime::events::{Events, Note};
use crate::runtime::write::{self, retry_conflicts};

/// What can go wrong while rolling out.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A read made right before acting failed.
    #[error("reading {what} before the rollout")]
    Recheck {
        what: &'static str,
        #[source]
        source: kube::Error,
    },
    /// The Deployment changed between the re-check and the patch (resourceVersion mismatch).
    #[error("the Deployment changed while rolling it out")]
    Conflict(#[source] kube::Error),
    /// The rollout patch failed.
    #[error("patching the Deployment")]
    Patch(#[source] kube::Error),
}

impl Error {
    /// A fixed label for metrics and Events.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Recheck { .. } => "recheck_failed",
            Self::Conflict(_) => "conflict",
            Self::Patch(_) => "patch_failed",
        }
    }

    /// Whether the Deployment changed under the write (retried after a fresh read).
    pub fn is_conflict(&self) -> bool {
        matches!(self, Self::Conflict(_))
    }

    /// A failed patch: a conflict, or another failure.
    pub(super) fn from_write(err: kube::Error) -> Self {
        if write::is_conflict(&err) {
            Self::Conflict(err)
        } else {
            Self::Patch(err)
        }
    }
}

/// The objects read fresh right before the patch; the chain node → pod → ReplicaSet →
/// Deployment holds.
pub struct Fresh {
    pub node: Node,
    pub pod: Pod,
    pub replica_set: PartialObjectMeta<ReplicaSet>,
    pub deployment: Deployment,
    /// The PDB the caller named, when it still exists.
    pub pdb: Option<PodDisruptionBudget>,
}

/// The caller's verdict on the fresh objects.
pub enum Check<D> {
    /// Roll out; `D` is returned with [`Outcome::RolledOut`].
    Go(D),
    /// Do not; `D` is returned with [`Outcome::Declined`].
    Stop(D),
}

/// What [`Rollouts::roll_out`] did.
#[derive(Debug)]
pub enum Outcome<D> {
    /// The node, the pod or its owner chain moved on: nothing to do.
    MovedOn,
    /// The Deployment records a rollout for this node already: nothing to do.
    AlreadyRolledOut,
    /// The caller's check declined.
    Declined(D),
    /// The Deployment was patched.
    RolledOut(D),
}

/// What the re-check asks of the pod's node.
#[derive(Debug, Clone, Copy)]
enum NodeMust<'a> {
    /// Still carry one of these disruption signals (a rollout for a drain).
    BeDisrupted(&'a [Signal]),
    /// Only still be the pod's node (a rollout asked for the pod).
    Exist,
}

/// Whether the fresh objects still call for a rollout: the pod's owner chain leads to a
/// Deployment that a rollout can save ([`workload::surge`] within `max_replicas`). The
/// re-check of the interception and of the EvictionRequest responder.
pub fn still_saves(fresh: &Fresh, max_replicas: i32) -> bool {
    let owner = workload::owner(
        &fresh.pod,
        Some(&fresh.replica_set.metadata),
        Some(&fresh.deployment),
    );
    matches!(workload::chain(&fresh.pod, owner), Chain::Deployment { .. })
        && matches!(
            workload::surge(&fresh.deployment, max_replicas),
            Surge::Saves { .. }
        )
}

/// Why a rollout was made, for its Events.
#[derive(Debug, Clone)]
pub struct Cause {
    /// Reason of the Event on the Deployment (`RolledOutForDrain`, …).
    pub reason: &'static str,
    /// Action of both Events (`RolloutOnDrain`, …).
    pub action: &'static str,
    /// The end of both sentences: what called for the rollout.
    pub why: String,
}

/// Makes and reports rollouts; cheap to clone.
#[derive(Clone)]
pub struct Rollouts {
    pub(super) client: Client,
    events: Events,
}

impl Rollouts {
    /// Rollouts written with the runtime's client, reported as this replica.
    pub fn new(runtime: &Runtime) -> Self {
        Self {
            client: runtime.client.clone(),
            events: Events::new(runtime),
        }
    }

    /// The Events publisher the rollouts report with.
    pub fn events(&self) -> &Events {
        &self.events
    }

    /// Re-checks `target` from fresh reads (the node still carries one of `enabled`, the pod
    /// is still on it, owned through `target`'s ReplicaSet by `target`'s Deployment), asks
    /// `check`, and rolls the Deployment out unless it records a rollout for this node. A
    /// conflict reads and checks again, a few times.
    pub async fn roll_out<D>(
        &self,
        target: &Target,
        pdb: Option<&str>,
        enabled: &[Signal],
        check: impl Fn(&Fresh) -> Check<D>,
    ) -> Result<Outcome<D>, Error> {
        let node = NodeMust::BeDisrupted(enabled);
        retry_conflicts(Error::is_conflict, |_| {
            self.attempt(target, pdb, node, &check)
        })
        .await
    }

    /// As [`Self::roll_out`], for a rollout asked for the pod itself (an EvictionRequest),
    /// not for its node: the node need not be disrupted, only still the pod's.
    pub async fn roll_out_for_pod<D>(
        &self,
        target: &Target,
        check: impl Fn(&Fresh) -> Check<D>,
    ) -> Result<Outcome<D>, Error> {
        retry_conflicts(Error::is_conflict, |_| {
            self.attempt(target, None, NodeMust::Exist, &check)
        })
        .await
    }

    async fn attempt<D>(
        &self,
        target: &Target,
        pdb: Option<&str>,
        node: NodeMust<'_>,
        check: &impl Fn(&Fresh) -> Check<D>,
    ) -> Result<Outcome<D>, Error> {
        let started = std::time::Instant::now();
        let Some(fresh) = self.read(target, pdb, node).await? else {
            return Ok(Outcome::MovedOn);
        };
        let rechecked = started.elapsed();
        let go = match check(&fresh) {
            Check::Go(go) => go,
            Check::Stop(stop) => return Ok(Outcome::Declined(stop)),
        };
        if records::marked_for(&fresh.deployment, &target.node) {
            return Ok(Outcome::AlreadyRolledOut);
        }
        let patch = records::patch(target, &fresh.deployment, Timestamp::now());
        Api::<Deployment>::namespaced(self.client.clone(), &target.namespace)
            .patch(
                &target.deployment,
                &write::apply_forced(FIELD_MANAGER),
                &Patch::Apply(&patch),
            )
            .await
            .map_err(Error::from_write)?;
        debug!(
            deployment = %target.deployment,
            recheck_ms = rechecked.as_secs_f64() * 1000.0,
            patch_ms = (started.elapsed() - rechecked).as_secs_f64() * 1000.0,
            "rollout patched"
        );
        Ok(Outcome::RolledOut(go))
    }

    /// Fresh GETs of the node, the pod, its ReplicaSet and Deployment, and the PDB if named (in
    /// parallel: one round trip). `None` when the node, pod or owner chain moved on.
    async fn read(
        &self,
        target: &Target,
        pdb: Option<&str>,
        must: NodeMust<'_>,
    ) -> Result<Option<Fresh>, Error> {
        let read = |what| move |source| Error::Recheck { what, source };
        let ns = target.namespace.as_str();
        let client = &self.client;
        let (node, pod, rs, deployment, pdb) = futures::try_join!(
            timed(async {
                Api::<Node>::all(client.clone())
                    .get_opt(&target.node.name)
                    .await
                    .map_err(read("the node"))
            }),
            timed(async {
                Api::<Pod>::namespaced(client.clone(), ns)
                    .get_opt(&target.pod)
                    .await
                    .map_err(read("the pod"))
            }),
            timed(async {
                Api::<ReplicaSet>::namespaced(client.clone(), ns)
                    .get_metadata_opt(&target.replica_set)
                    .await
                    .map_err(read("the ReplicaSet"))
            }),
            timed(async {
                Api::<Deployment>::namespaced(client.clone(), ns)
                    .get_opt(&target.deployment)
                    .await
                    .map_err(read("the Deployment"))
            }),
            // The PDB by name: a GET is read from etcd at once, where a consistent LIST waits
            // for the API server's cache to catch up (tens of milliseconds after a burst of
            // writes).
            timed(async {
                match pdb {
                    Some(name) => Api::<PodDisruptionBudget>::namespaced(client.clone(), ns)
                        .get_opt(name)
                        .await
                        .map_err(read("the PodDisruptionBudget")),
                    None => Ok(None),
                }
            }),
        )?;
        debug!(
            node_ms = node.1,
            pod_ms = pod.1,
            replica_set_ms = rs.1,
            deployment_ms = deployment.1,
            pdb_ms = pdb.1,
            "re-check reads"
        );
        let (node, pod, rs, deployment, pdb) = (node.0, pod.0, rs.0, deployment.0, pdb.0);
        let node_uid = target.node.uid.as_str();
        let Some(node) = node.filter(|n| n.metadata.uid.as_deref() == Some(node_uid)) else {
            return Ok(None);
        };
        if let NodeMust::BeDisrupted(enabled) = must
            && signals::disruption(&node, enabled).is_none()
        {
            return Ok(None);
        }
        let on_node = |p: &Pod| {
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&target.node.name)
        };
        let Some(pod) = pod.filter(on_node) else {
            return Ok(None);
        };
        let deployment_uid = target.deployment_uid.as_str();
        let Some(deployment) =
            deployment.filter(|d| d.metadata.uid.as_deref() == Some(deployment_uid))
        else {
            return Ok(None);
        };
        let Some(replica_set) = rs else {
            return Ok(None);
        };
        let pod_owned = controller_of(&pod.metadata).is_some_and(|o| {
            o.kind == "ReplicaSet" && Some(&o.uid) == replica_set.metadata.uid.as_ref()
        });
        let rs_owned = controller_of(&replica_set.metadata)
            .is_some_and(|o| o.kind == "Deployment" && o.uid == deployment_uid);
        if !(pod_owned && rs_owned) {
            return Ok(None);
        }
        Ok(Some(Fresh {
            node,
            pod,
            replica_set,
            deployment,
            pdb,
        }))
    }

    /// Events on the Deployment and the node after a rollout for `cause`.
    pub fn report(&self, target: &Target, cause: &Cause) {
        let deployment = target.deployment_reference();
        let node = target.node.reference();
        let why = &cause.why;
        let on_deployment = Note {
            type_: EventType::Normal,
            reason: cause.reason,
            action: cause.action,
            note: format!("Rolled out so a new pod starts on another node first: {why}"),
            secondary: Some(node.clone()),
        };
        self.events.publish(&deployment, on_deployment);
        let on_node = Note {
            type_: EventType::Normal,
            reason: "RolledOutDeployment",
            action: cause.action,
            note: format!(
                "Rolled out Deployment {}/{} so that its lone pod moves without downtime: {why}",
                target.namespace, target.deployment
            ),
            secondary: Some(deployment),
        };
        self.events.publish(&node, on_node);
    }
}

/// A read's result with how long it took (ms), for the re-check's debug log.
async fn timed<T, E>(read: impl Future<Output = Result<T, E>>) -> Result<(T, f64), E> {
    let started = std::time::Instant::now();
    let value = read.await?;
    Ok((value, started.elapsed().as_secs_f64() * 1000.0))
}
