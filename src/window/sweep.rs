//! The sweep: removes protection that no live window wants any more, left behind by a crash,
//! a forced finalizer removal, an uninstall or a release that went wrong. The leader runs it
//! once its caches have synced and then every [`SWEEP_INTERVAL`] while it leads.
//!
//! Pods are cached only where windows or disruptions are ([`crate::runtime::pod_scopes`]):
//! the sweep reads those, and every [`FULL_SWEEP_EVERY`]th sweep (the first one too) reads the
//! metadata of every pod in scope from the API server, page by page, for the pods of
//! namespaces no window is in any more.
//!
//! It looks at the cached objects first and lists windows (cluster-wide) after, so every field
//! manager `disruption-guard/<uid>` it finds belongs to a window that existed before the list:
//! a window of another operator (scoped to another namespace) is therefore always seen and its
//! protection kept. Field managers are removed only for windows that exist nowhere (a window
//! that exists releases its own); a guard-labelled PDB is deleted when no window that exists
//! and has not ended owns it or holds fields of it (with UID and resourceVersion
//! preconditions, so a PDB a window wrote to since the cache read is kept).

use std::collections::BTreeSet;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::core::PartialObjectMeta;
use kube::{Api, Resource, ResourceExt};
use tracing::{debug, info, warn};

use super::context::Context;
use super::plan::{Target, WindowFacts, Write};
use crate::k8s::decoded::Decoded;
use crate::k8s::fields::{holding_window_uids, window_uids};
use crate::resources::names::{MANAGED_BY_KEY, MANAGED_BY_VALUE, window_field_manager};
use crate::resources::{PodDigest, TestWindow};
use crate::runtime::Scope;

/// How often the leader sweeps. A guard PDB that no live window wants (its last window ended
/// or went away without deleting it) is deleted at most this long, plus one sweep and the
/// cache lag, after the PDB cache shows it; the window's own release normally deletes it at
/// once, so this bounds the leftovers of failures only.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(30);

/// Every how many sweeps (counting from the first) the pods of the whole scope are read.
pub const FULL_SWEEP_EVERY: u64 = 10;

/// One leftover to remove: the write and the manager to make it with.
#[derive(Debug, Clone, PartialEq)]
pub struct Leftover {
    pub namespace: String,
    pub manager: String,
    pub write: Write,
}

/// A cached pod's metadata, as a list of metadata would give it.
fn metadata_of(pod: &PodDigest) -> PartialObjectMeta<Pod> {
    PartialObjectMeta {
        types: None,
        metadata: pod.metadata.clone(),
        _phantom: std::marker::PhantomData,
    }
}

/// Annotation leftovers on objects of one kind: managers of windows not in `live`.
pub fn annotation_leftovers<K: Resource>(
    target: Target,
    objects: &[std::sync::Arc<K>],
    live: &BTreeSet<String>,
) -> Vec<Leftover> {
    let mut out = vec![];
    for obj in objects {
        let meta = obj.meta();
        for uid in window_uids(meta).difference(live) {
            out.push(Leftover {
                namespace: meta.namespace.clone().unwrap_or_default(),
                manager: window_field_manager(uid),
                write: Write::Annotate {
                    target,
                    name: meta.name.clone().unwrap_or_default(),
                    uid: meta.uid.clone().unwrap_or_default(),
                    annotations: Default::default(),
                },
            });
        }
    }
    out
}

/// Guard PDBs (labelled as ours) that no window of `wanting` owns or holds fields of;
/// `wanting` is the windows that exist and have not ended.
pub fn pdb_leftovers(
    pdbs: &[std::sync::Arc<k8s_openapi::api::policy::v1::PodDisruptionBudget>],
    wanting: &BTreeSet<String>,
) -> Vec<Leftover> {
    pdbs.iter()
        .filter(|p| p.labels().get(MANAGED_BY_KEY).map(String::as_str) == Some(MANAGED_BY_VALUE))
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            let owners = p
                .owner_references()
                .iter()
                .filter(|o| o.kind == "TestWindow")
                .map(|o| o.uid.clone());
            let mut stake: BTreeSet<String> = owners.collect();
            stake.extend(holding_window_uids(&p.metadata));
            stake.is_disjoint(wanting)
        })
        .map(|p| Leftover {
            namespace: p.namespace().unwrap_or_default(),
            manager: crate::resources::names::FIELD_MANAGER.to_string(),
            write: Write::DeletePdb {
                name: p.name_any(),
                uid: p.metadata.uid.clone().unwrap_or_default(),
                resource_version: p.resource_version().unwrap_or_default(),
            },
        })
        .collect()
}

