//! Fixed names shared by the operator, the chart, the docs and the tests.
//!
//! They are part of the contract with users and other tools (Karpenter, Cluster Autoscaler,
//! kubectl): changing one is a breaking change.

/// API group of the `TestWindow` resource.
pub const GROUP: &str = "disruption-guard.io";
/// Finalizer that keeps a window until its protection is released.
pub const FINALIZER: &str = "disruption-guard.io/cleanup";
/// Field manager of every write the operator makes outside a window, and of a window's create
/// by the API's open.
pub const FIELD_MANAGER: &str = "disruption-guard";
/// Field manager of a window's `spec.expiresAt`, written by the API's renew.
pub const RENEW_MANAGER: &str = "disruption-guard/renew";
/// Field manager of a window's `spec.closed`, written by the API's close.
pub const CLOSE_MANAGER: &str = "disruption-guard/close";
/// Field manager of the webhook registration's `caBundle` patch. Not [`FIELD_MANAGER`], which
/// applied the whole registration in earlier versions: an apply of only the `caBundle` under
/// that manager would drop every other field it owned.
pub const CA_BUNDLE_FIELD_MANAGER: &str = "disruption-guard-webhook";
/// Field manager of the EvictionRequest responder's entry in `evictions/status`.
pub const RESPONDER_FIELD_MANAGER: &str = "disruption-guard-responder";
/// The guard's EvictionRequest responder: its name in a pod's `spec.evictionResponders` and in
/// an Eviction's status, and the label key the controller puts on the Evictions it must answer.
pub const RESPONDER: &str = "disruption-guard.io/rollout";
/// Namespace label under which the chart's MutatingAdmissionPolicy lists [`RESPONDER`] in new
/// pods (value `"true"`).
pub const RESPONDER_NAMESPACE_LABEL: &str = "disruption-guard.io/eviction-responder";
/// Label key set on every object the operator creates.
pub const MANAGED_BY_KEY: &str = "app.kubernetes.io/managed-by";
/// Label value set on every object the operator creates.
pub const MANAGED_BY_VALUE: &str = "disruption-guard";
/// Label on a guard-created PodDisruptionBudget naming the workload it covers.
pub const WORKLOAD_LABEL: &str = "disruption-guard.io/workload";

/// Karpenter: a pod or node with this annotation is not voluntarily disrupted.
pub const KARPENTER_DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";
/// Karpenter: label `"true"` on a node once its NodeClaim registered it. Until then Karpenter
/// reads a node's `do-not-disrupt` from its NodeClaim; from then on from the Node.
pub const KARPENTER_REGISTERED: &str = "karpenter.sh/registered";
/// Cluster Autoscaler: a pod with `"false"` blocks scale-down of its node.
pub const CA_SAFE_TO_EVICT: &str = "cluster-autoscaler.kubernetes.io/safe-to-evict";
/// Cluster Autoscaler: a node with `"true"` is never scaled down.
pub const CA_SCALE_DOWN_DISABLED: &str = "cluster-autoscaler.kubernetes.io/scale-down-disabled";

/// Karpenter v1 taint on a node it is disrupting (it never cordons).
pub const KARPENTER_DISRUPTED_TAINT: &str = "karpenter.sh/disrupted";
/// Cluster Autoscaler taint on a node it is about to drain.
pub const CA_TO_BE_DELETED_TAINT: &str = "ToBeDeletedByClusterAutoscaler";

/// Deployment annotation: `"false"` opts a Deployment out of rollouts on drain.
pub const ROLLOUT_ON_DRAIN: &str = "disruption-guard.io/rollout-on-drain";
/// Deployment annotation recording the node (`<name>/<uid>`) a drain-watcher rollout was made
/// for, so a restarted operator does not roll the same Deployment out again for the same node.
pub const ROLLED_OUT_FOR_NODE: &str = "disruption-guard.io/rolled-out-for-node";
/// Deployment annotation recording when the eviction interception first held back an eviction
/// of its pod on a node being disrupted (`<name>/<uid>@<RFC 3339>`): every replica, and any
/// after a restart, counts `--intercept-timeout` from there.
pub const EVICTION_HELD_SINCE: &str = "disruption-guard.io/eviction-held-since";
/// Namespace label, or pod annotation: `"false"` lets evictions of its pods through the
/// eviction interception untouched (the webhook's namespaceSelector leaves such namespaces out).
pub const INTERCEPT_EVICTIONS: &str = "disruption-guard.io/intercept-evictions";
/// Pod-template annotation `kubectl rollout restart` sets; the drain watcher sets it the same way.
pub const RESTARTED_AT: &str = "kubectl.kubernetes.io/restartedAt";

/// Field manager of the protection the windows of `namespace` want: `disruption-guard/<namespace>`.
/// Earlier versions wrote with one manager per window, `disruption-guard/<window uid>`; the
/// namespace's pass adopts and releases those.
pub fn namespace_field_manager(namespace: &str) -> String {
    format!("{FIELD_MANAGER}/{namespace}")
}

/// Whether the operator ever reads the annotation or label `key` of a cached object other than a
/// pod's labels (which selectors match): its own keys, Karpenter's, Cluster Autoscaler's,
/// `app.kubernetes.io/managed-by` and a ReplicaSet's revision. Caches keep only these, so a
/// tenant's 250 KB of annotations costs the operator nothing.
pub fn read_by_the_guard(key: &str) -> bool {
    const PREFIXES: [&str; 3] = [
        "disruption-guard.io/",
        "karpenter.sh/",
        "cluster-autoscaler.kubernetes.io/",
    ];
    PREFIXES.iter().any(|p| key.starts_with(p))
        || key == MANAGED_BY_KEY
        || key == DEPLOYMENT_REVISION
}

/// The revision the Deployment controller records on each of its ReplicaSets.
pub const DEPLOYMENT_REVISION: &str = "deployment.kubernetes.io/revision";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_field_manager_extends_the_base_manager() {
        assert_eq!(namespace_field_manager("shop"), "disruption-guard/shop");
    }
}
