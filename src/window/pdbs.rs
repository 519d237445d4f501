//! The PodDisruptionBudget part of a window's plan: one guard PDB per protected workload
//! unless another PDB already covers its pods (then that one is reused), and the release of
//! guard PDBs the window no longer wants (dropping its claim, or deleting the PDB when no other
//! window owns it).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::plan::{Plan, WindowView, Workload, World, Write, is_live, labels, workload_of};
use super::selector;
use crate::resources::PodDigest;
use crate::resources::names::{MANAGED_BY_KEY, MANAGED_BY_VALUE};

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

pub(super) fn plan_pdbs(
    window: &WindowView,
    world: &World,
    selected: &[&Arc<PodDigest>],
    out: &mut Plan,
) {
    let mut workloads = BTreeMap::new();
    if window.protect.pod_disruption_budgets {
        for pod in selected {
            match workload_of(pod, world) {
                Ok(Some(w)) => {
                    workloads.insert((w.kind, w.name.clone()), w);
                }
                Ok(None) => {}
                Err(why) => out.waiting.push(why),
            }
        }
    }
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
            continue;
        }
        let name = workload.pdb_name();
        wanted.insert(name.clone());
        out.pdbs.push(name.clone());
        let existing = world
            .pdbs
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(name.as_str()));
        let settled = existing.is_some_and(|pdb| {
            let spec = pdb.spec.as_ref();
            is_guard_pdb_for(pdb, workload)
                && owned_by(&pdb.metadata, &window.uid)
                && spec.and_then(|s| s.max_unavailable.as_ref()) == Some(&IntOrString::Int(0))
                && spec.and_then(|s| s.selector.as_ref()) == Some(&workload.selector)
        });
        match existing {
            Some(pdb) if settled => {
                let observed = pdb.status.as_ref().and_then(|s| s.observed_generation);
                if observed.is_none() || observed < pdb.metadata.generation {
                    out.waiting
                        .push(format!("PodDisruptionBudget {name} not yet computed"));
                }
            }
            _ => out.writes.push(Write::ApplyPdb {
                name,
                workload: workload.clone(),
            }),
        }
    }
    out.pdbs.sort();
    out.pdbs.dedup();
    out.reused_pdbs.sort();
    out.reused_pdbs.dedup();

    for pdb in world
        .pdbs
        .iter()
        .filter(|p| owned_by(&p.metadata, &window.uid))
    {
        let name = pdb.metadata.name.clone().unwrap_or_default();
        if wanted.contains(&name) || pdb.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let uid = pdb.metadata.uid.clone().unwrap_or_default();
        let others = pdb
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.kind == "TestWindow" && o.uid != window.uid);
        out.writes.push(if others {
            Write::ReleasePdb { name, uid }
        } else {
            Write::DeletePdb {
                name,
                uid,
                resource_version: pdb.metadata.resource_version.clone().unwrap_or_default(),
            }
        });
    }
}
