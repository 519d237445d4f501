//! The PodDisruptionBudget part of a window's plan: one guard PDB per protected workload
//! unless another PDB already covers its pods (then that one is reused), and the release of
//! guard PDBs the window no longer wants ([`let_go`]).
//!
//! Who shares a guard PDB is read from `managedFields`, never from `ownerReferences`: a window
//! is a co-holder only while its field manager `disruption-guard/<uid>` holds fields. A window
//! that lets go while another window's manager holds fields drops its own fields (an empty
//! apply, with the resourceVersion it read); otherwise it is the last and deletes the PDB. An
//! empty apply by the last holder would leave an empty PDB nobody owns and nobody finds.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::model::{WindowFacts, WindowPlan, Workload, World, Write, is_live, labels, workload_of};
use crate::k8s::fields::{holding_window_uids, holds_fields, holds_label};
use crate::k8s::selector;
use crate::resources::PodDigest;
use crate::resources::names::{
    FIELD_MANAGER, MANAGED_BY_KEY, MANAGED_BY_VALUE, window_field_manager,
};

fn is_guard_pdb_for(pdb: &PodDisruptionBudget, workload: &Workload) -> bool {
    pdb.metadata.name.as_deref() == Some(workload.pdb_name().as_str())
        && pdb
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(MANAGED_BY_KEY))
            .map(String::as_str)
            == Some(MANAGED_BY_VALUE)
}

fn owned_by(meta: &ObjectMeta, uid: &str) -> bool {
    meta.owner_references.iter().flatten().any(|o| o.uid == uid)
}

/// Whether window `uid` has a stake in the PDB: its manager holds fields, or it is an owner.
fn concerns(meta: &ObjectMeta, uid: &str) -> bool {
    holds_fields(meta, &window_field_manager(uid)) || owned_by(meta, uid)
}

/// What window `uid`, which no longer wants `pdb`, writes to let go of it: a release when
/// another window's manager still holds fields (and this window's manager holds some to
/// drop), a delete when no other window's manager does (this window is the last), nothing
/// when the PDB is being deleted or is none of this window's business. Used by the plan on
/// cached PDBs and again by the writer on a freshly read PDB after a conflict.
pub fn let_go(pdb: &PodDisruptionBudget, uid: &str) -> Option<Write> {
    let meta = &pdb.metadata;
    if meta.deletion_timestamp.is_some() || !concerns(meta, uid) {
        return None;
    }
    let name = meta.name.clone().unwrap_or_default();
    let pdb_uid = meta.uid.clone().unwrap_or_default();
    let resource_version = meta.resource_version.clone().unwrap_or_default();
    let mut holders = holding_window_uids(meta);
    let mine = holders.remove(uid);
    match (holders.is_empty(), mine) {
        (false, true) => Some(Write::ReleasePdb {
            name,
            uid: pdb_uid,
            resource_version,
        }),
        // Listed as an owner, but the fields (the ownerReference included) are held by
        // windows that remain: nothing of this window's to remove.
        (false, false) => None,
        (true, _) => Some(Write::DeletePdb {
            name,
            uid: pdb_uid,
            resource_version,
        }),
    }
}

pub(super) fn plan_pdbs(
    window: &WindowFacts,
    world: &World,
    selected: &[&Arc<PodDigest>],
    out: &mut WindowPlan,
) {
    let workloads = protected_workloads(window, world, selected, out);
    out.workloads = workloads.len() as u32;
    let ns_pods: Vec<&Arc<PodDigest>> = world
        .pods
        .iter()
        .filter(|p| {
            p.metadata.namespace.as_deref() == Some(window.namespace.as_str()) && is_live(p)
        })
        .collect();
    let mut wanted = BTreeSet::new();
    for workload in workloads.values() {
        if let Some(name) = plan_workload(window, world, &ns_pods, workload, out) {
            wanted.insert(name);
        }
    }
    out.pdbs.sort();
    out.pdbs.dedup();
    out.reused_pdbs.sort();
    out.reused_pdbs.dedup();

    for pdb in world
        .pdbs
        .iter()
        .filter(|p| concerns(&p.metadata, &window.uid))
    {
        if wanted.contains(pdb.metadata.name.as_deref().unwrap_or_default()) {
            continue;
        }
        out.writes.extend(let_go(pdb, &window.uid));
    }
}

