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
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

pub use super::model::{
    NamespacePlan, Target, WindowFacts, WindowPlan, Workload, World, Write, is_live, selected_pods,
    workload_of,
};
use super::timing::karpenter_duration;
use crate::k8s::fields::{guard_managers, has_manager, others_own_annotation, owned_annotations};
use crate::resources::PodDigest;
use crate::resources::names::{
    CA_SAFE_TO_EVICT, CA_SCALE_DOWN_DISABLED, KARPENTER_DO_NOT_DISRUPT, KARPENTER_REGISTERED,
    namespace_field_manager,
};

/// What the windows want on one pod: `do-not-disrupt` "true" when one window wants it without
/// a duration, else the duration to the latest expiry among the windows that want one.
#[derive(Debug, Default, Clone, Copy)]
struct PodWant {
    indefinite: bool,
    latest: Option<Timestamp>,
}

impl PodWant {
    fn add(&mut self, window: &WindowFacts) {
        if window.protect.karpenter_duration {
            self.latest = self.latest.max(Some(window.expires_at));
        } else {
            self.indefinite = true;
        }
    }

    fn annotations(&self, pod: &PodDigest) -> BTreeMap<String, String> {
        let dnd = match self.latest {
            Some(expires_at) if !self.indefinite => {
                let start = pod.status.start_time.as_ref().map(|t| t.0);
                karpenter_duration(start, expires_at)
            }
            _ => "true".to_string(),
        };
        BTreeMap::from([
            (KARPENTER_DO_NOT_DISRUPT.to_string(), dnd),
            (CA_SAFE_TO_EVICT.to_string(), "false".to_string()),
        ])
    }
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

/// Everything the namespace's windows want, object by object.
#[derive(Default)]
struct Wanted {
    pods: BTreeMap<String, PodWant>,
    nodes: BTreeSet<String>,
    pdbs: BTreeMap<String, Workload>,
}

/// What each window selects, to give it the foreign values found on its objects.
struct Selection {
    pods: BTreeSet<String>,
    nodes: BTreeSet<String>,
}

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
    if wanted.is_empty() && !has_manager(meta, manager) {
        // Neither wanted nor ever written by this namespace: the common case, decided cheaply.
        return None;
    }
    let owned = owned_annotations(meta, manager);
    let current = meta.annotations.as_ref();
    let current = |k: &str| current.and_then(|a| a.get(k));
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
    (!settled).then(|| Write::Annotate {
        target,
        name,
        uid: meta.uid.clone().unwrap_or_default(),
        manager: manager.to_string(),
        annotations: wanted,
    })
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

/// Releases of the managers of an earlier version's windows on an object, once the namespace's
/// manager holds what is wanted there (it does after this pass's writes, which go first).
/// `legacy` says which of the guard's managers on the object are such windows'.
fn release_legacy(
    target: Target,
    meta: &ObjectMeta,
    legacy: impl Fn(&str) -> bool,
    out: &mut Vec<Write>,
) {
    for suffix in guard_managers(meta).into_iter().filter(|s| legacy(s)) {
        out.push(Write::Annotate {
            target,
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone().unwrap_or_default(),
            manager: namespace_field_manager(&suffix),
            annotations: BTreeMap::new(),
        });
    }
}

/// Plans namespace `namespace` for its `windows` (Active or not: one that is not wants
/// nothing) against the world.
pub fn plan(namespace: &str, windows: &[WindowFacts], world: &World) -> NamespacePlan {
    let manager = namespace_field_manager(namespace);
    let mut wanted = Wanted::default();
    let mut views = Vec::with_capacity(windows.len());
    let mut selections = Vec::with_capacity(windows.len());
    for window in windows {
        let (view, selection) = want(window, world, &mut wanted);
        views.push(view);
        selections.push(selection);
    }

    let mut writes = vec![];
    let mut legacy_writes = vec![];
    let mut foreign = BTreeMap::new();
    // A guard manager on a pod or PDB of the namespace other than its own is an earlier
    // version's window; on a node, only the windows of this namespace are its business.
    let own_legacy = |suffix: &str| suffix != namespace;
    let window_uids: BTreeSet<&str> = windows.iter().map(|w| w.uid.as_str()).collect();
    let our_windows = |suffix: &str| window_uids.contains(suffix);

    for pod in world
        .pods
        .iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some(namespace))
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let want = wanted.pods.get(name).map(|w| w.annotations(pod));
        let want = want.unwrap_or_default();
        writes.extend(annotate(
            Target::Pod,
            &pod.metadata,
            &manager,
            want,
            &mut foreign,
        ));
        release_legacy(Target::Pod, &pod.metadata, own_legacy, &mut legacy_writes);
    }

    let mut seen = BTreeMap::new();
    for node in world.nodes.iter() {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        if wanted.nodes.contains(name) {
            seen.insert(name, is_registered(node));
        }
        if node.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let want = if wanted.nodes.contains(name) {
            node_annotations()
        } else {
            BTreeMap::new()
        };
        writes.extend(annotate(
            Target::Node,
            &node.metadata,
            &manager,
            want,
            &mut foreign,
        ));
        release_legacy(
            Target::Node,
            &node.metadata,
            our_windows,
            &mut legacy_writes,
        );
    }
    // Karpenter reads a node's `do-not-disrupt` from its NodeClaim only until the node is
    // registered, then from the Node (its `StateNode.Annotations`); a pod rarely runs on a node
    // before that (Karpenter taints it `karpenter.sh/unregistered` until then). So a NodeClaim
    // is annotated only while its node is not registered: a write per node saved, and
    // Karpenter's NodeClaim controllers not woken by it.
    let registering: BTreeSet<&str> = wanted
        .nodes
        .iter()
        .map(String::as_str)
        .filter(|name| seen.get(name) != Some(&true))
        .collect();
    for claim in world.node_claims.iter().flatten() {
        if claim.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let node = claim
            .data
            .pointer("/status/nodeName")
            .and_then(|v| v.as_str());
        let want = if node.is_some_and(|n| registering.contains(n)) {
            BTreeMap::from([(KARPENTER_DO_NOT_DISRUPT.to_string(), "true".to_string())])
        } else {
            BTreeMap::new()
        };
        let meta = &claim.metadata;
        writes.extend(annotate(
            Target::NodeClaim,
            meta,
            &manager,
            want,
            &mut foreign,
        ));
        release_legacy(Target::NodeClaim, meta, our_windows, &mut legacy_writes);
    }

    super::pdbs::plan_pdbs(
        namespace,
        &wanted.pdbs,
        world,
        &mut writes,
        &mut legacy_writes,
    );

    for ((view, selection), window) in views.iter_mut().zip(&selections).zip(windows) {
        if !window.active {
            continue;
        }
        for node in &selection.nodes {
            if !seen.contains_key(node.as_str()) {
                view.waiting.push(format!("node {node} not seen yet"));
            }
        }
        let mut kept = |target, names: &BTreeSet<String>| {
            for name in names {
                if let Some(values) = foreign.get(&(target, name.clone())) {
                    view.foreign_values.extend(values.iter().cloned());
                }
            }
        };
        kept(Target::Pod, &selection.pods);
        kept(Target::Node, &selection.nodes);
    }
    writes.extend(legacy_writes);
    NamespacePlan {
        writes,
        windows: views,
    }
}

/// Adds what `window` wants to `wanted`; its view and what it selects.
fn want(window: &WindowFacts, world: &World, wanted: &mut Wanted) -> (WindowPlan, Selection) {
    let mut view = WindowPlan::default();
    let mut selection = Selection {
        pods: BTreeSet::new(),
        nodes: BTreeSet::new(),
    };
    if !window.active {
        return (view, selection);
    }
    let selected = selected_pods(window, &world.pods);
    if window.protect.do_not_disrupt {
        for pod in &selected {
            let name = pod.metadata.name.clone().unwrap_or_default();
            wanted.pods.entry(name.clone()).or_default().add(window);
            selection.pods.insert(name);
        }
        view.pods = selected.len() as u32;
    }
    if window.protect.nodes {
        selection.nodes = selected
            .iter()
            .filter_map(|p| p.node_name())
            .map(str::to_string)
            .collect();
        wanted.nodes.extend(selection.nodes.iter().cloned());
    }
    view.nodes = selection.nodes.len() as u32;
    super::pdbs::want_pdbs(window, world, &selected, &mut view, &mut wanted.pdbs);
    (view, selection)
}
