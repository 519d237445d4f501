//! A model test of the namespace's protection: random sequences of opening, closing, expiry,
//! renewal, a crash part-way through a pass, and a person's edits, against an in-memory API
//! server that keeps annotations and their field managers as server-side apply does. After
//! every step and one full pass, the rules hold: every pod an open window selects is protected
//! (pod, node, PDB); nothing of the guard's is left where no open window wants it; a value a
//! person set is never changed; and a second pass finds nothing to write.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use jiff::Timestamp;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use super::plan::{Target, WindowFacts, World, Write, plan, without_conflicts};
use crate::k8s::fields::tests::{entry, entry_with};
use crate::resources::Protect;
use crate::resources::names::{CA_SAFE_TO_EVICT, CA_SCALE_DOWN_DISABLED, KARPENTER_DO_NOT_DISRUPT};

const NS: &str = "shop";
const MANAGER: &str = "disruption-guard/shop";
const PERSON: &str = "kubectl-annotate";
const APPS: [&str; 2] = ["api", "db"];

/// An object's annotations and who owns each, as the API server records them.
#[derive(Clone, Debug, Default)]
struct Annotated {
    values: BTreeMap<String, String>,
    owners: BTreeMap<String, BTreeSet<String>>,
}

impl Annotated {
    /// A server-side apply of exactly `wanted` by `manager`, not forced; one refused with a
    /// conflict is made again as the writer does ([`without_conflicts`]).
    fn apply(&mut self, manager: &str, wanted: &BTreeMap<String, String>) {
        let conflict = wanted.iter().any(|(k, v)| {
            let others = self
                .owners
                .iter()
                .any(|(m, keys)| m != manager && keys.contains(k));
            others && self.values.get(k) != Some(v)
        });
        let wanted = &if conflict {
            let meta = serde_json::from_value(self.meta()).unwrap();
            without_conflicts(wanted.clone(), &meta, manager)
        } else {
            wanted.clone()
        };
        for (k, v) in wanted {
            self.values.insert(k.clone(), v.clone());
        }
        let before = self.owners.remove(manager).unwrap_or_default();
        for gone in before.iter().filter(|k| !wanted.contains_key(*k)) {
            if !self.owners.values().any(|keys| keys.contains(gone)) {
                self.values.remove(gone);
            }
        }
        if !wanted.is_empty() {
            self.owners
                .insert(manager.into(), wanted.keys().cloned().collect());
        }
    }

    /// A person's `kubectl annotate --overwrite key=value`: an update takes the key over.
    fn person_sets(&mut self, key: &str, value: &str) {
        for keys in self.owners.values_mut() {
            keys.remove(key);
        }
        self.owners.retain(|_, keys| !keys.is_empty());
        self.values.insert(key.into(), value.into());
        self.owners
            .entry(PERSON.into())
            .or_default()
            .insert(key.into());
    }

    /// A person's `kubectl annotate key-`.
    fn person_removes(&mut self, key: &str) {
        self.values.remove(key);
        for keys in self.owners.values_mut() {
            keys.remove(key);
        }
        self.owners.retain(|_, keys| !keys.is_empty());
    }

    fn meta(&self) -> serde_json::Value {
        let fields: Vec<_> = self
            .owners
            .iter()
            .map(|(m, keys)| {
                let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
                serde_json::to_value(entry(m, &keys)).unwrap()
            })
            .collect();
        json!({"annotations": self.values, "managedFields": fields})
    }
}

/// The cluster: four pods of two Deployments on three nodes, the guard PDBs, and the windows.
struct Cluster {
    pods: Vec<(String, &'static str, String, Annotated)>,
    nodes: Vec<(String, Annotated)>,
    pdbs: BTreeMap<String, serde_json::Value>,
    windows: Vec<WindowFacts>,
    next_uid: u32,
}

impl Cluster {
    fn new() -> Self {
        let pods = (0..4)
            .map(|i| {
                let app = APPS[i % 2];
                (
                    format!("{app}-{i}"),
                    app,
                    format!("n{}", i % 3),
                    Annotated::default(),
                )
            })
            .collect();
        let nodes = (0..3)
            .map(|i| (format!("n{i}"), Annotated::default()))
            .collect();
        Self {
            pods,
            nodes,
            pdbs: BTreeMap::new(),
            windows: vec![],
            next_uid: 0,
        }
    }

