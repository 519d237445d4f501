//! What a namespace's windows want written: a pure function of its open windows and the
//! objects they select (pods, workloads, PDBs of the namespace, plus nodes and NodeClaims).
//!
//! The protection is computed for the namespace as a whole and applied under one field manager,
//! `disruption-guard/<namespace>`, once per object: a write carries the complete set of
//! annotations the namespace wants on an object, and an empty set is a release (server-side
//! apply then removes exactly what that manager set). Only differences from what is cached
//! become writes, so a settled namespace costs no API calls, and a window over pods another
//! window already protects needs no write of its own. Each window gets a view
//! ([`WindowPlan`]): what it selects, and what it still waits for.
//!
//! Objects an earlier version wrote with one manager per window (`disruption-guard/<uid>`) are
//! adopted: the namespace's manager applies what is wanted, then those managers are released.

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::model::labels;
pub use super::model::{
    NamespacePlan, Target, WindowFacts, WindowPlan, Workload, World, Write, is_live, selected_pods,
    workload_of,
};
use super::timing::karpenter_duration;
use crate::k8s::fields::{guard_managers, others_own_annotation, owned_annotations};
use crate::resources::PodDigest;
use crate::resources::names::{
    CA_SAFE_TO_EVICT, CA_SCALE_DOWN_DISABLED, KARPENTER_DO_NOT_DISRUPT, KARPENTER_REGISTERED,
    namespace_field_manager,
};

/// The annotations the windows want on a pod whose protection lasts `until`: the latest
/// expiry among the windows that select it and ask for `karpenterDuration` (the
/// `do-not-disrupt` value is then the duration left from the pod's start), or never
/// (`Timestamp::MAX`, the value "true") when one of them does not.
fn pod_annotations(pod: &PodDigest, until: Timestamp) -> BTreeMap<String, String> {
    let dnd = if until == Timestamp::MAX {
        "true".to_string()
    } else {
        karpenter_duration(pod.status.start_time.as_ref().map(|t| t.0), until)
    };
    pairs(&[
        (KARPENTER_DO_NOT_DISRUPT, &dnd),
        (CA_SAFE_TO_EVICT, "false"),
    ])
}

fn pairs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Everything the namespace's windows want, object by object.
#[derive(Default)]
struct Wanted {
    /// Until when each pod is to be protected ([`pod_annotations`]).
    pods: BTreeMap<String, Timestamp>,
    nodes: BTreeSet<String>,
    pdbs: BTreeMap<String, Workload>,
}

/// The objects a window selects (pods and nodes), to give it the foreign values found there.
type Selection = BTreeSet<(Target, String)>;

/// Compares what `manager` owns on an object with what it wants, and returns the write that
/// closes the gap. Keys that somebody else holds with a different value are left to them (the
/// guard never overwrites a person's value) and reported in `foreign`, by object.
fn annotate(
    target: Target,
    meta: &ObjectMeta,
    manager: &str,
    mut wanted: BTreeMap<String, String>,
    foreign: &mut BTreeMap<(Target, String), Vec<String>>,
) -> Option<Write> {
    let owned = owned_annotations(meta, manager);
    if wanted.is_empty() && owned.is_empty() {
        // Neither wanted nor written by this namespace: the common case, decided cheaply.
        return None;
    }
    let current = |k: &str| meta.annotations.as_ref().and_then(|a| a.get(k));
    let name = meta.name.clone().unwrap_or_default();
    wanted.retain(|k, v| match current(k) {
        Some(cur) if cur != v && !owned.contains(k) => {
            let kept = format!("{target:?}/{name} {k}={cur}");
            foreign
                .entry((target, name.clone()))
                .or_default()
                .push(kept);
            false
        }
        _ => true,
    });
    let settled = owned.len() == wanted.len()
        && wanted
            .iter()
            .all(|(k, v)| owned.contains(k) && current(k) == Some(v));
    (!settled).then(|| Write::annotate(target, meta, manager.to_string(), wanted))
}

/// `wanted` without the keys another manager also owns with a value other than the one wanted:
/// what an apply refused with a conflict (409) is made again with, `meta` being the object read
/// afresh with every manager's entries (the caches keep only the guard's). A person who set a
/// key the namespace also held (the same value: shared) keeps it when the namespace's wish
/// changes (a `karpenterDuration` window's duration after a window that wanted "true").
pub fn without_conflicts(
    mut wanted: BTreeMap<String, String>,
    meta: &ObjectMeta,
    manager: &str,
) -> BTreeMap<String, String> {
    let current = meta.annotations.as_ref();
    wanted.retain(|k, v| {
        current.and_then(|a| a.get(k)) == Some(v) || !others_own_annotation(meta, manager, k)
    });
    wanted
}

/// Releases of the managers of an earlier version's windows on an object, made once the
/// namespace's manager holds what is wanted there (after the pass's other writes). On a pod or
/// PDB every guard manager but the namespace's is such a window's; on a node or NodeClaim only
/// those of the namespace's `windows` are this namespace's business.
fn release_legacy(
    target: Target,
    meta: &ObjectMeta,
    namespace: &str,
    windows: &[WindowFacts],
) -> Vec<Write> {
    let legacy = |suffix: &String| match meta.namespace {
        Some(_) => suffix != namespace,
        None => windows.iter().any(|w| w.uid == *suffix),
    };
    let release = |suffix: String| {
        Write::annotate(
            target,
            meta,
            namespace_field_manager(&suffix),
            BTreeMap::new(),
        )
    };
    guard_managers(meta)
        .into_iter()
        .filter(legacy)
        .map(release)
        .collect()
}

