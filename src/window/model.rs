//! The planner's vocabulary: what a plan reads (the [`World`] of a namespace, each window as
//! [`WindowFacts`], the [`Workload`] a pod belongs to) and what it decides (a [`NamespacePlan`]:
//! the namespace's [`Write`]s and a [`WindowPlan`] view per window). Shared by [`super::plan`]
//! and [`super::pdbs`]; pure data and lookups.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::Resource;
use kube::api::DynamicObject;

use crate::k8s::references::controller_of;
use crate::k8s::selector;
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
pub struct WindowFacts {
    pub uid: String,
    pub namespace: String,
    pub selector: LabelSelector,
    pub protect: Protect,
    /// Whether the window is Active (otherwise it wants nothing).
    pub active: bool,
    pub expires_at: Timestamp,
    /// The selected pods it may protect when a limit refused some (`--max-nodes-per-namespace`,
    /// [`super::node_cap`]); None: every pod it selects.
    pub admitted: Option<Arc<BTreeSet<String>>>,
}

impl WindowFacts {
    /// The view of `window` with its decided activity and expiry.
    pub fn of(window: &TestWindow, active: bool, expires_at: Timestamp) -> Self {
        Self {
            uid: window.metadata.uid.clone().unwrap_or_default(),
            namespace: window.metadata.namespace.clone().unwrap_or_default(),
            selector: window.spec.selector.clone(),
            protect: window.spec.protect.clone(),
            active,
            expires_at,
            admitted: None,
        }
    }
}

/// A kind of object the guard writes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Target {
    Pod,
    Node,
    NodeClaim,
    Pdb,
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
    /// Apply exactly these annotations with `manager` (empty = release everything it holds on
    /// the object): the namespace's manager, or to release it, the manager of an earlier
    /// version's window (on a PDB, only such releases).
    Annotate {
        target: Target,
        name: String,
        uid: String,
        manager: String,
        annotations: BTreeMap<String, String>,
    },
    /// Apply the namespace's PDB for a workload (creates it or takes it over).
    ApplyPdb { name: String, workload: Workload },
    /// Delete a guard PDB no window wants (UID and resourceVersion preconditions, so a PDB
    /// that changed since it was read is decided again).
    DeletePdb {
        name: String,
        uid: String,
        resource_version: String,
    },
}

impl Write {
    /// Applies `annotations` to the object `meta` with `manager`.
    pub fn annotate(
        target: Target,
        meta: &ObjectMeta,
        manager: String,
        annotations: BTreeMap<String, String>,
    ) -> Self {
        let name = meta.name.clone().unwrap_or_default();
        let uid = meta.uid.clone().unwrap_or_default();
        Write::Annotate {
            target,
            name,
            uid,
            manager,
            annotations,
        }
    }

    /// The write in words, for logs, errors and the window's status.
    pub fn describe(&self) -> String {
        match self {
            Write::Annotate {
                target,
                name,
                manager,
                ..
            } if self.releases() => {
                format!("release of {target:?} {name} by {manager}")
            }
            Write::Annotate { target, name, .. } => format!("annotations of {target:?} {name}"),
            Write::ApplyPdb { name, .. } => format!("PodDisruptionBudget {name}"),
            Write::DeletePdb { name, .. } => format!("deletion of PodDisruptionBudget {name}"),
        }
    }

    /// Whether the write removes protection.
    pub fn releases(&self) -> bool {
        match self {
            Write::Annotate { annotations, .. } => annotations.is_empty(),
            Write::ApplyPdb { .. } => false,
            Write::DeletePdb { .. } => true,
        }
    }
}

/// One window's view of its namespace's protection: what it selects, what it waits for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WindowPlan {
    /// The namespace's writes still to make, as the pass sets them (for the window's status).
    pub writes: Vec<Write>,
    pub workloads: u32,
    pub pods: u32,
    pub nodes: u32,
    /// PDBs the window relies on (the guard's and reused ones).
    pub pdbs: Vec<String>,
    /// PDBs that existed before and cover the window's pods: none is created for those.
    pub reused_pdbs: Vec<String>,
    /// Why protection is not yet complete although no write is pending.
    pub waiting: Vec<String>,
    /// Annotations somebody else set to another value: left alone (`kind/name key=value`).
    pub foreign_values: Vec<String>,
    /// Why the window does not get (all) the protection it asks for: its `Ready=False` reason
    /// and message (a refused `protect.daemonSets`, the node cap).
    pub refused: Option<Refusal>,
}

