//! The one rollout write, shared by the drain watcher and the eviction interception:
//! [`Rollouts::roll_out`] reads the node, the pod, its ReplicaSet and Deployment (and the PDB
//! that called for it, if any) fresh from the API server, checks the chain still holds, asks
//! the caller's pure check whether the rollout is still wanted, and then patches the
//! Deployment the way `kubectl rollout restart` does, recording the node on it
//! ([`crate::k8s::rollout::patch`]). [`Rollouts::report`] says so in Events on the Deployment
//! and the node.
//!
//! Once per (Deployment, node), whichever component or replica writes: the patch is guarded by
//! the resourceVersion that was checked, so of two writers that read the same Deployment one
//! gets a conflict, reads again, and finds the record of the other's rollout.
//!
//! The records of one disruption: [`Rollouts::record_hold`] dates the first held eviction on
//! the Deployment (the interception's timeout counts from there, on every replica and after
//! restarts), and [`Rollouts::end_records`] removes both records once their node is no longer
//! disrupted, so the next drain of that node is handled afresh.

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::events::EventType;
use kube::runtime::reflector::Store;
use kube::{Api, Client};
use tracing::debug;

use super::Runtime;
use super::events::{Events, Note};
use crate::k8s::rollout::{self, NodeRef, Target};
use crate::k8s::signals::{self, Signal};
use crate::k8s::workload::controller_of;
use crate::resources::names::FIELD_MANAGER;

