//! The sweep: finds the guard's protection where no live window is, left behind by a crash, a
//! forced finalizer removal, an uninstall or a release that went wrong, and feeds those
//! namespaces to the same pass that protects and releases ([`super::reconcile`]): with no
//! window wanting anything there, the pass releases it. The leader runs it once its caches have
//! synced and then every [`SWEEP_INTERVAL`] while it leads.
//!
//! Pods are cached only where windows or disruptions are ([`crate::runtime::pod_scopes`]):
//! the sweep reads those, and every [`FULL_SWEEP_EVERY`]th sweep (the first one too) reads the
//! metadata of every pod in scope from the API server, page by page, for the pods of
//! namespaces no window is in any more.
//!
//! A guard field manager names a namespace (`disruption-guard/<namespace>`) or, written by an
//! earlier version, a window (`disruption-guard/<uid>`). The sweep looks at the cached objects
//! first and lists windows (cluster-wide) after, so every manager it finds was written before
//! the list: the manager of a window that exists is left to its namespace's pass, which adopts
//! it; any other is fed to a pass as a namespace when the operator's scope covers that name,
//! and released here otherwise when it names a window that exists nowhere (never another
//! install's namespace).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::ListParams;
use kube::core::PartialObjectMeta;
use kube::{Api, Resource};
use tracing::{debug, info, warn};

use super::context::Context;
use super::pdbs::is_guard_pdb;
use super::plan::{Target, Write};
use crate::k8s::decoded::Decoded;
use crate::k8s::fields::guard_managers;
use crate::resources::TestWindow;
use crate::resources::names::namespace_field_manager;
use crate::runtime::Scope;

/// How often the leader sweeps. Protection no live window wants (its last window ended or
/// went away without a release) is released at most this long, plus one sweep and the cache
/// lag, after the caches show it; the namespace's own pass normally releases it at once, so
/// this bounds the leftovers of failures only.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(30);

/// Every how many sweeps (counting from the first) the pods of the whole scope are read.
pub const FULL_SWEEP_EVERY: u64 = 10;

/// What one sweep found: the namespaces to pass over, and the managers of windows that exist
/// nowhere to release directly from nodes and NodeClaims (cluster-scoped: no namespace).
#[derive(Debug, Default, PartialEq)]
pub struct Found {
    pub namespaces: BTreeSet<String>,
    pub releases: Vec<Write>,
}

