//! Which windows a change of a watched object concerns. A change reconciles only the windows it
//! can alter: with many windows in one namespace, fanning every pod, node or PDB change out to
//! all of them would make each change cost a reconcile per window.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

use super::fields::window_uids;
use super::selector;
use crate::resources::names::{CA_SCALE_DOWN_DISABLED, KARPENTER_DO_NOT_DISRUPT};
use crate::resources::{PodDigest, TestWindow};

/// Hash of what matters about a node to windows: our annotations, our managers, and the
/// disruption marks (kwok heartbeats and other status churn do not trigger reconciles).
pub fn node_fingerprint(node: &Node) -> u64 {
    let mut h = DefaultHasher::new();
    let annotations = node.annotations();
    annotations.get(KARPENTER_DO_NOT_DISRUPT).hash(&mut h);
    annotations.get(CA_SCALE_DOWN_DISABLED).hash(&mut h);
    window_uids(&node.metadata).hash(&mut h);
    node.metadata.deletion_timestamp.is_some().hash(&mut h);
    if let Some(spec) = &node.spec {
        spec.unschedulable.hash(&mut h);
        for t in spec.taints.iter().flatten() {
            (&t.key, &t.effect).hash(&mut h);
        }
    }
    h.finish()
}

/// Windows in `ns` that select `labels` or whose managers wrote to the object (`owners`).
pub fn windows_for(
    windows: &Store<TestWindow>,
    ns: Option<&str>,
    labels: &BTreeMap<String, String>,
    owners: &BTreeSet<String>,
) -> Vec<ObjectRef<TestWindow>> {
    windows
        .state()
        .iter()
        .filter(|w| {
            let uid = w.metadata.uid.as_deref().unwrap_or_default();
            owners.contains(uid)
                || (ns.is_some()
                    && w.namespace().as_deref() == ns
                    && selector::matches(&w.spec.selector, labels))
        })
        .map(|w| ObjectRef::from_obj(w.as_ref()))
        .collect()
}

/// Windows selecting a pod that runs on `node`.
pub fn windows_on_node(
    windows: &Store<TestWindow>,
    pods: &Store<PodDigest>,
    node: Option<&str>,
) -> Vec<ObjectRef<TestWindow>> {
    let Some(node) = node else { return vec![] };
    let mut refs = vec![];
    for pod in pods.state_filter(|p| p.node_name() == Some(node)) {
        refs.extend(windows_for(
            windows,
            pod.metadata.namespace.as_deref(),
            pod.labels(),
            &Default::default(),
        ));
    }
    refs.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    refs.dedup();
    refs
}

/// What a PDB change means to windows, decided from the PDB's last two versions.
///
/// A PDB appearing, going away or changing its spec (generation) can change any plan of its
/// namespace: a window reuses a PDB that already covers its pods instead of creating one. Its
/// status changes, which follow every pod change, concern only the windows that own it (they
/// wait for the disruption controller to compute their PDB) — before and after the change, so
/// a window that just released a shared PDB sees the release.
#[derive(Default)]
pub struct PdbTriggers {
    seen: HashMap<ObjectRef<PodDisruptionBudget>, Seen>,
}

/// A PDB's last generation and owning windows.
type Seen = (Option<i64>, Vec<ObjectRef<TestWindow>>);

/// Who should look again after a PDB event.
#[derive(Debug, PartialEq, Eq)]
pub enum PdbConcerns {
    /// Every window of the namespace.
    Namespace(String),
    /// These windows (the PDB's owners, before and after).
    Windows(Vec<ObjectRef<TestWindow>>),
}

fn owners(pdb: &PodDisruptionBudget) -> Vec<ObjectRef<TestWindow>> {
    let ns = pdb.namespace().unwrap_or_default();
    pdb.owner_references()
        .iter()
        .filter(|o| o.kind == "TestWindow")
        .map(|o| ObjectRef::new(&o.name).within(&ns))
        .collect()
}

