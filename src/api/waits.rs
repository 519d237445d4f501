//! How many `?wait=true` requests each identity may have in progress at once
//! (`--max-waits-per-identity`). A wait holds a connection and a watch on the Kubernetes API
//! server for up to ten minutes; without a cap one client could hold hundreds of both. A slot is
//! taken before the request changes anything, so a refused wait (a 429) has applied nothing,
//! and is given back when the wait ends, however it ends (the [`WaitSlot`] drops).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Waits in progress, by identity.
#[derive(Debug)]
pub struct WaitLimiter {
    max_per_identity: usize,
    in_progress: Mutex<HashMap<String, usize>>,
}

/// One wait in progress; dropping it ends the wait.
#[derive(Debug)]
pub struct WaitSlot {
    limiter: Arc<WaitLimiter>,
    identity: String,
}

impl WaitLimiter {
    /// A limiter allowing `max_per_identity` waits per identity; 0 refuses every wait.
    pub fn new(max_per_identity: usize) -> Arc<Self> {
        Arc::new(Self {
            max_per_identity,
            in_progress: Mutex::new(HashMap::new()),
        })
    }

    /// The limit per identity.
    pub fn max_per_identity(&self) -> usize {
        self.max_per_identity
    }

    /// A slot for one more wait of `identity`, or `None` when it already has the maximum.
    pub fn try_acquire(self: &Arc<Self>, identity: &str) -> Option<WaitSlot> {
        let mut map = self.in_progress.lock().expect("wait limiter lock");
        let count = map.entry(identity.to_string()).or_insert(0);
        if *count >= self.max_per_identity {
            if *count == 0 {
                map.remove(identity);
            }
            return None;
        }
        *count += 1;
        Some(WaitSlot {
            limiter: self.clone(),
            identity: identity.to_string(),
        })
    }

    /// Waits of `identity` in progress.
    pub fn in_progress(&self, identity: &str) -> usize {
        let map = self.in_progress.lock().expect("wait limiter lock");
        map.get(identity).copied().unwrap_or(0)
    }

    /// Waits in progress, every identity together.
    pub fn total(&self) -> usize {
        let map = self.in_progress.lock().expect("wait limiter lock");
        map.values().sum()
    }
}

impl Drop for WaitSlot {
    fn drop(&mut self) {
        let mut map = self.limiter.in_progress.lock().expect("wait limiter lock");
        if let Some(count) = map.get_mut(&self.identity) {
            *count -= 1;
            if *count == 0 {
                // Identities come and go: keep only those with waits in progress.
                map.remove(&self.identity);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_identity_gets_its_maximum_of_waits_while_another_still_gets_its_own() {
        let limiter = WaitLimiter::new(2);
        let a1 = limiter.try_acquire("a").unwrap();
        let _a2 = limiter.try_acquire("a").unwrap();
        assert!(limiter.try_acquire("a").is_none());
        let _b1 = limiter.try_acquire("b").unwrap();
        assert_eq!((limiter.in_progress("a"), limiter.total()), (2, 3));
        drop(a1);
        assert!(limiter.try_acquire("a").is_some());
    }

    #[test]
    fn ended_waits_leave_nothing_behind() {
        let limiter = WaitLimiter::new(3);
        let slots: Vec<_> = (0..3).map(|_| limiter.try_acquire("a").unwrap()).collect();
        drop(slots);
        assert_eq!(limiter.total(), 0);
        assert!(limiter.in_progress.lock().unwrap().is_empty());
    }

    #[test]
    fn a_zero_limit_refuses_every_wait_and_remembers_no_one() {
        let limiter = WaitLimiter::new(0);
        assert!(limiter.try_acquire("a").is_none());
        assert!(limiter.in_progress.lock().unwrap().is_empty());
    }
}
