//! A small cache of answers that stay good for a while: at most `capacity` entries, each
//! served for `ttl` after it was stored. When full, the least recently used entry makes room
//! (`lru`), so a burst of new keys pushes out the coldest answers one by one instead of
//! emptying the cache of the hot ones. The HTTP API keeps its positive TokenReview and
//! SubjectAccessReview answers in two of these.

use std::hash::Hash;
use std::num::NonZeroUsize;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lru::LruCache;

/// Entries good for `ttl`, at most `capacity` of them.
#[derive(Debug)]
pub struct FreshCache<K: Hash + Eq, V: Clone> {
    ttl: Duration,
    entries: Mutex<LruCache<K, (V, Instant)>>,
}

impl<K: Hash + Eq, V: Clone> FreshCache<K, V> {
    /// A cache of at most `capacity` (at least 1) entries, each good for `ttl`.
    pub fn new(capacity: usize, ttl: Duration) -> Self {
        let capacity = NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN);
        Self {
            ttl,
            entries: Mutex::new(LruCache::new(capacity)),
        }
    }

    /// The value stored for `key` less than `ttl` ago; a stale one is dropped.
    pub fn get(&self, key: &K) -> Option<V> {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        match entries.get(key) {
            Some((value, at)) if at.elapsed() < self.ttl => Some(value.clone()),
            Some(_) => {
                entries.pop(key);
                None
            }
            None => None,
        }
    }

    /// Stores `value` for `key`, good from now.
    pub fn insert(&self, key: K, value: V) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.put(key, (value, Instant::now()));
    }

    /// Entries held now, stale ones included.
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_served_until_its_ttl_and_then_dropped() {
        let cache = FreshCache::new(10, Duration::from_millis(200));
        cache.insert("a", 1);
        assert_eq!(cache.get(&"a"), Some(1));
        std::thread::sleep(Duration::from_millis(250));
        assert_eq!(cache.get(&"a"), None);
        assert!(cache.is_empty(), "the stale entry is gone");
    }

    #[test]
    fn a_flood_of_new_keys_pushes_out_the_coldest_not_the_hot_ones() {
        let cache = FreshCache::new(100, Duration::from_secs(60));
        cache.insert("hot".to_string(), 0);
        for n in 0..10_000 {
            cache.insert(format!("flood-{n}"), n);
            if n % 50 == 0 {
                assert_eq!(cache.get(&"hot".to_string()), Some(0), "after {n}");
            }
        }
        assert_eq!(cache.len(), 100);
        assert_eq!(cache.get(&"hot".to_string()), Some(0));
        assert_eq!(cache.get(&"flood-0".to_string()), None, "the coldest went");
    }
}
