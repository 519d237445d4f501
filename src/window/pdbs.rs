//! The PodDisruptionBudget part of a namespace's plan: one guard PDB per protected workload
//! unless another PDB already covers its pods (then that one is reused and none is added: a
//! second PDB over the same pods makes the Eviction API answer 500), and the deletion of guard
//! PDBs no window wants.
//!
//! A guard PDB belongs to its namespace, not to a window: it is labelled as the guard's and its
//! fields are held by the namespace's field manager. Windows that join a namespace already
//! protected write nothing to it; the pass deletes it once no window wants it, and the sweep
//! feeds that pass for a namespace whose windows are all gone. Earlier versions made one owner
//! reference and one field manager per window: such a PDB is taken over by the namespace's
//! manager, then those managers are released.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::model::{WindowFacts, WindowPlan, Workload, World, Write, is_live, labels, workload_of};
use crate::k8s::fields::{holds_fields, holds_label};
use crate::k8s::selector;
use crate::resources::PodDigest;
use crate::resources::names::{MANAGED_BY_KEY, MANAGED_BY_VALUE};

/// Whether the PDB is labelled as the guard's.
pub fn is_guard_pdb(pdb: &PodDisruptionBudget) -> bool {
    labels(&pdb.metadata)
        .get(MANAGED_BY_KEY)
        .map(String::as_str)
        == Some(MANAGED_BY_VALUE)
}

fn is_guard_pdb_for(pdb: &PodDisruptionBudget, workload: &Workload) -> bool {
    pdb.metadata.name.as_deref() == Some(workload.pdb_name().as_str()) && is_guard_pdb(pdb)
}

/// Adds the PDBs `window` wants (by name, with their workload) to `wanted`, and what it relies
/// on to its view; a pod whose workload cannot be told yet keeps it waiting.
pub(super) fn want_pdbs(
    window: &WindowFacts,
    world: &World,
    selected: &[&Arc<PodDigest>],
    view: &mut WindowPlan,
    wanted: &mut BTreeMap<String, Workload>,
) {
    if !window.protect.pod_disruption_budgets {
        return;
    }
    let mut workloads = BTreeMap::new();
    for pod in selected {
        match workload_of(pod, world) {
            Ok(Some(w)) => {
                workloads.insert((w.kind, w.name.clone()), w);
            }
            Ok(None) => {}
            Err(why) => view.waiting.push(why),
        }
    }
    view.workloads = workloads.len() as u32;
    for workload in workloads.into_values() {
        let others = covering(world, &workload);
        if others.is_empty() {
            view.pdbs.push(workload.pdb_name());
            wanted.insert(workload.pdb_name(), workload);
        } else {
            view.reused_pdbs.extend(others.iter().cloned());
            view.pdbs.extend(others);
        }
    }
    for names in [&mut view.pdbs, &mut view.reused_pdbs] {
        names.sort();
        names.dedup();
    }
}

/// The PDBs other than the workload's guard PDB that select one of its live pods.
fn covering(world: &World, workload: &Workload) -> Vec<String> {
    let pods: Vec<&BTreeMap<String, String>> = world
        .pods
        .iter()
        .filter(|p| is_live(p))
        .map(|p| labels(&p.metadata))
        .filter(|l| selector::matches(&workload.selector, l))
        .collect();
    world
        .pdbs
        .iter()
        .filter(|pdb| !is_guard_pdb_for(pdb, workload))
        .filter(|pdb| {
            let sel = pdb.spec.as_ref().and_then(|s| s.selector.as_ref());
            pods.iter().any(|l| selector::optional_matches(sel, l))
        })
        .filter_map(|pdb| pdb.metadata.name.clone())
        .collect()
}

/// The PDB writes of the namespace whose field manager is `manager`: each wanted PDB applied
/// unless it is already as wanted, and each guard PDB nobody wants deleted. Returns the guard
/// PDBs kept (an earlier version's window managers are released from those).
pub(super) fn plan_pdbs<'a>(
    manager: &str,
    wanted: &BTreeMap<String, Workload>,
    world: &'a World,
    writes: &mut Vec<Write>,
) -> Vec<&'a ObjectMeta> {
    let named = |name: &str| {
        world
            .pdbs
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
    };
    for (name, workload) in wanted {
        if !named(name).is_some_and(|pdb| settled(pdb, manager, workload)) {
            let (name, workload) = (name.clone(), workload.clone());
            writes.push(Write::ApplyPdb { name, workload });
        }
    }
    let mut kept = vec![];
    for pdb in world.pdbs.iter().filter(|p| is_guard_pdb(p)) {
        let meta = &pdb.metadata;
        let name = meta.name.clone().unwrap_or_default();
        if meta.deletion_timestamp.is_some() {
            continue;
        } else if wanted.contains_key(&name) {
            kept.push(meta);
            continue;
        }
        writes.push(Write::DeletePdb {
            name,
            uid: meta.uid.clone().unwrap_or_default(),
            resource_version: meta.resource_version.clone().unwrap_or_default(),
        });
    }
    kept
}

/// Whether `pdb` is already the guard's PDB for `workload` as the namespace's `manager` writes
/// it: its fields and the managed-by label held by that manager, `maxUnavailable: 0` over the
/// workload's selector.
fn settled(pdb: &PodDisruptionBudget, manager: &str, workload: &Workload) -> bool {
    let spec = pdb.spec.as_ref();
    is_guard_pdb_for(pdb, workload)
        && holds_fields(&pdb.metadata, manager)
        && holds_label(&pdb.metadata, manager, MANAGED_BY_KEY)
        && spec.and_then(|s| s.max_unavailable.as_ref()) == Some(&IntOrString::Int(0))
        && spec.and_then(|s| s.selector.as_ref()) == Some(&workload.selector)
}
