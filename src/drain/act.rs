//! The one place the drain watcher writes: [`Actor::act`] re-checks a rollout decision against
//! fresh reads, then patches the Deployment the way `kubectl rollout restart` does and records
//! the node on it, and says so in Events on the Deployment and the node.
//!
//! Only the Lease holder may act: [`Actor::act`] checks leadership first (see
//! [`Actor::may_act`]), right before the fresh reads and the patch.

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Api, Client};
use serde_json::json;
use tracing::{debug, warn};

use super::ROLLED_OUT_FOR_NODE;
use super::decide::{self, Decision, Facts, RolloutPlan, SkipReason, controller_of};
use super::error::Error;
use crate::k8s::signals::{self, Raised, Signal};
use crate::resources::names::{FIELD_MANAGER, RESTARTED_AT};
use crate::runtime::{Leadership, Runtime};

/// Attempts of one rollout when the Deployment keeps changing under it.
const CONFLICT_ATTEMPTS: u32 = 3;

/// Writes rollouts and Events.
#[derive(Clone)]
pub struct Actor {
    client: Client,
    recorder: Recorder,
    leader: Leadership,
}

impl Actor {
    /// An actor writing with the runtime's client and reporting Events as this replica.
    pub fn new(runtime: &Runtime) -> Self {
        Self {
            recorder: Recorder::new(runtime.client.clone(), runtime.reporter()),
            client: runtime.client.clone(),
            leader: runtime.leader.clone(),
        }
    }

    /// Whether this replica may write: it holds the leader Lease (or runs without election).
    fn may_act(&self) -> bool {
        self.leader.is_leader()
    }

    /// Re-decides `plan` from fresh reads and, if it still holds, rolls the Deployment out.
    /// Returns the fresh decision (`RollOut` means the patch was made), or `None` when this
    /// replica may not act.
    pub async fn act(
        &self,
        plan: &RolloutPlan,
        enabled: &[Signal],
        max_replicas: i32,
    ) -> Result<Option<Decision>, Error> {
        if !self.may_act() {
            return Ok(None);
        }
        // A status update of the Deployment between the read and the patch is a conflict;
        // read and decide again a few times before leaving it to the next pass.
        let mut attempt = 1;
        loop {
            match self.attempt(plan, enabled, max_replicas).await {
                Err(Error::Conflict(_)) if attempt < CONFLICT_ATTEMPTS => attempt += 1,
                other => return other.map(Some),
            }
        }
    }

    async fn attempt(
        &self,
        plan: &RolloutPlan,
        enabled: &[Signal],
        max_replicas: i32,
    ) -> Result<Decision, Error> {
        let started = std::time::Instant::now();
        let fresh = self.recheck(plan, enabled, max_replicas).await?;
        let rechecked = started.elapsed();
        match fresh {
            Some((Decision::RollOut(fresh), deployment)) => {
                if fresh.deployment_uid != plan.deployment_uid {
                    return Ok(Decision::Ignore);
                }
                self.patch(&fresh, &deployment).await?;
                debug!(
                    deployment = %fresh.deployment,
                    recheck_ms = rechecked.as_secs_f64() * 1000.0,
                    patch_ms = (started.elapsed() - rechecked).as_secs_f64() * 1000.0,
                    "rollout patched"
                );
                Ok(Decision::RollOut(fresh))
            }
            Some((decision, _)) => Ok(decision),
            None => Ok(Decision::Ignore),
        }
    }

