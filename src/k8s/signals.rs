//! Disruption signals: how a node says it is about to be drained, and since when.
//!
//! Karpenter v1 taints `karpenter.sh/disrupted:NoSchedule` (it never cordons), Cluster
//! Autoscaler taints `ToBeDeletedByClusterAutoscaler`, `kubectl drain` and `kubectl cordon` set
//! `spec.unschedulable`, and a deleted node keeps a deletionTimestamp while finalizers run.

use std::fmt;
use std::str::FromStr;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;

use crate::resources::names::{CA_TO_BE_DELETED_TAINT, KARPENTER_DISRUPTED_TAINT};

/// One kind of disruption signal the watcher reacts to (`--drain-signals`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Signal {
    /// Taint `karpenter.sh/disrupted` (Karpenter v1).
    KarpenterDisrupted,
    /// Taint `ToBeDeletedByClusterAutoscaler`.
    ClusterAutoscaler,
    /// `spec.unschedulable` (cordon, `kubectl drain`).
    Unschedulable,
    /// `metadata.deletionTimestamp`.
    Deleting,
    /// Any other taint key (`taint:<key>`), for other autoscalers.
    Taint(String),
}

/// The default signals, as written on the command line.
pub const DEFAULT_SIGNALS: &str = "karpenter-disrupted,cluster-autoscaler,unschedulable,deleting";

impl FromStr for Signal {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "karpenter-disrupted" => Ok(Self::KarpenterDisrupted),
            "cluster-autoscaler" => Ok(Self::ClusterAutoscaler),
            "unschedulable" => Ok(Self::Unschedulable),
            "deleting" => Ok(Self::Deleting),
            other => match other.strip_prefix("taint:") {
                Some(key) if !key.is_empty() => Ok(Self::Taint(key.to_string())),
                _ => Err(format!(
                    "unknown drain signal {other:?}: expected karpenter-disrupted, \
                     cluster-autoscaler, unschedulable, deleting or taint:<key>"
                )),
            },
        }
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::KarpenterDisrupted => write!(f, "taint {KARPENTER_DISRUPTED_TAINT}"),
            Self::ClusterAutoscaler => write!(f, "taint {CA_TO_BE_DELETED_TAINT}"),
            Self::Unschedulable => f.write_str("spec.unschedulable (cordoned)"),
            Self::Deleting => f.write_str("deletionTimestamp (being deleted)"),
            Self::Taint(key) => write!(f, "taint {key}"),
        }
    }
}

impl Signal {
    fn taint_key(&self) -> Option<&str> {
        match self {
            Self::KarpenterDisrupted => Some(KARPENTER_DISRUPTED_TAINT),
            Self::ClusterAutoscaler => Some(CA_TO_BE_DELETED_TAINT),
            Self::Taint(key) => Some(key),
            Self::Unschedulable | Self::Deleting => None,
        }
    }
}

/// A signal a node carries, with the time it says it was raised (if it says).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Raised {
    /// Which signal.
    pub signal: Signal,
    /// The taint's `timeAdded` or the deletionTimestamp; `None` when the object does not tell
    /// (a cordon, or a taint without `timeAdded`).
    pub at: Option<Timestamp>,
}

/// The first of `enabled` signals that `node` carries, in the order given; `None` when the node
/// is not being disrupted.
pub fn disruption(node: &Node, enabled: &[Signal]) -> Option<Raised> {
    enabled.iter().find_map(|signal| raised(node, signal))
}

fn raised(node: &Node, signal: &Signal) -> Option<Raised> {
    let spec = node.spec.as_ref();
    if let Some(key) = signal.taint_key() {
        let taint = spec?.taints.as_ref()?.iter().find(|t| t.key == key)?;
        return Some(Raised {
            signal: signal.clone(),
            at: taint.time_added.as_ref().map(|t| t.0),
        });
    }
    match signal {
        Signal::Unschedulable => spec?.unschedulable.unwrap_or(false).then(|| Raised {
            signal: signal.clone(),
            at: None,
        }),
        Signal::Deleting => node.metadata.deletion_timestamp.as_ref().map(|t| Raised {
            signal: signal.clone(),
            at: Some(t.0),
        }),
        _ => None,
    }
}