/// Attempts of one rollout when the Deployment keeps changing under it.
const CONFLICT_ATTEMPTS: u32 = 3;

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
    client: Client,
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
        let mut attempt = 1;
        loop {
            match self.attempt(target, pdb, enabled, &check).await {
                Err(Error::Conflict(_)) if attempt < CONFLICT_ATTEMPTS => attempt += 1,
                other => return other,
            }
        }
    }

    async fn attempt<D>(
        &self,
        target: &Target,
        pdb: Option<&str>,
        enabled: &[Signal],
        check: &impl Fn(&Fresh) -> Check<D>,
    ) -> Result<Outcome<D>, Error> {
        let started = std::time::Instant::now();
        let Some(fresh) = self.read(target, pdb, enabled).await? else {
            return Ok(Outcome::MovedOn);
        };
        let rechecked = started.elapsed();
        let go = match check(&fresh) {
            Check::Go(go) => go,
            Check::Stop(stop) => return Ok(Outcome::Declined(stop)),
        };
        if rollout::marked_for(&fresh.deployment, &target.node) {
            return Ok(Outcome::AlreadyRolledOut);
        }
        let patch = rollout::patch(target, &fresh.deployment, Timestamp::now());
        Api::<Deployment>::namespaced(self.client.clone(), &target.namespace)
            .patch(
                &target.deployment,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await
            .map_err(|e| match &e {
                kube::Error::Api(s) if s.code == 409 => Error::Conflict(e),
                _ => Error::Patch(e),
            })?;
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
        enabled: &[Signal],
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
        if signals::disruption(&node, enabled).is_none() {
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

    /// Records on the Deployment that an eviction of its pod on `target`'s node has been held
    /// back since `since`, unless it records a hold for that node already (a fresh read; a
    /// conflict reads again). True when this call wrote it.
    pub async fn record_hold(&self, target: &Target, since: Timestamp) -> Result<bool, Error> {
        let api = Api::<Deployment>::namespaced(self.client.clone(), &target.namespace);
        let mut attempt = 1;
        loop {
            let deployment =
                api.get_opt(&target.deployment)
                    .await
                    .map_err(|source| Error::Recheck {
                        what: "the Deployment",
                        source,
                    })?;
            let Some(deployment) = deployment
                .filter(|d| d.metadata.uid.as_deref() == Some(target.deployment_uid.as_str()))
            else {
                return Ok(false);
            };
            if rollout::held_since(&deployment, &target.node).is_some() {
                return Ok(false);
            }
            let patch = rollout::hold_patch(&deployment, &target.node, since);
            match self.merge(&api, &target.deployment, &patch).await {
                Err(Error::Conflict(_)) if attempt < CONFLICT_ATTEMPTS => attempt += 1,
                other => return other.map(|()| true),
            }
        }
    }

    /// Removes the records of every cached Deployment whose node is no longer disrupted
    /// ([`rollout::ended_records`]), each after a fresh read of the Deployment and its node.
    /// Returns how many Deployments it cleared, or the last failure (the others are still
    /// cleared; a failed one is retried by the next call).
    pub async fn end_records(
        &self,
        deployments: &Store<Deployment>,
        nodes: &Store<Node>,
        enabled: &[Signal],
        in_scope: impl Fn(&str) -> bool,
    ) -> Result<usize, Error> {
        let cached = |name: &str| nodes.get(&kube::runtime::reflector::ObjectRef::new(name));
        let candidates: Vec<_> = deployments
            .state()
            .into_iter()
            .filter(|d| d.metadata.namespace.as_deref().is_some_and(&in_scope))
            .filter(|d| {
                // The cache's nodes decide which Deployments to read fresh.
                let held: Vec<_> = node_names(d)
                    .into_iter()
                    .map(|n| (n.clone(), cached(&n)))
                    .collect();
                let lookup = |name: &str| {
                    held.iter()
                        .find(|(n, _)| n == name)
                        .and_then(|(_, node)| node.as_deref())
                };
                !rollout::ended_records(d, lookup, enabled).is_empty()
            })
            .collect();
        let (mut cleared, mut failed) = (0, None);
        for cached in candidates {
            let ns = cached.metadata.namespace.clone().unwrap_or_default();
            let name = cached.metadata.name.clone().unwrap_or_default();
            match self.end_records_of(&ns, &name, enabled).await {
                Ok(true) => cleared += 1,
                Ok(false) => {}
                Err(error) => failed = Some(error),
            }
        }
        failed.map_or(Ok(cleared), Err)
    }

    /// One Deployment of [`Rollouts::end_records`], from fresh reads.
    async fn end_records_of(
        &self,
        ns: &str,
        name: &str,
        enabled: &[Signal],
    ) -> Result<bool, Error> {
        let read = |what| move |source| Error::Recheck { what, source };
        let api = Api::<Deployment>::namespaced(self.client.clone(), ns);
        let Some(deployment) = api.get_opt(name).await.map_err(read("the Deployment"))? else {
            return Ok(false);
        };
        let mut fresh_nodes = vec![];
        for node in node_names(&deployment) {
            let fresh = Api::<Node>::all(self.client.clone())
                .get_opt(&node)
                .await
                .map_err(read("the node"))?;
            fresh_nodes.push((node, fresh));
        }
        let lookup = |name: &str| {
            fresh_nodes
                .iter()
                .find(|(n, _)| n == name)
                .and_then(|(_, node)| node.as_ref())
        };
        let ended = rollout::ended_records(&deployment, lookup, enabled);
        if ended.is_empty() {
            return Ok(false);
        }
        let patch = rollout::end_patch(&deployment, &ended);
        self.merge(&api, name, &patch).await?;
        debug!(namespace = %ns, deployment = %name, records = ?ended, "disruption records ended");
        Ok(true)
    }

    /// A JSON merge patch of a Deployment's metadata as the guard's field manager.
    async fn merge(
        &self,
        api: &Api<Deployment>,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<(), Error> {
        api.patch(
            name,
            &PatchParams {
                field_manager: Some(FIELD_MANAGER.to_string()),
                ..PatchParams::default()
            },
            &Patch::Merge(patch),
        )
        .await
        .map(|_| ())
        .map_err(|e| match &e {
            kube::Error::Api(s) if s.code == 409 => Error::Conflict(e),
            _ => Error::Patch(e),
        })
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

/// The names of the nodes a Deployment's records name.
fn node_names(deployment: &Deployment) -> Vec<String> {
    rollout::recorded_nodes(deployment)
        .into_iter()
        .map(|n: NodeRef| n.name)
        .collect()
}

/// A read's result with how long it took (ms), for the re-check's debug log.
async fn timed<T, E>(read: impl Future<Output = Result<T, E>>) -> Result<(T, f64), E> {
    let started = std::time::Instant::now();
    let value = read.await?;
    Ok((value, started.elapsed().as_secs_f64() * 1000.0))
}