    fn world(&self) -> World {
        let pods = self.pods.iter().map(|(name, app, node, a)| {
            let mut meta = a.meta();
            meta["name"] = json!(name);
            meta["namespace"] = json!(NS);
            meta["uid"] = json!(format!("uid-{name}"));
            meta["labels"] = json!({"app": app});
            meta["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": format!("{app}-rs"), "uid": format!("uid-{app}-rs"), "controller": true}]);
            obj(json!({"metadata": meta, "spec": {"nodeName": node},
                "status": {"phase": "Running", "startTime": "2026-01-01T10:00:00Z"}}))
        });
        let nodes = self.nodes.iter().map(|(name, a)| {
            let mut meta = a.meta();
            meta["name"] = json!(name);
            meta["uid"] = json!(format!("uid-{name}"));
            obj(json!({"metadata": meta}))
        });
        let replica_sets = APPS.iter().map(|app| {
            obj(
                json!({"metadata": {"name": format!("{app}-rs"), "namespace": NS,
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": app,
                    "uid": format!("uid-{app}"), "controller": true}]},
                "spec": {"selector": {"matchLabels": {"app": app}}}}),
            )
        });
        let deployments = APPS.iter().map(|app| {
            obj(json!({"metadata": {"name": app, "namespace": NS},
                "spec": {"selector": {"matchLabels": {"app": app}}, "template": {}}}))
        });
        World {
            pods: pods.collect(),
            nodes: nodes.collect(),
            replica_sets: replica_sets.collect(),
            deployments: deployments.collect(),
            pdbs: self.pdbs.values().cloned().map(obj).collect(),
            ..Default::default()
        }
    }

    /// Makes `writes` as the API server would.
    fn write(&mut self, writes: &[Write]) {
        for write in writes {
            match write {
                Write::Annotate {
                    target,
                    name,
                    manager,
                    annotations,
                    ..
                } => {
                    let object = match target {
                        Target::Pod => &mut self.pods.iter_mut().find(|p| p.0 == *name).unwrap().3,
                        Target::Node => {
                            &mut self.nodes.iter_mut().find(|n| n.0 == *name).unwrap().1
                        }
                        Target::NodeClaim => unreachable!("no NodeClaims here"),
                        Target::Pdb => unreachable!("no earlier version's PDBs here"),
                    };
                    object.apply(manager, annotations);
                }
                Write::ApplyPdb { name, workload } => {
                    let fields = entry_with(
                        MANAGER,
                        json!({"f:metadata": {"f:labels": {
                        "f:app.kubernetes.io/managed-by": {}}}, "f:spec": {"f:maxUnavailable": {}, "f:selector": {}}}),
                    );
                    self.pdbs.insert(
                        name.clone(),
                        json!({
                        "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}"),
                            "resourceVersion": "1",
                            "labels": {"app.kubernetes.io/managed-by": "disruption-guard"},
                            "managedFields": [fields]},
                        "spec": {"maxUnavailable": 0, "selector": workload.selector}}),
                    );
                }
                Write::DeletePdb { name, .. } => {
                    self.pdbs.remove(name);
                }
            }
        }
    }

    fn open(&mut self, rng: &mut StdRng) {
        self.next_uid += 1;
        let app = APPS[rng.random_range(0..2)];
        let selector = if rng.random_bool(0.2) {
            json!({})
        } else {
            json!({"matchLabels": {"app": app}})
        };
        self.windows.push(WindowFacts {
            uid: format!("w{}", self.next_uid),
            namespace: NS.into(),
            selector: serde_json::from_value(selector).unwrap(),
            protect: Protect {
                karpenter_duration: rng.random_bool(0.5),
                ..Protect::default()
            },
            active: true,
            expires_at: expiry(rng),
            admitted: None,
        });
    }
}

fn obj<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> Arc<T> {
    Arc::new(serde_json::from_value(v).expect("fixture"))
}

fn expiry(rng: &mut StdRng) -> Timestamp {
    let minutes = rng.random_range(30..240);
    "2026-01-01T10:00:00Z"
        .parse::<Timestamp>()
        .unwrap()
        .checked_add(jiff::SignedDuration::from_mins(minutes))
        .unwrap()
}

