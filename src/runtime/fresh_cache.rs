//! A small cache of answers that stay good for a while: at most `capacity` entries, each
//! served for `ttl` after it was stored, and, when a weight is given
//! ([`FreshCache::with_max_bytes`]), at most that many bytes in all. When full, the least
//! recently used entries make room (`lru`), so a burst of new keys pushes out the coldest
//! answers one by one instead of emptying the cache of the hot ones; an entry heavier than the
//! whole budget is not stored. The HTTP API keeps its positive TokenReview and
//! SubjectAccessReview answers in two of these, weighed by their tokens: a bearer token is as
//! long as the client makes it (hundreds of KiB fit in a request's headers), so a count of
//! entries alone would not bound the memory.

use std::hash::Hash;
use std::num::NonZeroUsize;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lru::LruCache;

/// What an entry weighs, in bytes (an estimate of what it holds on the heap, and its size).
pub type Weigh<K, V> = fn(&K, &V) -> usize;

/// Entries good for `ttl`, at most `capacity` of them and at most `max_bytes` by weight.
#[derive(Debug)]
pub struct FreshCache<K: Hash + Eq, V: Clone> {
    ttl: Duration,
    max_bytes: usize,
    weigh: Weigh<K, V>,
    inner: Mutex<Inner<K, V>>,
}

#[derive(Debug)]
struct Inner<K: Hash + Eq, V> {
    /// Each value, when it was stored, and its weight.
    entries: LruCache<K, (V, Instant, usize)>,
    /// The weights of every entry held, summed.
    bytes: usize,
}

impl<K: Hash + Eq, V: Clone> FreshCache<K, V> {
    /// A cache of at most `capacity` (at least 1) entries, each good for `ttl`, unweighed.
    pub fn new(capacity: usize, ttl: Duration) -> Self {
        let capacity = NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN);
        Self {
            ttl,
            max_bytes: usize::MAX,
            weigh: |_, _| 0,
            inner: Mutex::new(Inner {
                entries: LruCache::new(capacity),
                bytes: 0,
            }),
        }
    }

    /// The same, holding at most `max_bytes` of entries as `weigh` weighs them.
    pub fn with_max_bytes(self, max_bytes: usize, weigh: Weigh<K, V>) -> Self {
        Self {
            max_bytes,
            weigh,
            ..self
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<K, V>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The value stored for `key` less than `ttl` ago; a stale one is dropped.
    pub fn get(&self, key: &K) -> Option<V> {
        let mut inner = self.lock();
        match inner.entries.get(key) {
            Some((value, at, _)) if at.elapsed() < self.ttl => Some(value.clone()),
            Some(_) => {
                if let Some((_, _, weight)) = inner.entries.pop(key) {
                    inner.bytes -= weight;
                }
                None
            }
            None => None,
        }
    }

    /// Stores `value` for `key`, good from now; the least recently used entries make room,
    /// and a value heavier than the whole budget is not stored.
    pub fn insert(&self, key: K, value: V) {
        let weight = (self.weigh)(&key, &value);
        let mut inner = self.lock();
        if weight > self.max_bytes {
            if let Some((_, _, old)) = inner.entries.pop(&key) {
                inner.bytes -= old;
            }
            return;
        }
        // `push` hands back the entry replaced (same key) or pushed out (the coldest).
        if let Some((_, (_, _, old))) = inner.entries.push(key, (value, Instant::now(), weight)) {
            inner.bytes -= old;
        }
        inner.bytes += weight;
        while inner.bytes > self.max_bytes {
            match inner.entries.pop_lru() {
                Some((_, (_, _, old))) => inner.bytes -= old,
                None => break,
            }
        }
    }

    /// Entries held now, stale ones included.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// What the entries held now weigh, stale ones included.
    pub fn bytes(&self) -> usize {
        self.lock().bytes
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

    // The signature `Weigh<String, String>` asks for.
    #[allow(clippy::ptr_arg)]
    fn by_length(key: &String, value: &String) -> usize {
        key.len() + value.len()
    }

    #[test]
    fn a_flood_of_heavy_keys_stays_within_the_bytes_and_keeps_the_hot_ones() {
        const BUDGET: usize = 1024 * 1024;
        let cache =
            FreshCache::new(10_000, Duration::from_secs(60)).with_max_bytes(BUDGET, by_length);
        cache.insert("hot".to_string(), "identity".to_string());
        // 10,000 tokens of 100 KiB each: 1 GB were every entry kept.
        let heavy = "x".repeat(100 * 1024);
        for n in 0..10_000 {
            cache.insert(format!("{n}{heavy}"), format!("user-{n}"));
            assert!(
                cache.bytes() <= BUDGET,
                "after {n}: {} bytes",
                cache.bytes()
            );
            // About ten of these fit: an answer used between them stays.
            if n % 5 == 0 {
                assert!(cache.get(&"hot".to_string()).is_some(), "after {n}");
            }
        }
        assert!(cache.len() <= 11, "{} entries held", cache.len());
        // Light entries still fill the cache up to its count.
        for n in 0..10_000 {
            cache.insert(format!("light-{n}"), String::new());
        }
        assert_eq!(cache.len(), 10_000);
        assert!(cache.bytes() <= BUDGET);
    }

    #[test]
    fn an_entry_heavier_than_the_budget_is_not_stored_and_replacing_one_reweighs_it() {
        let cache = FreshCache::new(10, Duration::from_secs(60)).with_max_bytes(100, by_length);
        cache.insert("a".to_string(), "x".repeat(200));
        assert!(cache.is_empty());
        cache.insert("a".to_string(), "x".repeat(50));
        assert_eq!(cache.bytes(), 51);
        cache.insert("a".to_string(), "x".repeat(10));
        assert_eq!(cache.bytes(), 11);
        cache.insert("a".to_string(), "x".repeat(500));
        assert_eq!((cache.len(), cache.bytes()), (0, 0));
    }
}
