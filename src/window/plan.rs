//! What one window wants written, as a list of writes: a pure function of the window and the
//! objects of its namespace (pods, workloads, PDBs) plus nodes and NodeClaims.
//!
//! A write carries the complete set of annotations the window's field manager should own on
//! an object; an empty set is a release (server-side apply then removes exactly what that
//! manager set). Only differences from what is observed become writes, so a settled window
//! costs no API calls. A window that is not Active wants nothing, which releases everything.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::api::DynamicObject;

use super::fields::{has_manager, owned_annotations};
use super::selector;
use super::timing::karpenter_duration;
use crate::resources::names::{
    CA_SAFE_TO_EVICT, CA_SCALE_DOWN_DISABLED, KARPENTER_DO_NOT_DISRUPT, window_field_manager,
};
use crate::resources::{PodDigest, Protect, TestWindow};

/// The objects a plan is computed from; pods, workloads and PDBs of the window's namespace.
#[derive(Default, Clone)]
pub struct World {
    pub pods: Vec<Arc<PodDigest>>,
    pub replica_sets: Vec<Arc<ReplicaSet>>,
    pub deployments: Vec<Arc<Deployment>>,
    pub stateful_sets: Vec<Arc<StatefulSet>>,
    pub pdbs: Vec<Arc<PodDisruptionBudget>>,
    pub nodes: Vec<Arc<Node>>,
    /// `None` when Karpenter's NodeClaim CRD is not installed.
    pub node_claims: Option<Vec<Arc<DynamicObject>>>,
}

/// The window as the planner needs it.
#[derive(Debug, Clone)]
pub struct WindowView {
    pub uid: String,
    pub name: String,
    pub namespace: String,
    pub selector: LabelSelector,
    pub protect: Protect,
    /// Whether the window is Active (otherwise it wants nothing).
    pub active: bool,
    pub expires_at: Timestamp,
}

impl WindowView {
    /// The view of `window` with its decided activity and expiry.
    pub fn of(window: &TestWindow, active: bool, expires_at: Timestamp) -> Self {
        Self {
            uid: window.metadata.uid.clone().unwrap_or_default(),
            name: window.metadata.name.clone().unwrap_or_default(),
            namespace: window.metadata.namespace.clone().unwrap_or_default(),
            selector: window.spec.selector.clone(),
            protect: window.spec.protect.clone(),
            active,
            expires_at,
        }
    }

    fn manager(&self) -> String {
        window_field_manager(&self.uid)
    }
}

/// A kind of object whose annotations a window manages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Target {
    Pod,
    Node,
    NodeClaim,
}

/// A protected workload.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    pub kind: &'static str,
    pub name: String,
    pub selector: LabelSelector,
}

impl Workload {
    /// Name of the guard's PDB for this workload: `<name>-dg` for a Deployment, with the kind
    /// in it for the other kinds so that a StatefulSet and a Deployment of one name differ.
    pub fn pdb_name(&self) -> String {
        let name = match self.kind {
            "Deployment" => format!("{}-dg", self.name),
            other => format!("{}-{}-dg", self.name, other.to_ascii_lowercase()),
        };
        name.chars().take(253).collect()
    }

    /// Value of the workload label on its PDB (label values are at most 63 characters).
    pub fn label_value(&self) -> Option<String> {
        let v = format!("{}-{}", self.kind.to_ascii_lowercase(), self.name);
        (v.len() <= 63).then_some(v)
    }
}

/// One write to make.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// Apply exactly these annotations with the window's manager (empty = release).
    Annotate {
        target: Target,
        name: String,
        uid: String,
        annotations: BTreeMap<String, String>,
    },
    /// Apply the window's PDB for a workload (creates it or adds the window as an owner).
    ApplyPdb { name: String, workload: Workload },
    /// Drop the window's claim on a PDB whose fields another window's manager still holds:
    /// an empty apply with the window's manager, refused (409) unless the PDB is still at
    /// `resource_version`, so a release never strips a PDB that changed since it was read.
    ReleasePdb {
        name: String,
        uid: String,
        resource_version: String,
    },
    /// Delete a PDB no other window's manager holds fields of (UID and resourceVersion
    /// preconditions).
    DeletePdb {
        name: String,
        uid: String,
        resource_version: String,
    },
}

