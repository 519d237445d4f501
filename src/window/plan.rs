//! What one window wants written, as a list of writes: a pure function of the window and the
//! objects of its namespace (pods, workloads, PDBs) plus nodes and NodeClaims.
//!
//! A write carries the complete set of annotations the window's field manager should own on
//! an object; an empty set is a release (server-side apply then removes exactly what that
//! manager set). Only differences from what is observed become writes, so a settled window
//! costs no API calls. A window that is not Active wants nothing, which releases everything.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

pub use super::model::{
    Target, WindowFacts, WindowPlan, Workload, World, Write, is_live, selected_pods, workload_of,
};
use super::timing::karpenter_duration;
use crate::k8s::fields::{has_manager, owned_annotations};
use crate::resources::PodDigest;
use crate::resources::names::{
    CA_SAFE_TO_EVICT, CA_SCALE_DOWN_DISABLED, KARPENTER_DO_NOT_DISRUPT, KARPENTER_REGISTERED,
};

/// The annotations the window wants on a selected pod.
fn pod_annotations(window: &WindowFacts, pod: &PodDigest) -> BTreeMap<String, String> {
    let dnd = if window.protect.karpenter_duration {
        let start = pod.status.start_time.as_ref().map(|t| t.0);
        karpenter_duration(start, window.expires_at)
    } else {
        "true".to_string()
    };
    BTreeMap::from([
        (KARPENTER_DO_NOT_DISRUPT.to_string(), dnd),
        (CA_SAFE_TO_EVICT.to_string(), "false".to_string()),
    ])
}

fn node_annotations() -> BTreeMap<String, String> {
    BTreeMap::from([
        (KARPENTER_DO_NOT_DISRUPT.to_string(), "true".to_string()),
        (CA_SCALE_DOWN_DISABLED.to_string(), "true".to_string()),
    ])
}

/// Whether Karpenter registered the node (`karpenter.sh/registered: "true"`).
fn is_registered(node: &Node) -> bool {
    node.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(KARPENTER_REGISTERED))
        .is_some_and(|v| v == "true")
}

/// Compares what the window's manager owns on an object with what it wants, and returns the
/// write that closes the gap. Keys that somebody else holds with a different value are left to
/// them (the window must never overwrite a person's value) and reported.
fn annotate(
    target: Target,
    meta: &ObjectMeta,
    manager: &str,
    mut wanted: BTreeMap<String, String>,
    foreign: &mut Vec<String>,
) -> Option<Write> {
    if wanted.is_empty() && !has_manager(meta, manager) {
        // Neither wanted nor ever written by this window: the common case, decided cheaply.
        return None;
    }
    let owned = owned_annotations(meta, manager);
    let current = meta.annotations.as_ref();
    let current = |k: &str| current.and_then(|a| a.get(k));
    let name = meta.name.clone().unwrap_or_default();
    wanted.retain(|k, v| match current(k) {
        Some(cur) if cur != v && !owned.contains(k) => {
            foreign.push(format!("{target:?}/{name} {k}={cur}"));
            false
        }
        _ => true,
    });
    let settled = owned.len() == wanted.len()
        && wanted
            .iter()
            .all(|(k, v)| owned.contains(k) && current(k) == Some(v));
    (!settled).then(|| Write::Annotate {
        target,
        name,
        uid: meta.uid.clone().unwrap_or_default(),
        annotations: wanted,
    })
}

/// Plans one window against the world.
pub fn plan(window: &WindowFacts, world: &World) -> WindowPlan {
    let manager = window.manager();
    let mut out = WindowPlan::default();
    let selected = if window.active {
        selected_pods(window, &world.pods)
    } else {
        vec![]
    };
    let selected_names: BTreeSet<&str> = selected
        .iter()
        .filter_map(|p| p.metadata.name.as_deref())
        .collect();

    // Pods: the selection wants the annotations, every other live pod of the namespace that
    // the window's manager touched gets released (labels changed, window ended).
    for pod in world
        .pods
        .iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some(window.namespace.as_str()))
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let wanted = if selected_names.contains(name) && window.protect.do_not_disrupt {
            pod_annotations(window, pod)
        } else {
            BTreeMap::new()
        };
        if let Some(w) = annotate(
            Target::Pod,
            &pod.metadata,
            &manager,
            wanted,
            &mut out.foreign_values,
        ) {
            out.writes.push(w);
        }
    }
    if window.protect.do_not_disrupt {
        out.pods = selected.len() as u32;
    }

    // Nodes (and their NodeClaims) hosting a selected pod.
    let wanted_nodes: BTreeSet<&str> = if window.protect.nodes {
        selected.iter().filter_map(|p| p.node_name()).collect()
    } else {
        BTreeSet::new()
    };
    for node in world
        .nodes
        .iter()
        .filter(|n| n.metadata.deletion_timestamp.is_none())
    {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let wanted = if wanted_nodes.contains(name) {
            node_annotations()
        } else {
            BTreeMap::new()
        };
        if let Some(w) = annotate(
            Target::Node,
            &node.metadata,
            &manager,
            wanted,
            &mut out.foreign_values,
        ) {
            out.writes.push(w);
        }
    }
    // The wanted nodes seen, each with whether Karpenter registered it.
    let seen: BTreeMap<&str, bool> = world
        .nodes
        .iter()
        .filter_map(|n| Some((n.metadata.name.as_deref()?, is_registered(n))))
        .filter(|(name, _)| wanted_nodes.contains(name))
        .collect();
    for node in &wanted_nodes {
        if !seen.contains_key(node) {
            out.waiting.push(format!("node {node} not seen yet"));
        }
    }
    out.nodes = wanted_nodes.len() as u32;
    // Karpenter reads a node's `do-not-disrupt` from its NodeClaim only until the node is
    // registered, then from the Node (its `StateNode.Annotations`); a pod rarely runs on a node
    // before that (Karpenter taints it `karpenter.sh/unregistered` until then). So a NodeClaim
    // is annotated only while its node is not registered: a write per node saved, and
    // Karpenter's NodeClaim controllers not woken by it.
    let registering: BTreeSet<&str> = wanted_nodes
        .iter()
        .copied()
        .filter(|name| seen.get(name) != Some(&true))
        .collect();
    if let Some(claims) = &world.node_claims {
        for claim in claims
            .iter()
            .filter(|c| c.metadata.deletion_timestamp.is_none())
        {
            let node = claim
                .data
                .pointer("/status/nodeName")
                .and_then(|v| v.as_str());
            let wanted = if node.is_some_and(|n| registering.contains(n)) {
                BTreeMap::from([(KARPENTER_DO_NOT_DISRUPT.to_string(), "true".to_string())])
            } else {
                BTreeMap::new()
            };
            if let Some(w) = annotate(
                Target::NodeClaim,
                &claim.metadata,
                &manager,
                wanted,
                &mut out.foreign_values,
            ) {
                out.writes.push(w);
            }
        }
    }

    super::pdbs::plan_pdbs(window, world, &selected, &mut out);
    out
}