/// Plans namespace `namespace` for its `windows` (Active or not: one that is not wants
/// nothing) against the world (the namespace's pods, workloads and PDBs, every node and
/// NodeClaim).
pub fn plan(namespace: &str, windows: &[WindowFacts], world: &World) -> NamespacePlan {
    let manager = namespace_field_manager(namespace);
    let mut wanted = Wanted::default();
    let mut views: Vec<_> = windows
        .iter()
        .map(|w| want(w, world, &mut wanted))
        .collect();
    // The wanted nodes seen, and whether Karpenter registered each (`karpenter.sh/registered`).
    let registered: BTreeMap<&str, bool> = world
        .nodes
        .iter()
        .filter_map(|n| Some((n.metadata.name.as_deref()?, labels(&n.metadata))))
        .filter(|(name, _)| wanted.nodes.contains(*name))
        .map(|(name, l)| {
            (
                name,
                l.get(KARPENTER_REGISTERED).is_some_and(|v| v == "true"),
            )
        })
        .collect();

    let mut objects = vec![];
    for pod in &world.pods {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let want = wanted
            .pods
            .get(name)
            .map(|until| pod_annotations(pod, *until));
        objects.push((Target::Pod, &pod.metadata, want.unwrap_or_default()));
    }
    let node_wants = [
        (KARPENTER_DO_NOT_DISRUPT, "true"),
        (CA_SCALE_DOWN_DISABLED, "true"),
    ];
    for node in &world.nodes {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let want = wanted.nodes.contains(name).then(|| pairs(&node_wants));
        objects.push((Target::Node, &node.metadata, want.unwrap_or_default()));
    }
    // Karpenter reads a node's `do-not-disrupt` from its NodeClaim only until the node is
    // registered, then from the Node (its `StateNode.Annotations`); a pod rarely runs on a node
    // before that (Karpenter taints it `karpenter.sh/unregistered` until then). So a NodeClaim
    // is annotated only while its node is not registered: a write per node saved, and
    // Karpenter's NodeClaim controllers not woken by it.
    for claim in world.node_claims.iter().flatten() {
        let node = claim
            .data
            .pointer("/status/nodeName")
            .and_then(|v| v.as_str());
        let node = node.unwrap_or_default();
        let registering = wanted.nodes.contains(node) && registered.get(node) != Some(&true);
        let want = registering.then(|| pairs(&[(KARPENTER_DO_NOT_DISRUPT, "true")]));
        objects.push((Target::NodeClaim, &claim.metadata, want.unwrap_or_default()));
    }

    let (mut writes, mut legacy, mut foreign) = (vec![], vec![], BTreeMap::new());
    for (target, meta, want) in objects {
        if meta.deletion_timestamp.is_none() {
            writes.extend(annotate(target, meta, &manager, want, &mut foreign));
            legacy.extend(release_legacy(target, meta, namespace, windows));
        }
    }
    for meta in super::pdbs::plan_pdbs(&manager, &wanted.pdbs, world, &mut writes) {
        legacy.extend(release_legacy(Target::Pdb, meta, namespace, windows));
    }
    writes.extend(legacy);

    for (view, selection) in &mut views {
        for (target, name) in selection.iter() {
            if *target == Target::Node && !registered.contains_key(name.as_str()) {
                view.waiting.push(format!("node {name} not seen yet"));
            }
            let kept = foreign.get(&(*target, name.clone())).into_iter().flatten();
            view.foreign_values.extend(kept.cloned());
        }
    }
    let windows = views.into_iter().map(|(view, _)| view).collect();
    NamespacePlan { writes, windows }
}

/// Adds what `window` wants to `wanted`; its view and what it selects.
fn want(window: &WindowFacts, world: &World, wanted: &mut Wanted) -> (WindowPlan, Selection) {
    let (mut view, mut selection) = (WindowPlan::default(), Selection::new());
    if !window.active {
        return (view, selection);
    }
    let selected = selected_pods(window, &world.pods);
    if window.protect.do_not_disrupt {
        let duration = window.protect.karpenter_duration;
        let ends = if duration {
            window.expires_at
        } else {
            Timestamp::MAX
        };
        for pod in &selected {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let until = wanted.pods.entry(name.clone()).or_insert(Timestamp::MIN);
            *until = (*until).max(ends);
            selection.insert((Target::Pod, name));
        }
        view.pods = selected.len() as u32;
    }
    if window.protect.nodes {
        for node in selected.iter().filter_map(|p| p.node_name()) {
            wanted.nodes.insert(node.to_string());
            view.nodes += selection.insert((Target::Node, node.to_string())) as u32;
        }
    }
    super::pdbs::want_pdbs(window, world, &selected, &mut view, &mut wanted.pdbs);
    (view, selection)
}