/// When the disruption started, for the signal-to-rollout latency: the time the object states,
/// else the time the watcher first saw the signal.
pub fn since(raised: &Raised, first_observed: Timestamp) -> Timestamp {
    raised.at.unwrap_or(first_observed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(spec: serde_json::Value, meta: serde_json::Value) -> Node {
        let mut metadata = json!({"name": "n1", "uid": "u1"});
        metadata
            .as_object_mut()
            .unwrap()
            .extend(meta.as_object().unwrap().clone());
        serde_json::from_value(json!({"metadata": metadata, "spec": spec})).unwrap()
    }

    fn defaults() -> Vec<Signal> {
        DEFAULT_SIGNALS
            .split(',')
            .map(|s| s.parse().unwrap())
            .collect()
    }

    #[test]
    fn a_plain_node_is_not_being_disrupted() {
        assert_eq!(disruption(&node(json!({}), json!({})), &defaults()), None);
    }

    #[test]
    fn the_karpenter_disrupted_taint_is_a_signal_without_a_cordon() {
        let n = node(
            json!({"taints": [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]}),
            json!({}),
        );
        let raised = disruption(&n, &defaults()).unwrap();
        assert_eq!(raised.signal, Signal::KarpenterDisrupted);
        assert_eq!(raised.at, None);
    }

    #[test]
    fn the_cluster_autoscaler_taint_carries_its_time_added() {
        let n = node(
            json!({"taints": [{"key": "ToBeDeletedByClusterAutoscaler", "value": "1700000000",
                "effect": "NoSchedule", "timeAdded": "2026-01-02T03:04:05Z"}]}),
            json!({}),
        );
        let raised = disruption(&n, &defaults()).unwrap();
        assert_eq!(raised.signal, Signal::ClusterAutoscaler);
        let at: Timestamp = "2026-01-02T03:04:05Z".parse().unwrap();
        assert_eq!(raised.at, Some(at));
        assert_eq!(since(&raised, Timestamp::UNIX_EPOCH), at);
    }

    #[test]
    fn a_cordon_is_dated_by_when_the_watcher_first_saw_it() {
        let n = node(json!({"unschedulable": true}), json!({}));
        let raised = disruption(&n, &defaults()).unwrap();
        assert_eq!(raised.signal, Signal::Unschedulable);
        let seen: Timestamp = "2026-05-05T00:00:00Z".parse().unwrap();
        assert_eq!(since(&raised, seen), seen);
    }

    #[test]
    fn an_uncordoned_node_is_not_being_disrupted() {
        let n = node(json!({"unschedulable": false}), json!({}));
        assert_eq!(disruption(&n, &defaults()), None);
    }

    #[test]
    fn a_node_being_deleted_is_being_disrupted() {
        let n = node(
            json!({}),
            json!({"deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["x"]}),
        );
        assert_eq!(
            disruption(&n, &defaults()).unwrap().signal,
            Signal::Deleting
        );
    }

    #[test]
    fn unrelated_taints_are_no_signal() {
        let n = node(
            json!({"taints": [{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]}),
            json!({}),
        );
        assert_eq!(disruption(&n, &defaults()), None);
    }

    #[test]
    fn only_enabled_signals_count() {
        let n = node(json!({"unschedulable": true}), json!({}));
        assert_eq!(disruption(&n, &[Signal::KarpenterDisrupted]), None);
    }

    #[test]
    fn a_custom_taint_key_can_be_enabled() {
        let signal: Signal = "taint:example.com/draining".parse().unwrap();
        let n = node(
            json!({"taints": [{"key": "example.com/draining", "effect": "NoSchedule"}]}),
            json!({}),
        );
        assert_eq!(
            disruption(&n, std::slice::from_ref(&signal))
                .unwrap()
                .signal,
            signal
        );
    }

    #[test]
    fn unknown_signal_names_are_refused() {
        assert!("cordon".parse::<Signal>().is_err());
        assert!("taint:".parse::<Signal>().is_err());
    }
}
