//! The cap on the nodes the windows of one namespace hold at once
//! (`--max-nodes-per-namespace`). Pure: the namespace's Active windows in the order they
//! opened and the world in, the pods one window may protect out.
//!
//! Protection comes in units, each holding a set of nodes: a workload's PDB holds every node
//! its live pods run on (the PDB covers them all, selected or not); a pod protected by
//! annotations only (a DaemonSet's, a bare pod's, or any pod when the window writes no PDB)
//! holds its own node. Units are admitted window by window in opening order, in name order
//! within a window, while the nodes held stay within the cap; a unit whose nodes are all held
//! already (by any window of the namespace) costs nothing. What the namespace holds now (its
//! field manager on a pod, a node or a PDB) is counted first and never taken back: a unit
//! already protected stays admitted, even when its workload has since spread further.
//! Every replica and every reconcile computes the same order from the same caches, so windows
//! reconciled at the same time do not each take the last free node.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::model::{WindowFacts, World, is_live, labels, selected_pods, workload_of};
use crate::k8s::fields::{has_manager, holds_fields};
use crate::k8s::selector;
use crate::resources::PodDigest;
use crate::resources::names::namespace_field_manager;

/// The `Ready` reason of a window that the cap keeps from protecting all it selects.
pub const NODE_LIMIT: &str = "NodeLimit";

/// What the cap lets one window protect.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Admission {
    /// The selected pods the window may protect; None: all of them (nothing refused).
    pub pods: Option<BTreeSet<String>>,
    /// The refused units (`Deployment/api`, `pod/agent-x`), for the window's status.
    pub refused: Vec<String>,
    /// Nodes the namespace's windows hold once every admitted unit is protected.
    pub held: usize,
}

impl Admission {
    /// The `Ready=False` message of a window with refused units, None when nothing was refused.
    pub fn refusal(&self, cap: u32) -> Option<String> {
        if self.refused.is_empty() {
            return None;
        }
        let mut shown = self.refused[..self.refused.len().min(5)].join(", ");
        if self.refused.len() > 5 {
            shown.push_str(&format!(" and {} more", self.refused.len() - 5));
        }
        Some(format!(
            "the windows of this namespace hold {} nodes, the most allowed \
             (--max-nodes-per-namespace={cap}); not protected: {shown}",
            self.held
        ))
    }
}

/// One piece of protection and the nodes it holds.
struct Unit {
    pods: BTreeSet<String>,
    nodes: BTreeSet<String>,
    /// The namespace protects it now (its manager on one of the pods, or on the PDB).
    held: bool,
}

/// The live pods of the window's namespace.
fn namespace_pods<'a>(window: &WindowFacts, world: &'a World) -> Vec<&'a Arc<PodDigest>> {
    world
        .pods
        .iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some(window.namespace.as_str()))
        .filter(|p| is_live(p))
        .collect()
}

/// Whether `pdb` is of the window's namespace and its field manager `manager` holds it.
fn holds_pdb(window: &WindowFacts, manager: &str, pdb: &PodDisruptionBudget) -> bool {
    pdb.metadata.namespace.as_deref() == Some(window.namespace.as_str())
        && holds_fields(&pdb.metadata, manager)
}

/// The nodes of the pods of `pods` that `selector` matches.
fn matched_nodes<'a>(
    pods: &'a [&Arc<PodDigest>],
    selector: &'a LabelSelector,
) -> impl Iterator<Item = String> + 'a {
    let matched = pods
        .iter()
        .filter(|p| selector::matches(selector, labels(&p.metadata)));
    matched.filter_map(|p| p.node_name()).map(str::to_string)
}

/// The units of `window`'s selection, by key (`Deployment/api`, `pod/agent-x`).
fn units(window: &WindowFacts, world: &World) -> BTreeMap<String, Unit> {
    let manager = namespace_field_manager(&window.namespace);
    let ns_pods = namespace_pods(window, world);
    let mut units: BTreeMap<String, Unit> = BTreeMap::new();
    for pod in selected_pods(window, &world.pods) {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let workload = window
            .protect
            .pod_disruption_budgets
            .then(|| workload_of(pod, world).ok().flatten())
            .flatten();
        // A workload's PDB holds the nodes of every live pod it covers.
        let (key, mut nodes, pdb_held) = match &workload {
            Some(w) => {
                let pdb = Some(w.pdb_name());
                let pdb_held = world
                    .pdbs
                    .iter()
                    .any(|p| p.metadata.name == pdb && holds_pdb(window, &manager, p));
                let nodes = matched_nodes(&ns_pods, &w.selector).collect();
                (format!("{}/{}", w.kind, w.name), nodes, pdb_held)
            }
            None => (format!("pod/{name}"), BTreeSet::new(), false),
        };
        nodes.extend(pod.node_name().map(str::to_string));
        let unit = units.entry(key).or_insert_with(|| Unit {
            pods: BTreeSet::new(),
            nodes: BTreeSet::new(),
            held: pdb_held,
        });
        unit.pods.insert(name);
        unit.held |= has_manager(&pod.metadata, &manager);
        unit.nodes.extend(nodes);
    }
    units
}

/// The nodes `window`'s namespace holds now: those its manager annotated, those of the pods it annotated,
/// and those of the live pods its PDBs cover.
fn held_nodes(window: &WindowFacts, world: &World) -> BTreeSet<String> {
    let manager = namespace_field_manager(&window.namespace);
    let ns_pods = namespace_pods(window, world);
    let nodes = world
        .nodes
        .iter()
        .filter(|n| has_manager(&n.metadata, &manager));
    let mut held: BTreeSet<String> = nodes.filter_map(|n| n.metadata.name.clone()).collect();
    let annotated = ns_pods
        .iter()
        .filter(|p| has_manager(&p.metadata, &manager));
    held.extend(annotated.filter_map(|p| p.node_name()).map(str::to_string));
    for pdb in world.pdbs.iter().filter(|p| holds_pdb(window, &manager, p)) {
        if let Some(selector) = pdb.spec.as_ref().and_then(|s| s.selector.as_ref()) {
            held.extend(matched_nodes(&ns_pods, selector));
        }
    }
    held
}

/// What the cap lets the window `uid` protect, given the namespace's Active windows in the
/// order they opened (`windows`, `uid` among them) and `cap` (0: no cap).
pub fn admit(cap: u32, windows: &[WindowFacts], uid: &str, world: &World) -> Admission {
    if cap == 0 {
        return Admission::default();
    }
    let cap = cap as usize;
    let mut total: BTreeSet<String> = windows.iter().flat_map(|w| held_nodes(w, world)).collect();
    let mut mine = Admission::default();
    for window in windows {
        let this = window.uid == uid;
        let mut admitted = BTreeSet::new();
        let mut refused = Vec::new();
        for (key, unit) in units(window, world) {
            let new = unit.nodes.difference(&total).count();
            if new == 0 || unit.held || total.len() + new <= cap {
                total.extend(unit.nodes);
                admitted.extend(unit.pods);
            } else {
                refused.push(key);
            }
        }
        if this {
            mine.pods = (!refused.is_empty()).then_some(admitted);
            mine.refused = refused;
        }
    }
    mine.held = total.len();
    mine
}
