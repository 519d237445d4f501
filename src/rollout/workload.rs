//! What a rollout can save, read from plain objects: the owner chain of a pod (pod →
//! ReplicaSet → Deployment) and whether its Deployment can replace a lone replica by
//! surging a new pod before the old one goes. The drain watcher and the eviction interception
//! both decide with these, so a Deployment is judged the same way by both.
//!
//! A Deployment can save its pod when it did not opt out (`disruption-guard.io/rollout-on-drain:
//! "false"`), runs at most `max_replicas` replicas, is not paused, and rolls with an effective
//! `maxSurge >= 1` and `maxUnavailable == 0` ([`super::strategy`]).

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::strategy::{self, Rollout};
use crate::k8s::references::{controller_of, reference};
use crate::resources::names::ROLLOUT_ON_DRAIN;

/// What owns the pod, as far as the caller's stores know.
#[derive(Debug, Clone, Copy)]
pub enum Owner<'a> {
    /// No controller: a bare pod.
    None,
    /// A ReplicaSet; its metadata and Deployment when known.
    ReplicaSet {
        /// The ReplicaSet's metadata, `None` when not (yet) in the store.
        replica_set: Option<&'a ObjectMeta>,
        /// The Deployment controlling the ReplicaSet, when there is one and it is known.
        deployment: Option<&'a Deployment>,
    },
    /// Any other controller (StatefulSet, DaemonSet, Job, …).
    Other(&'a OwnerReference),
}

/// Why a rollout cannot save a pod (or was not made). The metric label of each is its name in
/// snake case, as [`SkipReason::as_str`] gives it; `SkipReason::iter()` lists them all.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, strum::EnumIter, strum::IntoStaticStr,
)]
#[strum(serialize_all = "snake_case")]
pub enum SkipReason {
    Recreate,
    MaxSurgeZero,
    #[strum(serialize = "max_unavailable_nonzero")]
    MaxUnavailableNonZero,
    InvalidStrategy,
    Paused,
    /// The default only so that enums carrying a reason can list their variants.
    #[default]
    RolloutInProgress,
    #[strum(serialize = "statefulset")]
    StatefulSet,
    BarePod,
    #[strum(serialize = "bare_replicaset")]
    BareReplicaSet,
    OptedOut,
    TooManyReplicas,
}

impl SkipReason {
    /// Metric label value.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Whether the skip leaves a drain blocked that a person should look at (a Warning Event).
    /// Opting out and Deployments above `--max-replicas` are choices, not problems.
    pub fn warns(self) -> bool {
        !matches!(self, Self::OptedOut | Self::TooManyReplicas)
    }

    /// A sentence for the Event.
    pub fn explain(self) -> &'static str {
        match self {
            Self::Recreate => "the Recreate strategy removes the old pod before a new one starts",
            Self::MaxSurgeZero => "maxSurge resolves to 0, so no new pod can start first",
            Self::MaxUnavailableNonZero => {
                "maxUnavailable resolves above 0, so the rollout may remove the pod first"
            }
            Self::InvalidStrategy => "the rolling update parameters cannot be resolved",
            Self::Paused => "the Deployment is paused",
            Self::RolloutInProgress => "a rollout is already in progress",
            Self::StatefulSet => "StatefulSet pods keep their identity; a rollout cannot surge",
            Self::BarePod => "the pod has no controller that could start a replacement",
            Self::BareReplicaSet => "the ReplicaSet has no Deployment to roll out",
            Self::OptedOut => "the Deployment opted out with disruption-guard.io/rollout-on-drain",
            Self::TooManyReplicas => "the Deployment runs more replicas than --max-replicas",
        }
    }
}

/// Where a pod's owner chain leads.
#[derive(Debug, Clone)]
pub enum Chain<'a> {
    /// A ReplicaSet controlled by a Deployment, both known.
    Deployment {
        replica_set: &'a ObjectMeta,
        deployment: &'a Deployment,
    },
    /// A pod no rollout can replace; `subject` is what an Event about it is about.
    Skip {
        reason: SkipReason,
        subject: ObjectReference,
    },
    /// A controller that is not a rollout's business (DaemonSet, Job, …).
    NotOurs,
    /// The ReplicaSet or its Deployment is not in the stores (yet).
    Unknown,
}

/// Follows the owner chain of `pod`.
pub fn chain<'a>(pod: &Pod, owner: Owner<'a>) -> Chain<'a> {
    match owner {
        Owner::None => Chain::Skip {
            reason: SkipReason::BarePod,
            subject: reference(&pod.metadata, "v1", "Pod"),
        },
        Owner::Other(owner) if owner.kind == "StatefulSet" => Chain::Skip {
            reason: SkipReason::StatefulSet,
            subject: owner_reference(pod, owner),
        },
        Owner::Other(_) => Chain::NotOurs,
        Owner::ReplicaSet {
            replica_set: None, ..
        } => Chain::Unknown,
        Owner::ReplicaSet {
            replica_set: Some(rs),
            deployment: None,
        } => {
            if controller_of(rs).is_some_and(|o| o.kind == "Deployment") {
                // The Deployment is not in the store yet.
                Chain::Unknown
            } else {
                Chain::Skip {
                    reason: SkipReason::BareReplicaSet,
                    subject: reference(rs, "apps/v1", "ReplicaSet"),
                }
            }
        }
        Owner::ReplicaSet {
            replica_set: Some(replica_set),
            deployment: Some(deployment),
        } => Chain::Deployment {
            replica_set,
            deployment,
        },
    }
}