/// The outcome of planning one window.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    pub writes: Vec<Write>,
    pub workloads: u32,
    pub pods: u32,
    pub nodes: u32,
    /// PDBs the window relies on (its own and reused ones).
    pub pdbs: Vec<String>,
    /// PDBs that existed before and cover the window's pods: none is created for those.
    pub reused_pdbs: Vec<String>,
    /// Why protection is not yet complete although no write is pending.
    pub waiting: Vec<String>,
    /// Annotations somebody else set to another value: left alone (`kind/name key=value`).
    pub foreign_values: Vec<String>,
}

impl Plan {
    /// Every piece of protection written and observed.
    pub fn complete(&self) -> bool {
        self.writes.is_empty() && self.waiting.is_empty()
    }
}

/// Whether a pod still runs (or will): not finished and not being deleted.
pub fn is_live(pod: &PodDigest) -> bool {
    let phase = pod.status.phase.as_deref();
    pod.metadata.deletion_timestamp.is_none() && !matches!(phase, Some("Succeeded" | "Failed"))
}

/// An object's labels, borrowed (no labels read as an empty map).
pub(super) fn labels(meta: &ObjectMeta) -> &BTreeMap<String, String> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    meta.labels.as_ref().unwrap_or(&EMPTY)
}

/// The pods of the namespace the window selects and protects.
pub fn selected_pods<'a>(
    window: &WindowView,
    pods: &'a [Arc<PodDigest>],
) -> Vec<&'a Arc<PodDigest>> {
    pods.iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some(window.namespace.as_str()))
        .filter(|p| is_live(p) && selector::matches(&window.selector, labels(&p.metadata)))
        .collect()
}

/// The workload a pod belongs to, `Ok(None)` for pods no PDB can cover (bare pods, Jobs,
/// DaemonSets), `Err` when its owner is not yet known.
pub fn workload_of(pod: &PodDigest, world: &World) -> Result<Option<Workload>, String> {
    let Some(owner) = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
    else {
        return Ok(None);
    };
    let by_name = |name: &str, meta: &ObjectMeta| meta.name.as_deref() == Some(name);
    match owner.kind.as_str() {
        "StatefulSet" => {
            let sts = world
                .stateful_sets
                .iter()
                .find(|s| by_name(&owner.name, &s.metadata))
                .ok_or_else(|| format!("StatefulSet {} not seen yet", owner.name))?;
            let selector = sts
                .spec
                .as_ref()
                .map(|s| s.selector.clone())
                .unwrap_or_default();
            Ok(Some(Workload {
                kind: "StatefulSet",
                name: owner.name.clone(),
                selector,
            }))
        }
        "ReplicaSet" => {
            let rs = world
                .replica_sets
                .iter()
                .find(|r| by_name(&owner.name, &r.metadata))
                .ok_or_else(|| format!("ReplicaSet {} not seen yet", owner.name))?;
            let deployment = rs
                .metadata
                .owner_references
                .iter()
                .flatten()
                .find(|o| o.controller == Some(true) && o.kind == "Deployment");
            match deployment {
                Some(d) => {
                    let dep = world
                        .deployments
                        .iter()
                        .find(|x| by_name(&d.name, &x.metadata))
                        .ok_or_else(|| format!("Deployment {} not seen yet", d.name))?;
                    let selector = dep
                        .spec
                        .as_ref()
                        .map(|s| s.selector.clone())
                        .unwrap_or_default();
                    Ok(Some(Workload {
                        kind: "Deployment",
                        name: d.name.clone(),
                        selector,
                    }))
                }
                None => {
                    let selector = rs
                        .spec
                        .as_ref()
                        .map(|s| s.selector.clone())
                        .unwrap_or_default();
                    Ok(Some(Workload {
                        kind: "ReplicaSet",
                        name: owner.name.clone(),
                        selector,
                    }))
                }
            }
        }
        _ => Ok(None),
    }
}

/// The annotations the window wants on a selected pod.
fn pod_annotations(window: &WindowView, pod: &PodDigest) -> BTreeMap<String, String> {
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
pub fn plan(window: &WindowView, world: &World) -> Plan {
    let manager = window.manager();
    let mut out = Plan::default();
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
    for node in &wanted_nodes {
        if !world
            .nodes
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some(node))
        {
            out.waiting.push(format!("node {node} not seen yet"));
        }
    }
    out.nodes = wanted_nodes.len() as u32;
    if let Some(claims) = &world.node_claims {
        for claim in claims
            .iter()
            .filter(|c| c.metadata.deletion_timestamp.is_none())
        {
            let node = claim
                .data
                .pointer("/status/nodeName")
                .and_then(|v| v.as_str());
            let wanted = if node.is_some_and(|n| wanted_nodes.contains(n)) {
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