/// The workloads of the selected pods, when the window protects with PDBs; a pod whose
/// workload cannot be told yet is noted as waiting.
fn protected_workloads(
    window: &WindowFacts,
    world: &World,
    selected: &[&Arc<PodDigest>],
    out: &mut WindowPlan,
) -> BTreeMap<(&'static str, String), Workload> {
    let mut workloads = BTreeMap::new();
    if !window.protect.pod_disruption_budgets {
        return workloads;
    }
    for pod in selected {
        match workload_of(pod, world) {
            Ok(Some(w)) => {
                workloads.insert((w.kind, w.name.clone()), w);
            }
            Ok(None) => {}
            Err(why) => out.waiting.push(why),
        }
    }
    workloads
}

/// Plans the PDB of one workload (`ns_pods`: the namespace's live pods): another PDB already
/// over its pods is reused (a second one would make the Eviction API answer 500); otherwise the
/// guard's own PDB is applied, or awaited until the disruption controller computed it.
/// Returns the name of the guard PDB the window wants.
fn plan_workload(
    window: &WindowFacts,
    world: &World,
    ns_pods: &[&Arc<PodDigest>],
    workload: &Workload,
    out: &mut WindowPlan,
) -> Option<String> {
    let pods: Vec<&BTreeMap<String, String>> = ns_pods
        .iter()
        .map(|p| labels(&p.metadata))
        .filter(|l| selector::matches(&workload.selector, l))
        .collect();
    let others: Vec<String> = world
        .pdbs
        .iter()
        .filter(|pdb| !is_guard_pdb_for(pdb, workload))
        .filter(|pdb| {
            let sel = pdb.spec.as_ref().and_then(|s| s.selector.as_ref());
            pods.iter().any(|l| selector::optional_matches(sel, l))
        })
        .filter_map(|pdb| pdb.metadata.name.clone())
        .collect();
    if !others.is_empty() {
        out.reused_pdbs.extend(others.iter().cloned());
        out.pdbs.extend(others);
        return None;
    }
    let name = workload.pdb_name();
    out.pdbs.push(name.clone());
    let existing = world
        .pdbs
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(name.as_str()));
    match existing {
        Some(pdb) if settled(pdb, window, workload) => {
            let observed = pdb.status.as_ref().and_then(|s| s.observed_generation);
            if observed.is_none() || observed < pdb.metadata.generation {
                out.waiting
                    .push(format!("PodDisruptionBudget {name} not yet computed"));
            }
        }
        _ => out.writes.push(Write::ApplyPdb {
            name: name.clone(),
            workload: workload.clone(),
        }),
    }
    Some(name)
}

/// Whether `pdb` is already the guard's PDB for `workload` as `window` writes it: owned by the
/// window, its fields held by the window's manager, `maxUnavailable: 0` over the workload's
/// selector.
fn settled(pdb: &PodDisruptionBudget, window: &WindowFacts, workload: &Workload) -> bool {
    let spec = pdb.spec.as_ref();
    is_guard_pdb_for(pdb, workload)
        && owned_by(&pdb.metadata, &window.uid)
        && holds_fields(&pdb.metadata, &window_field_manager(&window.uid))
        && holds_label(&pdb.metadata, FIELD_MANAGER, MANAGED_BY_KEY)
        && spec.and_then(|s| s.max_unavailable.as_ref()) == Some(&IntOrString::Int(0))
        && spec.and_then(|s| s.selector.as_ref()) == Some(&workload.selector)
}