/// Whether a cached window has ended for good: its status records Closed or Expired, or it
/// is being deleted (both are final).
pub fn has_ended(window: &TestWindow) -> bool {
    window.metadata.deletion_timestamp.is_some()
        || window.status.as_ref().is_some_and(|s| s.phase.is_final())
}

/// Runs the sweep once, over every pod in scope when `all_pods` (else the cached ones);
/// returns how many leftovers were removed.
pub async fn sweep(ctx: &Context, all_pods: bool) -> Result<usize, kube::Error> {
    let scoped = |ns: Option<&str>| ns.is_some_and(|ns| ctx.runtime.in_scope(ns));
    // Pods with a guard field manager: few, so they are kept; the others are dropped page by
    // page.
    let mut pods: Vec<std::sync::Arc<PartialObjectMeta<Pod>>> = vec![];
    let mut keep = |page: Vec<std::sync::Arc<PartialObjectMeta<Pod>>>| {
        pods.extend(page.into_iter().filter(|p| {
            scoped(p.metadata.namespace.as_deref()) && !window_uids(&p.metadata).is_empty()
        }));
    };
    if all_pods {
        ctx.stores.pods.each_page(&mut keep).await?;
    } else {
        for scope in ctx.stores.pods.scopes() {
            let cached = match &scope {
                Scope::Namespace(ns) => ctx.stores.pods.in_namespace(ns),
                Scope::Node(node) => ctx.stores.pods.on_node(node),
            };
            // Only pods a window wrote to are copied.
            let written = cached
                .iter()
                .filter(|p| !window_uids(&p.metadata).is_empty());
            keep(
                written
                    .map(|p| std::sync::Arc::new(metadata_of(p)))
                    .collect(),
            );
        }
    }
    let pdbs: Vec<_> = ctx
        .stores
        .pdbs
        .state()
        .into_iter()
        .filter(|p| scoped(p.metadata.namespace.as_deref()))
        .collect();
    let nodes = ctx.stores.nodes.state();
    let claims = ctx
        .stores
        .node_claims
        .as_ref()
        .map(|s| s.state())
        .unwrap_or_default();

    // Ended windows are read from the cache: an end is final, so a cache that lags can only
    // keep a PDB one more sweep, never delete one a window still wants.
    let ended: BTreeSet<String> = ctx
        .stores
        .windows
        .state()
        .iter()
        .filter(|w| has_ended(w))
        .filter_map(|w| w.metadata.uid.clone())
        .collect();
    // Read one at a time, and a window the operator cannot represent counts as live: its
    // protection is never swept because of what a tenant stored in it.
    let live: BTreeSet<String> =
        Api::<Decoded<PartialObjectMeta<TestWindow>>>::all(ctx.runtime.client.clone())
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter_map(|w| w.meta().uid.clone())
            .collect();
    let wanting: BTreeSet<String> = live.difference(&ended).cloned().collect();

    let mut leftovers = annotation_leftovers(Target::Pod, &pods, &live);
    leftovers.extend(annotation_leftovers(Target::Node, &nodes, &live));
    leftovers.extend(annotation_leftovers(Target::NodeClaim, &claims, &live));
    leftovers.extend(pdb_leftovers(&pdbs, &wanting));
    let mut removed = 0;
    for leftover in &leftovers {
        // Only the leader writes: a sweep that outlives the Lease stops.
        if !ctx.runtime.leader.is_leader() {
            debug!("leadership lost during a sweep, stopping it");
            break;
        }
        let view = WindowFacts {
            uid: String::new(),
            name: String::new(),
            namespace: leftover.namespace.clone(),
            selector: Default::default(),
            protect: Default::default(),
            active: false,
            expires_at: Timestamp::now(),
            admitted: None,
        };
        match ctx
            .writer
            .write(&view, &leftover.manager, &leftover.write)
            .await
        {
            Ok(_) => {
                removed += 1;
                info!(manager = %leftover.manager, write = ?leftover.write, "removed protection no window wants");
            }
            Err(err) => {
                warn!(manager = %leftover.manager, error = %err, "could not remove a leftover")
            }
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::fields::tests::entry;
    use k8s_openapi::api::core::v1::Node;
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
    use std::sync::Arc;

    #[test]
    fn only_managers_of_windows_that_exist_nowhere_are_leftovers() {
        let node = Node {
            metadata: ObjectMeta {
                name: Some("n".into()),
                uid: Some("node-uid".into()),
                managed_fields: Some(vec![
                    entry("disruption-guard/live", &["karpenter.sh/do-not-disrupt"]),
                    entry("disruption-guard/dead", &["karpenter.sh/do-not-disrupt"]),
                    entry("kubectl-annotate", &["karpenter.sh/do-not-disrupt"]),
                ]),
                ..Default::default()
            },
            ..Default::default()
        };
        let live = BTreeSet::from(["live".to_string()]);
        let found = annotation_leftovers(Target::Node, &[Arc::new(node)], &live);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].manager, "disruption-guard/dead");
        assert!(
            matches!(&found[0].write, Write::Annotate { annotations, uid, .. } if annotations.is_empty() && uid == "node-uid")
        );
    }

    fn pdb(labelled: bool, owners: &[&str]) -> Arc<PodDisruptionBudget> {
        Arc::new(PodDisruptionBudget {
            metadata: ObjectMeta {
                name: Some("api-dg".into()),
                namespace: Some("ns".into()),
                uid: Some("pdb".into()),
                labels: labelled
                    .then(|| [(MANAGED_BY_KEY.to_string(), MANAGED_BY_VALUE.to_string())].into()),
                owner_references: Some(
                    owners
                        .iter()
                        .map(|uid| OwnerReference {
                            api_version: "disruption-guard.io/v1alpha1".into(),
                            kind: "TestWindow".into(),
                            name: "w".into(),
                            uid: uid.to_string(),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    #[test]
    fn a_guard_pdb_is_a_leftover_only_when_no_owner_lives() {
        let live = BTreeSet::from(["a".to_string()]);
        assert!(pdb_leftovers(&[pdb(true, &["a", "dead"])], &live).is_empty());
        assert_eq!(pdb_leftovers(&[pdb(true, &["dead"])], &live).len(), 1);
        assert_eq!(pdb_leftovers(&[pdb(true, &[])], &live).len(), 1);
        assert!(
            pdb_leftovers(&[pdb(false, &["dead"])], &live).is_empty(),
            "a user's PDB is never touched"
        );
    }

    #[test]
    fn a_guard_pdb_a_live_window_holds_fields_of_is_kept_and_a_shell_is_a_leftover() {
        let live = BTreeSet::from(["a".to_string()]);
        // No ownerReference left, but a's manager still holds fields: a wants it.
        let mut held = (*pdb(true, &[])).clone();
        held.metadata.managed_fields = Some(vec![crate::k8s::fields::tests::entry_with(
            "disruption-guard/a",
            serde_json::json!({"f:spec": {"f:maxUnavailable": {}}}),
        )]);
        assert!(pdb_leftovers(&[Arc::new(held)], &live).is_empty());
        // Issue 16's empty PDB, still labelled by the shared manager: found and deleted with
        // UID and resourceVersion preconditions.
        let mut shell = (*pdb(true, &[])).clone();
        shell.metadata.resource_version = Some("7".into());
        let found = pdb_leftovers(&[Arc::new(shell)], &live);
        assert_eq!(
            found[0].write,
            Write::DeletePdb {
                name: "api-dg".into(),
                uid: "pdb".into(),
                resource_version: "7".into()
            }
        );
    }

    #[test]
    fn windows_that_ended_want_no_pdb() {
        use crate::resources::{Phase, TestWindowStatus};
        let mut w: TestWindow = serde_json::from_value(serde_json::json!({
            "apiVersion": "disruption-guard.io/v1alpha1", "kind": "TestWindow",
            "metadata": {"name": "w", "namespace": "ns", "uid": "a"},
            "spec": {"selector": {}, "ttl": "10m"}
        }))
        .unwrap();
        assert!(!has_ended(&w), "no status yet");
        w.status = Some(TestWindowStatus {
            phase: Phase::Active,
            ..Default::default()
        });
        assert!(!has_ended(&w));
        w.status = Some(TestWindowStatus {
            phase: Phase::Closed,
            ..Default::default()
        });
        assert!(has_ended(&w));

        // An owner that exists but ended keeps nothing; a live owner next to it keeps it.
        let wanting = BTreeSet::from(["b".to_string()]);
        assert_eq!(pdb_leftovers(&[pdb(true, &["a"])], &wanting).len(), 1);
        assert!(pdb_leftovers(&[pdb(true, &["a", "b"])], &wanting).is_empty());
    }
}
