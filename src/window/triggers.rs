//! Which windows a change of a watched object concerns. A change reconciles only the windows it
//! can alter: with many windows in one namespace, fanning every pod, node or PDB change out to
//! all of them would make each change cost a reconcile per window.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

use super::selector;
use crate::k8s::fields::window_uids;
use crate::resources::names::{CA_SCALE_DOWN_DISABLED, KARPENTER_DO_NOT_DISRUPT};
use crate::resources::{PodDigest, TestWindow};
use crate::runtime::Pods;

/// Hash of what matters about a node to windows: our annotations, our managers, and the
/// disruption marks (kwok heartbeats and other status churn do not trigger reconciles).
fn node_fingerprint(node: &Node) -> u64 {
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

/// Which node changes matter to windows: a node whose [`node_fingerprint`] changed, or that
/// is gone from the cache (deleted). kwok heartbeats and other status churn do not.
#[derive(Default)]
pub struct NodeChanges {
    fingerprints: HashMap<String, u64>,
}

impl NodeChanges {
    /// Whether `node`'s change concerns windows; `stored` is whether the cache still holds it.
    pub fn changed(&mut self, node: &Node, stored: bool) -> bool {
        let name = node.metadata.name.clone().unwrap_or_default();
        if !stored {
            self.fingerprints.remove(&name);
            return true;
        }
        let fingerprint = node_fingerprint(node);
        self.fingerprints.insert(name, fingerprint) != Some(fingerprint)
    }
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

/// Windows selecting one of `pods` (the pods of a node).
pub fn windows_of_pods(
    windows: &Store<TestWindow>,
    pods: &[Arc<PodDigest>],
) -> Vec<ObjectRef<TestWindow>> {
    let mut refs = vec![];
    for pod in pods {
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
/// A PDB appearing, going away or changing its spec (generation) can change the plan of a window
/// whose pods it covers: such a window reuses it instead of creating its own, or needs its own
/// once it is gone. Its status changes, which follow every pod change, concern only the windows
/// that own it (they wait for the disruption controller to compute their PDB) — before and after
/// the change, so a window that just released a shared PDB sees the release.
#[derive(Default)]
pub struct PdbTriggers {
    seen: HashMap<ObjectRef<PodDisruptionBudget>, Seen>,
}

/// A PDB's last generation and owning windows.
type Seen = (Option<i64>, Vec<ObjectRef<TestWindow>>);

/// Who should look again after a PDB event.
#[derive(Debug, PartialEq)]
pub enum PdbConcerns {
    /// The windows selecting (or having written to) a pod of `namespace` that `selector`
    /// covers, and the PDB's owners.
    Covered {
        namespace: String,
        selector: Option<LabelSelector>,
        owners: Vec<ObjectRef<TestWindow>>,
    },
    /// These windows (the PDB's owners, before and after).
    Owners(Vec<ObjectRef<TestWindow>>),
}

fn owners(pdb: &PodDisruptionBudget) -> Vec<ObjectRef<TestWindow>> {
    let ns = pdb.namespace().unwrap_or_default();
    pdb.owner_references()
        .iter()
        .filter(|o| o.kind == "TestWindow")
        .map(|o| ObjectRef::new(&o.name).within(&ns))
        .collect()
}

fn covered(pdb: &PodDisruptionBudget, mut owners: Vec<ObjectRef<TestWindow>>) -> PdbConcerns {
    owners.sort_by(|a, b| a.name.cmp(&b.name));
    owners.dedup();
    PdbConcerns::Covered {
        namespace: pdb.namespace().unwrap_or_default(),
        selector: pdb.spec.as_ref().and_then(|s| s.selector.clone()),
        owners,
    }
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
                let mut all = before
                    .as_ref()
                    .map(|(_, was)| was.clone())
                    .unwrap_or_default();
                all.extend(now);
                match before {
                    Some((g, _)) if g == generation => {
                        all.sort_by(|a, b| a.name.cmp(&b.name));
                        all.dedup();
                        (!all.is_empty()).then_some(PdbConcerns::Owners(all))
                    }
                    _ => Some(covered(pdb, all)),
                }
            }
            watcher::Event::Delete(pdb) => {
                let was = self.seen.remove(&ObjectRef::from_obj(pdb));
                let mut all = was.map(|(_, was)| was).unwrap_or_default();
                all.extend(owners(pdb));
                Some(covered(pdb, all))
            }
            watcher::Event::Init | watcher::Event::InitDone => None,
        }
    }

    /// The window refs of `concerns`, reading pods and windows from the caches.
    pub fn refs(
        concerns: PdbConcerns,
        windows: &Store<TestWindow>,
        pods: &Pods,
    ) -> Vec<ObjectRef<TestWindow>> {
        match concerns {
            PdbConcerns::Owners(refs) => refs,
            PdbConcerns::Covered {
                namespace,
                selector,
                owners,
            } => {
                let covered: Vec<_> = pods
                    .in_namespace(&namespace)
                    .into_iter()
                    .filter(|p| selector::optional_matches(selector.as_ref(), p.labels()))
                    .collect();
                let mut refs = owners;
                // Pods with the same labels concern the same windows: look each label set up once.
                let mut label_sets = BTreeSet::new();
                for pod in &covered {
                    let uids = window_uids(&pod.metadata);
                    if label_sets.insert(pod.labels()) || !uids.is_empty() {
                        refs.extend(windows_for(windows, Some(&namespace), pod.labels(), &uids));
                    }
                }
                refs.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
                refs.dedup();
                refs
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector;
    use serde_json::json;

    fn pdb(generation: i64, owners: &[&str], healthy: i32) -> PodDisruptionBudget {
        let refs: Vec<_> = owners
            .iter()
            .map(|o| json!({"apiVersion": "disruption-guard.io/v1alpha1", "kind": "TestWindow", "name": o, "uid": format!("u-{o}")}))
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": "api", "namespace": "shop", "generation": generation, "ownerReferences": refs},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "api"}}},
            "status": {"currentHealthy": healthy, "desiredHealthy": 1, "disruptionsAllowed": 0, "expectedPods": 1}
        }))
        .unwrap()
    }

    fn refs(names: &[&str]) -> Vec<ObjectRef<TestWindow>> {
        names
            .iter()
            .map(|n| ObjectRef::new(n).within("shop"))
            .collect()
    }

    fn covered(owners: &[&str]) -> Option<PdbConcerns> {
        Some(PdbConcerns::Covered {
            namespace: "shop".into(),
            selector: Some(serde_json::from_value(json!({"matchLabels": {"app": "api"}})).unwrap()),
            owners: refs(owners),
        })
    }

    #[test]
    fn only_a_changed_mark_or_a_deletion_is_a_node_change() {
        let node = |taints: serde_json::Value, heartbeat: &str| -> Node {
            serde_json::from_value(json!({
                "metadata": {"name": "n1"},
                "spec": {"taints": taints},
                "status": {"conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": heartbeat}]}
            }))
            .unwrap()
        };
        let mut changes = NodeChanges::default();
        assert!(changes.changed(&node(json!([]), "2026-01-01T00:00:00Z"), true));
        assert!(!changes.changed(&node(json!([]), "2026-01-01T00:00:10Z"), true));
        let tainted = json!([{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]);
        assert!(changes.changed(&node(tainted.clone(), "2026-01-01T00:00:20Z"), true));
        assert!(!changes.changed(&node(tainted.clone(), "2026-01-01T00:00:30Z"), true));
        assert!(changes.changed(&node(tainted, "2026-01-01T00:00:30Z"), false));
    }

    #[test]
    fn a_new_changed_or_deleted_pdb_concerns_the_windows_of_the_pods_it_covers() {
        let mut t = PdbTriggers::default();
        assert_eq!(
            t.on(&watcher::Event::InitApply(pdb(1, &[], 1))),
            covered(&[])
        );
        assert_eq!(
            t.on(&watcher::Event::Apply(pdb(2, &["a"], 1))),
            covered(&["a"])
        );
        assert_eq!(
            t.on(&watcher::Event::Delete(pdb(2, &[], 1))),
            covered(&["a"])
        );
        // Seen again after its deletion: new again.
        assert_eq!(t.on(&watcher::Event::Apply(pdb(2, &[], 1))), covered(&[]));
    }

    #[test]
    fn a_status_change_concerns_only_its_owners_before_and_after() {
        let mut t = PdbTriggers::default();
        t.on(&watcher::Event::Apply(pdb(1, &["a", "b"], 0)));
        let owners = |names| Some(PdbConcerns::Owners(refs(names)));
        assert_eq!(
            t.on(&watcher::Event::Apply(pdb(1, &["a", "b"], 1))),
            owners(&["a", "b"])
        );
        // b released it: b still hears of it.
        assert_eq!(
            t.on(&watcher::Event::Apply(pdb(1, &["a"], 1))),
            owners(&["a", "b"])
        );
        assert_eq!(
            t.on(&watcher::Event::Apply(pdb(1, &["a"], 0))),
            owners(&["a"])
        );
    }

    #[test]
    fn a_status_change_of_a_pdb_no_window_owns_concerns_nobody() {
        let mut t = PdbTriggers::default();
        t.on(&watcher::Event::Apply(pdb(3, &[], 1)));
        assert_eq!(t.on(&watcher::Event::Apply(pdb(3, &[], 0))), None);
    }

    fn store<K>(items: Vec<serde_json::Value>) -> Store<K>
    where
        K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + 'static,
    {
        let (reader, mut writer) = reflector::store();
        for item in items {
            writer.apply_watcher_event(&watcher::Event::Apply(
                serde_json::from_value(item).unwrap(),
            ));
        }
        reader
    }

    fn window(name: &str, ns: &str, app: &str) -> serde_json::Value {
        json!({"apiVersion": "disruption-guard.io/v1alpha1", "kind": "TestWindow",
               "metadata": {"name": name, "namespace": ns, "uid": format!("u-{name}")},
               "spec": {"selector": {"matchLabels": {"app": app}}, "ttl": "30m"}})
    }

    fn pod(name: &str, ns: &str, app: &str) -> serde_json::Value {
        json!({"metadata": {"name": name, "namespace": ns, "labels": {"app": app}}})
    }

    #[tokio::test]
    async fn covered_pods_lead_to_the_windows_selecting_them_and_no_others() {
        let windows = store::<TestWindow>(vec![
            window("api-tests", "shop", "api"),
            window("web-tests", "shop", "web"),
            window("api-elsewhere", "other", "api"),
        ]);
        let pods = Pods::holding(
            [
                pod("api-1", "shop", "api"),
                pod("api-2", "shop", "api"),
                pod("web-1", "shop", "web"),
                pod("api-1", "other", "api"),
            ]
            .into_iter()
            .map(|p| serde_json::from_value(p).unwrap())
            .collect(),
        );
        let got = PdbTriggers::refs(covered(&["owner"]).unwrap(), &windows, &pods);
        assert_eq!(got, refs(&["api-tests", "owner"]));
    }
}