    /// Fresh GETs of the node, the pod, its ReplicaSet and Deployment, and the blocking PDB
    /// (in parallel: one round trip), then the same decision as from the stores. `None`
    /// when the node, pod or owner chain moved on.
    async fn recheck(
        &self,
        plan: &RolloutPlan,
        enabled: &[Signal],
        max_replicas: i32,
    ) -> Result<Option<(Decision, Deployment)>, Error> {
        let read = |what| move |source| Error::Recheck { what, source };
        let ns = plan.namespace.as_str();
        // All reads at once; then the chain pod → ReplicaSet → Deployment is checked again.
        let client = &self.client;
        let (node, pod, rs, deployment, pdbs) = futures::try_join!(
            timed(async {
                Api::<Node>::all(client.clone())
                    .get_opt(&plan.node.name)
                    .await
                    .map_err(read("the node"))
            }),
            timed(async {
                Api::<Pod>::namespaced(client.clone(), ns)
                    .get_opt(&plan.pod)
                    .await
                    .map_err(read("the pod"))
            }),
            timed(async {
                Api::<ReplicaSet>::namespaced(client.clone(), ns)
                    .get_metadata_opt(&plan.replica_set)
                    .await
                    .map_err(read("the ReplicaSet"))
            }),
            timed(async {
                Api::<Deployment>::namespaced(client.clone(), ns)
                    .get_opt(&plan.deployment)
                    .await
                    .map_err(read("the Deployment"))
            }),
            // The PDB the plan found blocking, by name: a GET is read from etcd at once, where a
            // consistent LIST waits for the API server's cache to catch up (tens of
            // milliseconds after a burst of writes). If it no longer blocks, the next pass
            // decides from the caches again.
            timed(async {
                Api::<PodDisruptionBudget>::namespaced(client.clone(), ns)
                    .get_opt(&plan.pdb)
                    .await
                    .map_err(read("the PodDisruptionBudget"))
            }),
        )?;
        debug!(
            node_ms = node.1,
            pod_ms = pod.1,
            replica_set_ms = rs.1,
            deployment_ms = deployment.1,
            pdb_ms = pdbs.1,
            "re-check reads"
        );
        let (node, pod, rs, deployment, pdbs) = (node.0, pod.0, rs.0, deployment.0, pdbs.0);
        let Some(node) = node.filter(|n| n.metadata.uid.as_deref() == Some(&plan.node.uid)) else {
            return Ok(None);
        };
        if signals::disruption(&node, enabled).is_none() {
            return Ok(None);
        }
        let Some(pod) = pod.filter(|p| {
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&plan.node.name)
        }) else {
            return Ok(None);
        };
        let Some(deployment) =
            deployment.filter(|d| d.metadata.uid.as_deref() == Some(&plan.deployment_uid))
        else {
            return Ok(None);
        };
        let Some(rs) = rs else { return Ok(None) };
        let pod_owned = controller_of(&pod.metadata)
            .is_some_and(|o| o.kind == "ReplicaSet" && Some(&o.uid) == rs.metadata.uid.as_ref());
        let rs_owned = controller_of(&rs.metadata)
            .is_some_and(|o| o.kind == "Deployment" && o.uid == plan.deployment_uid);
        if !(pod_owned && rs_owned) {
            return Ok(None);
        }
        let pdbs: Vec<&PodDisruptionBudget> = pdbs.iter().collect();
        let decision = decide::decide(&Facts {
            node: &plan.node,
            pod: &pod,
            owner: decide::owner(&pod, Some(&rs.metadata), Some(&deployment)),
            pdbs: &pdbs,
            // Fresh reads: the Deployment's own marker says whether it was rolled out.
            rolled_out_before: false,
            max_replicas,
        });
        Ok(Some((decision, deployment)))
    }

    /// The `kubectl rollout restart` patch plus the node marker, as one server-side apply
    /// guarded by the resourceVersion that was re-checked.
    async fn patch(&self, plan: &RolloutPlan, deployment: &Deployment) -> Result<(), Error> {
        let previous = deployment
            .spec
            .as_ref()
            .and_then(|s| s.template.metadata.as_ref())
            .and_then(|m| m.annotations.as_ref())
            .and_then(|a| a.get(RESTARTED_AT));
        let restarted_at = restarted_at(Timestamp::now(), previous.map(String::as_str));
        let patch = json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": plan.deployment,
                "namespace": plan.namespace,
                "resourceVersion": deployment.metadata.resource_version,
                "annotations": {ROLLED_OUT_FOR_NODE: plan.node.marker()},
            },
            "spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: restarted_at}}}},
        });
        Api::<Deployment>::namespaced(self.client.clone(), &plan.namespace)
            .patch(
                &plan.deployment,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await
            .map_err(|e| match &e {
                kube::Error::Api(s) if s.code == 409 => Error::Conflict(e),
                _ => Error::Patch(e),
            })?;
        Ok(())
    }

    /// Events on the Deployment and the node after a rollout.
    pub async fn report_rollout(&self, plan: &RolloutPlan, raised: &Raised) {
        let deployment = ObjectReference {
            api_version: Some("apps/v1".into()),
            kind: Some("Deployment".into()),
            name: Some(plan.deployment.clone()),
            namespace: Some(plan.namespace.clone()),
            uid: Some(plan.deployment_uid.clone()),
            ..Default::default()
        };
        let node = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(plan.node.name.clone()),
            uid: Some(plan.node.uid.clone()),
            ..Default::default()
        };
        let why = format!(
            "node {} is being disrupted ({}) and PodDisruptionBudget {} allows no disruption \
             of pod {}",
            plan.node.name, raised.signal, plan.pdb, plan.pod
        );
        self.publish(
            &deployment,
            EventType::Normal,
            "RolledOutForDrain",
            format!("Rolled out so a new pod starts on another node first: {why}"),
            Some(node.clone()),
        )
        .await;
        self.publish(
            &node,
            EventType::Normal,
            "RolledOutDeployment",
            format!(
                "Rolled out Deployment {}/{} so that its lone pod moves without downtime: {why}",
                plan.namespace, plan.deployment
            ),
            Some(deployment),
        )
        .await;
    }

    /// The Event for a skip: a Warning when the drain stays blocked by something a person
    /// should look at.
    pub async fn report_skip(&self, subject: &ObjectReference, reason: SkipReason, node: &str) {
        let type_ = if reason.warns() {
            EventType::Warning
        } else {
            EventType::Normal
        };
        let note = format!(
            "Not rolled out although node {node} is being disrupted and a \
             PodDisruptionBudget blocks the eviction: {} ({})",
            reason.explain(),
            reason.as_str()
        );
        self.publish(subject, type_, "DrainRolloutSkipped", note, None)
            .await;
    }

    async fn publish(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        note: String,
        secondary: Option<ObjectReference>,
    ) {
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: "RolloutOnDrain".into(),
            secondary,
        };
        if let Err(error) = self.recorder.publish(&event, regarding).await {
            warn!(%error, reason, name = ?regarding.name, "could not publish an Event");
        }
    }
}

