//! The pod cache's indexes: the pods of each namespace and of each node, so a reconcile reads
//! only its namespace's pods and a node change only that node's, instead of scanning every pod
//! in the cluster.
//!
//! The index holds references (one shared key per pod: at 10,000 pods a key copied into each
//! map cost about 9 MiB); the pods themselves stay in the reflector store. It is kept by
//! the pod watch's task from the same events as the store, after the store: a reader that
//! finds a reference whose pod is gone skips it, and a pod that is not indexed yet is handed on
//! (to the window controller and the drain watcher) only after it is.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};

use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

use crate::resources::PodDigest;

/// One pod's key, shared by every map that holds it: name and namespace only (no
/// resourceVersion or uid, which a lookup ignores anyway), allocated once per pod.
type Key = Arc<ObjectRef<PodDigest>>;

fn object_ref(pod: &PodDigest) -> ObjectRef<PodDigest> {
    let key = ObjectRef::new(pod.metadata.name.as_deref().unwrap_or_default());
    match pod.metadata.namespace.as_deref() {
        Some(ns) => key.within(ns),
        None => key,
    }
}

#[derive(Default)]
struct Index {
    by_namespace: HashMap<String, HashSet<Key>>,
    /// Node names are shared with `places`.
    by_node: HashMap<Arc<str>, HashSet<Key>>,
    /// The node each pod is indexed under (its namespace is in its key).
    places: HashMap<Key, Option<Arc<str>>>,
}

impl Index {
    fn insert(&mut self, pod: &PodDigest) {
        let node = pod.node_name();
        let key = match self.places.get_key_value(&object_ref(pod)) {
            Some((_, place)) if place.as_deref() == node => return,
            Some((key, _)) => {
                let key = key.clone();
                self.remove(&key);
                key
            }
            None => Arc::new(object_ref(pod)),
        };
        let namespace = key.namespace.clone().unwrap_or_default();
        self.by_namespace
            .entry(namespace)
            .or_default()
            .insert(key.clone());
        let node = node.map(|n| self.node_name(n));
        if let Some(node) = &node {
            self.by_node
                .entry(node.clone())
                .or_default()
                .insert(key.clone());
        }
        self.places.insert(key, node);
    }

    /// `node` as the index already holds it, so every pod on a node shares one name.
    fn node_name(&self, node: &str) -> Arc<str> {
        self.by_node
            .get_key_value(node)
            .map_or_else(|| Arc::from(node), |(name, _)| name.clone())
    }

    fn remove(&mut self, key: &ObjectRef<PodDigest>) {
        let Some((key, node)) = self.places.remove_entry(key) else {
            return;
        };
        drop_from(
            &mut self.by_namespace,
            key.namespace.as_deref().unwrap_or_default(),
            &key,
        );
        if let Some(node) = &node {
            drop_from(&mut self.by_node, node, &key);
        }
    }
}

fn drop_from<K>(map: &mut HashMap<K, HashSet<Key>>, at: &str, key: &Key)
where
    K: std::borrow::Borrow<str> + std::hash::Hash + Eq,
{
    if let Some(set) = map.get_mut(at) {
        set.remove(key);
        if set.is_empty() {
            map.remove(at);
        }
    }
}

/// The indexes, shared by the caches' readers; cheap to clone.
#[derive(Clone, Default)]
pub struct PodIndex {
    current: Arc<RwLock<Index>>,
}

/// Keeps a [`PodIndex`] from the pod watch's events; owned by the watch's task.
#[derive(Default)]
pub struct PodIndexer {
    index: PodIndex,
    /// The index being rebuilt by a re-list, swapped in when it completes (as the store does).
    relisting: Option<Index>,
}

impl PodIndexer {
    /// The index this indexer keeps.
    pub fn index(&self) -> PodIndex {
        self.index.clone()
    }