impl WindowPlan {
    /// Every piece of protection written and observed.
    pub fn complete(&self) -> bool {
        self.writes.is_empty() && self.waiting.is_empty()
    }
}

/// What a namespace's pass writes, and each window's view (in the order the windows were
/// given).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NamespacePlan {
    pub writes: Vec<Write>,
    pub windows: Vec<WindowPlan>,
}

impl NamespacePlan {
    /// Whether a write removes protection (a release or a deletion): the pass confirms those
    /// against a fresh read of the namespace's windows first.
    pub fn releases(&self) -> bool {
        self.writes.iter().any(Write::releases)
    }
}

/// A limit the window ran into: `Ready` stays False with this reason and message.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub reason: &'static str,
    pub message: String,
}

/// Whether a pod still runs (or will): not finished and not being deleted.
pub fn is_live(pod: &PodDigest) -> bool {
    let phase = pod.status.phase.as_deref();
    pod.metadata.deletion_timestamp.is_none() && !matches!(phase, Some("Succeeded" | "Failed"))
}

/// An object's labels, borrowed (no labels read as an empty map).
pub fn labels(meta: &ObjectMeta) -> &BTreeMap<String, String> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    meta.labels.as_ref().unwrap_or(&EMPTY)
}

/// The pods of the namespace the window selects and protects: live, matched by its selector,
/// admitted by the limits, and not run by a DaemonSet unless the window asks for those. A
/// DaemonSet runs a pod on every node, so protecting its pods protects every node: an empty
/// selector would stop all consolidation.
pub fn selected_pods<'a>(
    window: &WindowFacts,
    pods: &'a [Arc<PodDigest>],
) -> Vec<&'a Arc<PodDigest>> {
    let daemon_set =
        |p: &PodDigest| controller_of(&p.metadata).is_some_and(|o| o.kind == "DaemonSet");
    let admitted = |p: &PodDigest| {
        let name = p.metadata.name.as_deref().unwrap_or_default();
        window
            .admitted
            .as_ref()
            .is_none_or(|admitted| admitted.contains(name))
    };
    pods.iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some(window.namespace.as_str()))
        .filter(|p| is_live(p) && selector::matches(&window.selector, labels(&p.metadata)))
        .filter(|p| (window.protect.daemon_sets || !daemon_set(p)) && admitted(p))
        .collect()
}

/// The workload a pod belongs to, `Ok(None)` for pods no PDB can cover (bare pods, Jobs,
/// DaemonSets), `Err` when its owner is not yet known.
pub fn workload_of(pod: &PodDigest, world: &World) -> Result<Option<Workload>, String> {
    fn named<'a, K: Resource>(all: &'a [Arc<K>], kind: &str, name: &str) -> Result<&'a K, String> {
        let found = all.iter().find(|o| o.meta().name.as_deref() == Some(name));
        found
            .map(|o| &**o)
            .ok_or_else(|| format!("{kind} {name} not seen yet"))
    }
    let workload = |kind, name: &str, selector: Option<&LabelSelector>| {
        let (name, selector) = (name.to_string(), selector.cloned().unwrap_or_default());
        Ok(Some(Workload {
            kind,
            name,
            selector,
        }))
    };
    let Some(owner) = controller_of(&pod.metadata) else {
        return Ok(None);
    };
    let name = owner.name.as_str();
    match owner.kind.as_str() {
        "StatefulSet" => {
            let sts = named(&world.stateful_sets, "StatefulSet", name)?;
            workload("StatefulSet", name, sts.spec.as_ref().map(|s| &s.selector))
        }
        "ReplicaSet" => {
            let rs = named(&world.replica_sets, "ReplicaSet", name)?;
            let Some(d) = controller_of(&rs.metadata).filter(|o| o.kind == "Deployment") else {
                return workload("ReplicaSet", name, rs.spec.as_ref().map(|s| &s.selector));
            };
            let dep = named(&world.deployments, "Deployment", &d.name)?;
            workload(
                "Deployment",
                &d.name,
                dep.spec.as_ref().map(|s| &s.selector),
            )
        }
        _ => Ok(None),
    }
}
