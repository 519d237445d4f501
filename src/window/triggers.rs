//! Which windows a change of a watched object concerns. A change reconciles only the windows it
//! can alter: with many windows in one namespace, fanning every pod, node or PDB change out to
//! all of them would make each change cost a reconcile per window.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

use super::changes::{self, Fingerprint};
use crate::k8s::fields::window_uids;
use crate::k8s::selector;
use crate::resources::{PodDigest, TestWindow};
use crate::runtime::Pods;

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
/// once it is gone. Its owners (before and after the change, so a window that just released a
/// shared PDB sees the release) look again when what they read of it changed: the disruption
/// controller's `observedGeneration` (they wait for it to compute their PDB), its labels, its
/// deletion, its owners. The status changes that follow every pod change concern nobody, and a
/// change of one window's entry (another window joining a shared PDB) concerns that window.
#[derive(Default)]
pub struct PdbTriggers {
    seen: HashMap<ObjectRef<PodDisruptionBudget>, Seen>,
}

/// A PDB's last generation, owning windows, what its owners read of it and its windows' entries.
type Seen = (
    Option<i64>,
    Vec<ObjectRef<TestWindow>>,
    Fingerprint,
    BTreeMap<String, u64>,
);

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
    /// The windows with these UIDs (whose entries changed).
    Entries(BTreeSet<String>),
}

fn owners(pdb: &PodDisruptionBudget) -> Vec<ObjectRef<TestWindow>> {
    let ns = pdb.namespace().unwrap_or_default();
    pdb.owner_references()
        .iter()
        .filter(|o| o.kind == "TestWindow")
        .map(|o| ObjectRef::new(&o.name).within(&ns))
        .collect()
}

/// What a PDB's owners read of it beside its spec: the disruption controller's
/// `observedGeneration`, its labels and its deletion.
fn read_by_owners(pdb: &PodDisruptionBudget) -> Fingerprint {
    let mut h = DefaultHasher::new();
    pdb.status
        .as_ref()
        .and_then(|s| s.observed_generation)
        .hash(&mut h);
    pdb.metadata.labels.hash(&mut h);
    pdb.metadata.deletion_timestamp.is_some().hash(&mut h);
    h.finish()
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
                let (shared, entries) = (read_by_owners(pdb), changes::entries(&pdb.metadata));
                let seen = (generation, now.clone(), shared, entries.clone());
                let before = self.seen.insert(key, seen);
                match before {
                    Some((g, was, was_shared, was_entries)) if g == generation => {
                        if was_shared == shared && was == now {
                            let changed = changes::changed_entries(&was_entries, &entries);
                            return (!changed.is_empty()).then_some(PdbConcerns::Entries(changed));
                        }
                        let mut all = was;
                        all.extend(now);
                        all.sort_by(|a, b| a.name.cmp(&b.name));
                        all.dedup();
                        (!all.is_empty()).then_some(PdbConcerns::Owners(all))
                    }
                    before => {
                        let mut all = before.map(|(_, was, _, _)| was).unwrap_or_default();
                        all.extend(now);
                        Some(covered(pdb, all))
                    }
                }
            }
            watcher::Event::Delete(pdb) => {
                let was = self.seen.remove(&ObjectRef::from_obj(pdb));
                let mut all = was.map(|(_, was, _, _)| was).unwrap_or_default();
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
            PdbConcerns::Entries(uids) => windows_for(windows, None, &BTreeMap::new(), &uids),
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
    use crate::k8s::fields::tests::entry;
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

    /// `p` once the disruption controller computed generation `observed`.
    fn computed(mut p: PodDisruptionBudget, observed: i64) -> PodDisruptionBudget {
        p.status.as_mut().unwrap().observed_generation = Some(observed);
        p
    }

    #[test]
    fn a_computed_status_or_new_owners_concern_the_owners_before_and_after() {
        let mut t = PdbTriggers::default();
        t.on(&watcher::Event::Apply(pdb(1, &["a", "b"], 0)));
        let owners = |names| Some(PdbConcerns::Owners(refs(names)));
        assert_eq!(
            t.on(&watcher::Event::Apply(computed(pdb(1, &["a", "b"], 0), 1))),
            owners(&["a", "b"])
        );
        // b released it: b still hears of it.
        assert_eq!(
            t.on(&watcher::Event::Apply(computed(pdb(1, &["a"], 1), 1))),
            owners(&["a", "b"])
        );
    }

    #[test]
    fn the_status_churn_of_every_pod_change_concerns_nobody() {
        let mut t = PdbTriggers::default();
        t.on(&watcher::Event::Apply(computed(pdb(1, &["a"], 1), 1)));
        assert_eq!(
            t.on(&watcher::Event::Apply(computed(pdb(1, &["a"], 0), 1))),
            None
        );
    }

    #[test]
    fn a_window_joining_a_shared_pdb_concerns_that_window_only() {
        let mut t = PdbTriggers::default();
        let mut p = computed(pdb(1, &["a"], 1), 1);
        p.metadata.managed_fields = Some(vec![entry("disruption-guard/u-a", &[])]);
        t.on(&watcher::Event::Apply(p.clone()));
        p.metadata
            .managed_fields
            .as_mut()
            .unwrap()
            .push(entry("disruption-guard/u-c", &[]));
        assert_eq!(
            t.on(&watcher::Event::Apply(p)),
            Some(PdbConcerns::Entries(BTreeSet::from(["u-c".to_string()])))
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