/// Checks the rules against the cluster after a full pass; `person` holds the values a person
/// set (object name and key → value).
fn check(c: &Cluster, person: &BTreeMap<(String, String), String>, step: &str) {
    let world = c.world();
    let open: Vec<&WindowFacts> = c.windows.iter().filter(|w| w.active).collect();
    let selects = |w: &WindowFacts, app: &str| {
        crate::k8s::selector::matches(&w.selector, &BTreeMap::from([("app".into(), app.into())]))
    };
    let mut wanted_nodes = BTreeSet::new();
    let mut wanted_pdbs = BTreeSet::new();
    for (name, app, node, a) in &c.pods {
        let by: Vec<&&WindowFacts> = open.iter().filter(|w| selects(w, app)).collect();
        let guard_keys: BTreeSet<&String> = a
            .owners
            .get(MANAGER)
            .map(|k| k.iter().collect())
            .unwrap_or_default();
        if by.is_empty() {
            assert!(guard_keys.is_empty(), "{step}: {name} released: {a:?}");
            continue;
        }
        wanted_nodes.insert(node.clone());
        wanted_pdbs.insert(format!("{app}-dg"));
        for key in [KARPENTER_DO_NOT_DISRUPT, CA_SAFE_TO_EVICT] {
            assert!(
                a.values.contains_key(key),
                "{step}: {name} lacks {key}: {a:?}"
            );
        }
        if !person.contains_key(&(name.clone(), KARPENTER_DO_NOT_DISRUPT.into())) {
            let value = &a.values[KARPENTER_DO_NOT_DISRUPT];
            let latest = by
                .iter()
                .filter(|w| w.protect.karpenter_duration)
                .map(|w| w.expires_at)
                .max();
            let expected = match latest {
                Some(t) if by.iter().all(|w| w.protect.karpenter_duration) => {
                    super::timing::karpenter_duration(
                        Some("2026-01-01T10:00:00Z".parse().unwrap()),
                        t,
                    )
                }
                _ => "true".into(),
            };
            assert_eq!(*value, expected, "{step}: {name}'s do-not-disrupt");
        }
    }
    for (name, a) in &c.nodes {
        let owned = a.owners.get(MANAGER).is_some_and(|k| !k.is_empty());
        if wanted_nodes.contains(name) {
            for key in [KARPENTER_DO_NOT_DISRUPT, CA_SCALE_DOWN_DISABLED] {
                assert!(
                    a.values.contains_key(key),
                    "{step}: node {name} lacks {key}"
                );
            }
        } else {
            assert!(!owned, "{step}: node {name} released: {a:?}");
        }
    }
    let pdbs: BTreeSet<String> = c.pdbs.keys().cloned().collect();
    assert_eq!(pdbs, wanted_pdbs, "{step}: guard PDBs");
    for ((object, key), value) in person {
        let a = c.pods.iter().find(|p| p.0 == *object).map(|p| &p.3);
        let a = a
            .or_else(|| c.nodes.iter().find(|n| n.0 == *object).map(|n| &n.1))
            .unwrap();
        assert_eq!(
            a.values.get(key),
            Some(value),
            "{step}: the person's {object} {key}"
        );
    }
    let again = plan(NS, &c.windows, &world);
    assert_eq!(again.writes, vec![], "{step}: a second pass writes nothing");
}

#[test]
fn random_histories_keep_the_rules_after_every_step() {
    for seed in 0..200 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut c = Cluster::new();
        let mut person: BTreeMap<(String, String), String> = BTreeMap::new();
        for step in 0..40 {
            let what = match rng.random_range(0..10) {
                0..=2 => {
                    c.open(&mut rng);
                    "open"
                }
                3 | 4 if !c.windows.is_empty() => {
                    let i = rng.random_range(0..c.windows.len());
                    if c.windows[i].active {
                        c.windows[i].active = false;
                        "close or expire"
                    } else {
                        c.windows.remove(i);
                        "delete"
                    }
                }
                5 if !c.windows.is_empty() => {
                    let i = rng.random_range(0..c.windows.len());
                    c.windows[i].expires_at = expiry(&mut rng);
                    "renew"
                }
                6 => {
                    // A crash part-way through a pass: only some of its writes were made.
                    let writes = plan(NS, &c.windows, &c.world()).writes;
                    let made = rng.random_range(0..=writes.len());
                    c.write(&writes[..made]);
                    "crash during a pass"
                }
                7 => {
                    let i = rng.random_range(0..c.pods.len());
                    let name = c.pods[i].0.clone();
                    if rng.random_bool(0.5) {
                        c.pods[i].3.person_sets(KARPENTER_DO_NOT_DISRUPT, "true");
                        person.insert((name, KARPENTER_DO_NOT_DISRUPT.into()), "true".into());
                    } else {
                        c.pods[i].3.person_removes(KARPENTER_DO_NOT_DISRUPT);
                        person.remove(&(name, KARPENTER_DO_NOT_DISRUPT.into()));
                    }
                    "a person's edit"
                }
                _ => "nothing",
            };
            let writes = plan(NS, &c.windows, &c.world()).writes;
            c.write(&writes);
            check(&c, &person, &format!("seed {seed} step {step} ({what})"));
        }
    }
}