impl PdbTriggers {
    /// The windows a watch event concerns; `None` for events that concern none.
    pub fn on(&mut self, event: &watcher::Event<PodDisruptionBudget>) -> Option<PdbConcerns> {
        match event {
            watcher::Event::Apply(pdb) | watcher::Event::InitApply(pdb) => {
                let key = ObjectRef::from_obj(pdb);
                let generation = pdb.metadata.generation;
                let now = owners(pdb);
                let before = self.seen.insert(key, (generation, now.clone()));
                match before {
                    Some((g, mut was)) if g == generation => {
                        was.extend(now);
                        was.sort_by(|a, b| a.name.cmp(&b.name));
                        was.dedup();
                        (!was.is_empty()).then_some(PdbConcerns::Windows(was))
                    }
                    _ => Some(PdbConcerns::Namespace(pdb.namespace().unwrap_or_default())),
                }
            }
            watcher::Event::Delete(pdb) => {
                self.seen.remove(&ObjectRef::from_obj(pdb));
                Some(PdbConcerns::Namespace(pdb.namespace().unwrap_or_default()))
            }
            watcher::Event::Init | watcher::Event::InitDone => None,
        }
    }

    /// The window refs of `concerns`, reading the namespace's windows from `windows`.
    pub fn refs(concerns: PdbConcerns, windows: &Store<TestWindow>) -> Vec<ObjectRef<TestWindow>> {
        match concerns {
            PdbConcerns::Windows(refs) => refs,
            PdbConcerns::Namespace(ns) => windows
                .state()
                .iter()
                .filter(|w| w.namespace().as_deref() == Some(ns.as_str()))
                .map(|w| ObjectRef::from_obj(w.as_ref()))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pdb(generation: i64, owners: &[&str], healthy: i32) -> PodDisruptionBudget {
        let refs: Vec<_> = owners
            .iter()
            .map(|o| json!({"apiVersion": "disruption-guard.io/v1alpha1", "kind": "TestWindow", "name": o, "uid": format!("u-{o}")}))
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": "api", "namespace": "shop", "generation": generation, "ownerReferences": refs},
            "spec": {"maxUnavailable": 0},
            "status": {"currentHealthy": healthy, "desiredHealthy": 1, "disruptionsAllowed": 0, "expectedPods": 1}
        }))
        .unwrap()
    }

    fn windows(names: &[&str]) -> PdbConcerns {
        PdbConcerns::Windows(
            names
                .iter()
                .map(|n| ObjectRef::new(n).within("shop"))
                .collect(),
        )
    }

    #[test]
    fn a_new_changed_or_deleted_pdb_concerns_the_whole_namespace() {
        let mut t = PdbTriggers::default();
        let ns = Some(PdbConcerns::Namespace("shop".into()));
        assert_eq!(t.on(&watcher::Event::InitApply(pdb(1, &[], 1))), ns);
        assert_eq!(t.on(&watcher::Event::Apply(pdb(2, &[], 1))), ns);
        assert_eq!(t.on(&watcher::Event::Delete(pdb(2, &[], 1))), ns);
        // Seen again after its deletion: new again.
        assert_eq!(t.on(&watcher::Event::Apply(pdb(2, &[], 1))), ns);
    }

    #[test]
    fn a_status_change_concerns_only_its_owners_before_and_after() {
        let mut t = PdbTriggers::default();
        t.on(&watcher::Event::Apply(pdb(1, &["a", "b"], 0)));
        assert_eq!(
            t.on(&watcher::Event::Apply(pdb(1, &["a", "b"], 1))),
            Some(windows(&["a", "b"]))
        );
        // b released it: b still hears of it.
        assert_eq!(
            t.on(&watcher::Event::Apply(pdb(1, &["a"], 1))),
            Some(windows(&["a", "b"]))
        );
        assert_eq!(
            t.on(&watcher::Event::Apply(pdb(1, &["a"], 0))),
            Some(windows(&["a"]))
        );
    }

    #[test]
    fn a_status_change_of_a_pdb_no_window_owns_concerns_nobody() {
        let mut t = PdbTriggers::default();
        t.on(&watcher::Event::Apply(pdb(3, &[], 1)));
        assert_eq!(t.on(&watcher::Event::Apply(pdb(3, &[], 0))), None);
    }
}