/// The `restartedAt` value: RFC 3339 to the second like kubectl, to the millisecond when the
/// second-precision value equals the previous one (it would not change the template).
fn restarted_at(now: Timestamp, previous: Option<&str>) -> String {
    let seconds = now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    if previous == Some(seconds.as_str()) {
        now.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
    } else {
        seconds
    }
}

/// A read's result with how long it took (ms), for the re-check's debug log.
async fn timed<T, E>(read: impl Future<Output = Result<T, E>>) -> Result<(T, f64), E> {
    let started = std::time::Instant::now();
    let value = read.await?;
    Ok((value, started.elapsed().as_secs_f64() * 1000.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restarted_at_is_rfc3339_to_the_second_like_kubectl() {
        let now: Timestamp = "2026-12-02T14:05:06.789Z".parse().unwrap();
        assert_eq!(restarted_at(now, None), "2026-12-02T14:05:06Z");
        assert_eq!(
            restarted_at(now, Some("2026-12-01T00:00:00Z")),
            "2026-12-02T14:05:06Z"
        );
    }

    #[test]
    fn restarted_at_still_changes_the_template_within_the_same_second() {
        let now: Timestamp = "2026-12-02T14:05:06.789Z".parse().unwrap();
        assert_eq!(
            restarted_at(now, Some("2026-12-02T14:05:06Z")),
            "2026-12-02T14:05:06.789Z"
        );
    }
}