    /// Applies one watch event.
    pub fn apply(&mut self, event: &watcher::Event<PodDigest>) {
        match event {
            watcher::Event::Apply(pod) => self.index.write().insert(pod),
            watcher::Event::Delete(pod) => self.index.write().remove(&object_ref(pod)),
            watcher::Event::Init => self.relisting = Some(Index::default()),
            watcher::Event::InitApply(pod) => self
                .relisting
                .get_or_insert_with(Index::default)
                .insert(pod),
            watcher::Event::InitDone => {
                if let Some(fresh) = self.relisting.take() {
                    *self.index.write() = fresh;
                }
            }
        }
    }
}

impl PodIndex {
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Index> {
        self.current.write().expect("pod index lock")
    }

    fn refs(&self, pick: impl Fn(&Index) -> Option<&HashSet<Key>>) -> Vec<Key> {
        let index = self.current.read().expect("pod index lock");
        pick(&index)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The pods of `namespace`, from `store`.
    pub fn in_namespace(&self, store: &Store<PodDigest>, namespace: &str) -> Vec<Arc<PodDigest>> {
        let refs = self.refs(|i| i.by_namespace.get(namespace));
        refs.iter().filter_map(|r| store.get(r)).collect()
    }

    /// The pods bound to `node`, from `store`.
    pub fn on_node(&self, store: &Store<PodDigest>, node: &str) -> Vec<Arc<PodDigest>> {
        let refs = self.refs(|i| i.by_node.get(node));
        refs.iter().filter_map(|r| store.get(r)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector;

    fn pod(ns: &str, name: &str, node: Option<&str>) -> PodDigest {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": ns, "uid": format!("{ns}-{name}")},
            "spec": {"nodeName": node},
        }))
        .unwrap()
    }

    /// A store and an index fed the same events, as the pod watch feeds them.
    fn feed(events: Vec<watcher::Event<PodDigest>>) -> (Store<PodDigest>, PodIndex) {
        let (store, mut writer) = reflector::store();
        let mut indexer = PodIndexer::default();
        for e in events {
            writer.apply_watcher_event(&e);
            indexer.apply(&e);
        }
        (store, indexer.index())
    }

    fn names(pods: Vec<Arc<PodDigest>>) -> Vec<String> {
        let mut n: Vec<String> = pods
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect();
        n.sort();
        n
    }

    #[test]
    fn pods_are_found_by_namespace_and_by_node() {
        use watcher::Event::*;
        let (store, index) = feed(vec![
            Init,
            InitApply(pod("shop", "a", Some("n1"))),
            InitApply(pod("shop", "b", None)),
            InitApply(pod("ci", "c", Some("n1"))),
            InitDone,
        ]);
        assert_eq!(names(index.in_namespace(&store, "shop")), ["a", "b"]);
        assert_eq!(names(index.on_node(&store, "n1")), ["a", "c"]);
        assert!(index.on_node(&store, "n2").is_empty());
    }

    #[test]
    fn a_pod_bound_later_or_deleted_moves_or_leaves_the_index() {
        use watcher::Event::*;
        let (store, index) = feed(vec![
            Init,
            InitApply(pod("shop", "a", None)),
            InitDone,
            Apply(pod("shop", "a", Some("n2"))),
            Apply(pod("shop", "b", Some("n2"))),
            Delete(pod("shop", "b", Some("n2"))),
        ]);
        assert_eq!(names(index.on_node(&store, "n2")), ["a"]);
        assert_eq!(names(index.in_namespace(&store, "shop")), ["a"]);
    }

    #[test]
    fn a_relist_replaces_the_index_so_pods_deleted_meanwhile_go() {
        use watcher::Event::*;
        let (store, index) = feed(vec![
            Init,
            InitApply(pod("shop", "a", Some("n1"))),
            InitApply(pod("shop", "gone", Some("n1"))),
            InitDone,
            Init,
            InitApply(pod("shop", "a", Some("n1"))),
            InitDone,
        ]);
        assert_eq!(names(index.on_node(&store, "n1")), ["a"]);
        let index = index.current.read().unwrap();
        assert_eq!(index.places.len(), 1);
    }
}
