//! How many `?wait=true` requests each identity may have in progress at once
//! (`--max-waits-per-identity`). A wait holds a connection and a watch on the Kubernetes API
//! server for up to ten minutes; without a cap one client could hold hundreds of both. A slot is
//! taken before the request changes anything, so a refused wait (a 429) has applied nothing,
//! and is given back when the wait ends, however it ends (the [`WaitSlot`] drops). How long
//! the identity's waits last tells a refused one when to come back ([`super::wait_retry`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::wait_retry;

/// Waits in progress, by identity.
#[derive(Debug)]
pub struct WaitLimiter {
    max_per_identity: usize,
    in_progress: Mutex<HashMap<String, Waits>>,
}

/// One identity's waits: when each in progress started, and how long its recent ones lasted.
#[derive(Debug, Default)]
struct Waits {
    started: Vec<Instant>,
    /// The mean duration of its waits that ended while it had waits in progress.
    mean: Option<Duration>,
}

/// One wait in progress; dropping it ends the wait.
#[derive(Debug)]
pub struct WaitSlot {
    limiter: Arc<WaitLimiter>,
    identity: String,
    started: Instant,
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

    /// A slot for one more wait of `identity`; when it already has the maximum, how long to
    /// wait before asking again (`Retry-After`, [`wait_retry::retry_after`]).
    pub fn try_acquire(self: &Arc<Self>, identity: &str) -> Result<WaitSlot, Duration> {
        let now = Instant::now();
        let mut map = self.in_progress.lock().expect("wait limiter lock");
        let waits = map.entry(identity.to_string()).or_default();
        if waits.started.len() >= self.max_per_identity {
            let ages: Vec<Duration> = waits.started.iter().map(|s| now - *s).collect();
            let retry_after = wait_retry::retry_after(waits.mean, &ages);
            if waits.started.is_empty() {
                map.remove(identity);
            }
            return Err(retry_after);
        }
        waits.started.push(now);
        Ok(WaitSlot {
            limiter: self.clone(),
            identity: identity.to_string(),
            started: now,
        })
    }

    /// Waits of `identity` in progress.
    pub fn in_progress(&self, identity: &str) -> usize {
        let map = self.in_progress.lock().expect("wait limiter lock");
        map.get(identity).map_or(0, |w| w.started.len())
    }

    /// Waits in progress, every identity together.
    pub fn total(&self) -> usize {
        let map = self.in_progress.lock().expect("wait limiter lock");
        map.values().map(|w| w.started.len()).sum()
    }
}

impl Drop for WaitSlot {
    fn drop(&mut self) {
        let mut map = self.limiter.in_progress.lock().expect("wait limiter lock");
        if let Some(waits) = map.get_mut(&self.identity) {
            if let Some(i) = waits.started.iter().position(|s| *s == self.started) {
                waits.started.swap_remove(i);
            }
            waits.mean = Some(wait_retry::mean_after(waits.mean, self.started.elapsed()));
            if waits.started.is_empty() {
                // Identities come and go: keep only those with waits in progress (and with
                // them what their recent waits say).
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
        assert!(limiter.try_acquire("a").is_err());
        let _b1 = limiter.try_acquire("b").unwrap();
        assert_eq!((limiter.in_progress("a"), limiter.total()), (2, 3));
        drop(a1);
        assert!(limiter.try_acquire("a").is_ok());
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
        assert_eq!(limiter.try_acquire("a").unwrap_err(), wait_retry::MAX);
        assert!(limiter.in_progress.lock().unwrap().is_empty());
    }

    #[test]
    fn a_refused_wait_comes_back_when_the_identitys_waits_are_expected_to_end() {
        let limiter = WaitLimiter::new(2);
        let first = limiter.try_acquire("a").unwrap();
        let _second = limiter.try_acquire("a").unwrap();
        assert_eq!(
            limiter.try_acquire("a").unwrap_err(),
            wait_retry::MIN,
            "none ended yet, and the oldest has only just started"
        );
        drop(first);
        let _third = limiter.try_acquire("a").unwrap();
        assert_eq!(limiter.try_acquire("a").unwrap_err(), wait_retry::MIN);
        let recorded = limiter.in_progress.lock().unwrap()["a"].mean;
        assert!(
            recorded.is_some_and(|m| m < Duration::from_secs(1)),
            "the ended wait is remembered while the identity waits: {recorded:?}"
        );
    }
}