/// Whether a rollout of a Deployment replaces its pods surge-first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Surge {
    /// It does, for this many desired replicas.
    Saves { replicas: i32 },
    /// It cannot, for this reason.
    Cannot(SkipReason),
    /// The Deployment has no spec (never so in the API; nothing to judge).
    NoSpec,
}

/// Judges `deployment`: opt-out, replica count, pause, then strategy, in that order.
pub fn surge(deployment: &Deployment, max_replicas: i32) -> Surge {
    let opted_out = deployment
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ROLLOUT_ON_DRAIN))
        .is_some_and(|v| v == "false");
    if opted_out {
        return Surge::Cannot(SkipReason::OptedOut);
    }
    let Some(spec) = deployment.spec.as_ref() else {
        return Surge::NoSpec;
    };
    let replicas = spec.replicas.unwrap_or(1);
    if replicas > max_replicas {
        return Surge::Cannot(SkipReason::TooManyReplicas);
    }
    if spec.paused == Some(true) {
        return Surge::Cannot(SkipReason::Paused);
    }
    match strategy::resolve(spec.strategy.as_ref(), replicas) {
        Err(_) => Surge::Cannot(SkipReason::InvalidStrategy),
        Ok(Rollout::Recreate) => Surge::Cannot(SkipReason::Recreate),
        Ok(Rollout::Rolling { max_surge: 0, .. }) => Surge::Cannot(SkipReason::MaxSurgeZero),
        Ok(Rollout::Rolling {
            max_unavailable, ..
        }) if max_unavailable > 0 => Surge::Cannot(SkipReason::MaxUnavailableNonZero),
        Ok(Rollout::Rolling { .. }) => Surge::Saves { replicas },
    }
}

/// The owner chain of `pod`, given the ReplicaSet and Deployment its controller references
/// resolve to (looked up by the caller, from stores or fresh reads).
pub fn owner<'a>(
    pod: &'a Pod,
    replica_set: Option<&'a ObjectMeta>,
    deployment: Option<&'a Deployment>,
) -> Owner<'a> {
    match controller_of(&pod.metadata) {
        None => Owner::None,
        Some(o) if o.kind == "ReplicaSet" => Owner::ReplicaSet {
            replica_set,
            deployment,
        },
        Some(o) => Owner::Other(o),
    }
}

fn owner_reference(pod: &Pod, owner: &OwnerReference) -> ObjectReference {
    ObjectReference {
        api_version: Some(owner.api_version.clone()),
        kind: Some(owner.kind.clone()),
        name: Some(owner.name.clone()),
        namespace: pod.metadata.namespace.clone(),
        uid: Some(owner.uid.clone()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(spec: serde_json::Value, annotations: serde_json::Value) -> Deployment {
        let mut d = json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "d", "annotations": annotations},
            "spec": {"replicas": 1, "selector": {}, "template": {}}
        });
        d["spec"]
            .as_object_mut()
            .unwrap()
            .extend(spec.as_object().unwrap().clone());
        serde_json::from_value(d).unwrap()
    }

    #[test]
    fn a_lone_replica_with_the_default_strategy_is_saved_by_a_rollout() {
        let d = deployment(json!({}), json!({}));
        assert_eq!(surge(&d, 1), Surge::Saves { replicas: 1 });
    }

    #[test]
    fn the_checks_come_in_order_opt_out_replicas_pause_strategy() {
        let opted = json!({ROLLOUT_ON_DRAIN: "false"});
        let all_wrong = json!({"replicas": 3, "paused": true, "strategy": {"type": "Recreate"}});
        let d = deployment(all_wrong.clone(), opted);
        assert_eq!(surge(&d, 1), Surge::Cannot(SkipReason::OptedOut));
        let d = deployment(all_wrong, json!({}));
        assert_eq!(surge(&d, 1), Surge::Cannot(SkipReason::TooManyReplicas));
        let d = deployment(
            json!({"paused": true, "strategy": {"type": "Recreate"}}),
            json!({}),
        );
        assert_eq!(surge(&d, 1), Surge::Cannot(SkipReason::Paused));
        let d = deployment(json!({"strategy": {"type": "Recreate"}}), json!({}));
        assert_eq!(surge(&d, 1), Surge::Cannot(SkipReason::Recreate));
    }

    #[test]
    fn a_deployment_without_a_spec_is_not_judged() {
        let mut d = deployment(json!({}), json!({}));
        d.spec = None;
        assert_eq!(surge(&d, 1), Surge::NoSpec);
    }

    #[test]
    fn a_pod_without_a_controller_is_a_bare_pod() {
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p"}})).unwrap();
        assert!(matches!(owner(&pod, None, None), Owner::None));
        assert!(matches!(
            chain(&pod, Owner::None),
            Chain::Skip {
                reason: SkipReason::BarePod,
                ..
            }
        ));
    }
}