/// Whether a manager's suffix is shaped like a Kubernetes UID (a window of an earlier version).
fn is_uid(suffix: &str) -> bool {
    suffix.len() == 36
        && suffix.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// Sorts the guard's traces on one object (`meta`; no namespace for a node or a NodeClaim):
/// `live` the UIDs of the windows that exist, `in_scope` whether the operator serves a
/// namespace.
pub fn trace(
    target: Target,
    meta: &ObjectMeta,
    live: &BTreeSet<String>,
    in_scope: impl Fn(&str) -> bool,
    found: &mut Found,
) {
    for suffix in guard_managers(meta)
        .into_iter()
        .filter(|s| !live.contains(s))
    {
        let ns = match &meta.namespace {
            Some(ns) => in_scope(ns).then(|| ns.clone()),
            None if in_scope(&suffix) => Some(suffix),
            None if is_uid(&suffix) => {
                let manager = namespace_field_manager(&suffix);
                found
                    .releases
                    .push(Write::annotate(target, meta, manager, Default::default()));
                None
            }
            None => None,
        };
        found.namespaces.extend(ns);
    }
}

/// Runs the sweep once, over every pod in scope when `all_pods` (else the cached ones): feeds
/// the namespaces found to their pass and releases what no pass can; returns how many it found.
pub async fn sweep(ctx: &Context, all_pods: bool) -> Result<usize, kube::Error> {
    let in_scope = |ns: &str| ctx.runtime.in_scope(ns);
    // Pods the guard wrote to (few, so they are kept; the others are dropped page by page).
    let written = |meta: &&ObjectMeta| !guard_managers(meta).is_empty();
    let mut pods: Vec<ObjectMeta> = vec![];
    let pages = ctx.stores.pods.clone();
    if all_pods {
        let page = |page: Vec<Arc<PartialObjectMeta<Pod>>>| {
            pods.extend(page.iter().map(|p| &p.metadata).filter(written).cloned());
        };
        pages.each_page(page).await?;
    } else {
        for scope in pages.scopes() {
            let cached = match &scope {
                Scope::Namespace(ns) => pages.in_namespace(ns),
                Scope::Node(node) => pages.on_node(node),
                Scope::Pod(ns, name) => pages.get(ns, name).into_iter().collect(),
            };
            pods.extend(cached.iter().map(|p| &p.metadata).filter(written).cloned());
        }
    }
    let stores = &ctx.stores;
    let nodes = stores.nodes.state();
    let claims = stores
        .node_claims
        .as_ref()
        .map(|s| s.state())
        .unwrap_or_default();

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

    let mut found = Found::default();
    let objects = (pods.iter().map(|p| (Target::Pod, p)))
        .chain(nodes.iter().map(|n| (Target::Node, &n.metadata)))
        .chain(claims.iter().map(|c| (Target::NodeClaim, &c.metadata)));
    for (target, meta) in objects {
        trace(target, meta, &live, in_scope, &mut found);
    }
    for pdb in stores.pdbs.state().iter().filter(|p| is_guard_pdb(p)) {
        if let Some(ns) = pdb.metadata.namespace.as_ref().filter(|ns| in_scope(ns)) {
            found.namespaces.insert(ns.clone());
        }
    }
    for ns in &found.namespaces {
        ctx.swept.lock().expect("swept lock").insert(ns.clone());
        ctx.queue.wake(ns);
    }
    for write in &found.releases {
        // Only the leader writes: a sweep that outlives the Lease stops.
        if !ctx.runtime.leader.is_leader() {
            debug!("leadership lost during a sweep, stopping it");
            break;
        }
        match ctx.writer.write("", write).await {
            Ok(_) => {
                info!(write = %write.describe(), "removed protection of a window that exists nowhere")
            }
            Err(err) => warn!(error = %err, "could not remove a leftover"),
        }
    }
    Ok(found.namespaces.len() + found.releases.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::fields::tests::entry;
    use k8s_openapi::api::core::v1::Node;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    const DEAD: &str = "00000000-0000-0000-0000-00000000dead";
    const LIVE: &str = "00000000-0000-0000-0000-0000000011fe";

    fn node(managers: &[&str]) -> Node {
        let entries = managers
            .iter()
            .map(|m| entry(m, &["karpenter.sh/do-not-disrupt"]))
            .chain([entry("kubectl-annotate", &["karpenter.sh/do-not-disrupt"])])
            .collect();
        Node {
            metadata: ObjectMeta {
                name: Some("n".into()),
                uid: Some("node-uid".into()),
                managed_fields: Some(entries),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn a_node_feeds_the_namespaces_in_scope_and_releases_windows_that_exist_nowhere() {
        let live = BTreeSet::from([LIVE.to_string()]);
        let managers = [
            "disruption-guard/shop".to_string(),
            "disruption-guard/other-install".to_string(),
            format!("disruption-guard/{LIVE}"),
            format!("disruption-guard/{DEAD}"),
        ];
        let managers: Vec<&str> = managers.iter().map(String::as_str).collect();
        let mut found = Found::default();
        let in_scope = |ns: &str| ns == "shop";
        trace(
            Target::Node,
            &node(&managers).metadata,
            &live,
            in_scope,
            &mut found,
        );
        assert_eq!(found.namespaces, BTreeSet::from(["shop".to_string()]));
        assert_eq!(found.releases.len(), 1, "{found:?}");
        assert!(matches!(
            &found.releases[0],
            Write::Annotate { annotations, uid, manager, .. }
                if annotations.is_empty() && uid == "node-uid" && *manager == format!("disruption-guard/{DEAD}")
        ));
    }

    #[test]
    fn a_cluster_wide_install_passes_over_a_dead_windows_manager_as_a_namespace() {
        let manager = format!("disruption-guard/{DEAD}");
        let mut found = Found::default();
        trace(
            Target::Node,
            &node(&[&manager]).metadata,
            &BTreeSet::new(),
            |_| true,
            &mut found,
        );
        assert_eq!(found.namespaces, BTreeSet::from([DEAD.to_string()]));
        assert!(found.releases.is_empty());
    }

    #[test]
    fn a_pod_feeds_its_own_namespace_whatever_its_managers_name() {
        let mut pod = node(&[&format!("disruption-guard/{DEAD}"), "disruption-guard/shop"]);
        pod.metadata.namespace = Some("shop".into());
        let mut found = Found::default();
        trace(
            Target::Pod,
            &pod.metadata,
            &BTreeSet::new(),
            |ns| ns == "shop",
            &mut found,
        );
        assert_eq!(found.namespaces, BTreeSet::from(["shop".to_string()]));
        assert!(found.releases.is_empty());
        assert!(is_uid(DEAD) && !is_uid("shop") && !is_uid(&DEAD.replace('-', "x")));
    }
}
