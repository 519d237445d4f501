//! The start-up sweep: removes protection that no live window wants any more, left behind by
//! a crash, a forced finalizer removal or an uninstall.
//!
//! It looks at the cached objects first and lists windows (cluster-wide) after, so every field
//! manager `disruption-guard/<uid>` it finds belongs to a window that existed before the list:
//! a window of another operator (scoped to another namespace) is therefore always seen and its
//! protection kept. Only managers and PDBs of windows that exist nowhere are removed.

use std::collections::BTreeSet;

use jiff::Timestamp;
use kube::api::ListParams;
use kube::{Api, Resource, ResourceExt};
use tracing::{info, warn};

use super::context::Context;
use super::fields::window_uids;
use super::plan::{Target, WindowView, Write};
use crate::resources::TestWindow;
use crate::resources::names::{MANAGED_BY_KEY, MANAGED_BY_VALUE, window_field_manager};

/// One leftover to remove: the write and the manager to make it with.
#[derive(Debug, Clone, PartialEq)]
pub struct Leftover {
    pub namespace: String,
    pub manager: String,
    pub write: Write,
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

/// Guard PDBs (labelled as ours) none of whose owning windows is alive.
pub fn pdb_leftovers(
    pdbs: &[std::sync::Arc<k8s_openapi::api::policy::v1::PodDisruptionBudget>],
    live: &BTreeSet<String>,
) -> Vec<Leftover> {
    pdbs.iter()
        .filter(|p| p.labels().get(MANAGED_BY_KEY).map(String::as_str) == Some(MANAGED_BY_VALUE))
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            !p.owner_references()
                .iter()
                .any(|o| o.kind == "TestWindow" && live.contains(&o.uid))
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

/// Runs the sweep once; returns how many leftovers were removed.
pub async fn sweep(ctx: &Context) -> Result<usize, kube::Error> {
    let scoped = |ns: Option<&str>| ns.is_some_and(|ns| ctx.state.in_scope(ns));
    let pods: Vec<_> = ctx
        .stores
        .pods
        .state()
        .into_iter()
        .filter(|p| scoped(p.metadata.namespace.as_deref()))
        .collect();
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

    let live: BTreeSet<String> = Api::<TestWindow>::all(ctx.state.client.clone())
        .list_metadata(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|w| w.metadata.uid)
        .collect();

    let mut leftovers = annotation_leftovers(Target::Pod, &pods, &live);
    leftovers.extend(annotation_leftovers(Target::Node, &nodes, &live));
    leftovers.extend(annotation_leftovers(Target::NodeClaim, &claims, &live));
    leftovers.extend(pdb_leftovers(&pdbs, &live));
    let mut removed = 0;
    for leftover in &leftovers {
        let view = WindowView {
            uid: String::new(),
            name: String::new(),
            namespace: leftover.namespace.clone(),
            selector: Default::default(),
            protect: Default::default(),
            active: false,
            expires_at: Timestamp::now(),
        };
        match ctx
            .writer
            .write(&view, &leftover.manager, &leftover.write)
            .await
        {
            Ok(()) => {
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
    use crate::window::fields::tests::entry;
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
}
