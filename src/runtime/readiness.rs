//! Readiness gates: each component registers the caches it waits for and marks them synced;
//! `/readyz` answers ready once every gate is synced, the API server answered recently (else
//! every watch is stale: they all ride one connection, see [`super::connection`]) and the
//! process is not shutting down, and no watch is down: a watch task that panicked is restarted
//! by [`super::reflect`], and until its store is listed again the replica is not ready. It also
//! holds what the watches report of the objects they could not represent
//! ([`super::refusals`]): each watch is handed this one value.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long the API server may stay unreachable before the replica says it is not ready. A
/// probe runs every [`super::contact::EVERY`] and waits at most as long, so readiness turns
/// false at most 20 s after the API server stops answering.
pub const STALE_AFTER: Duration = Duration::from_secs(10);

/// Readiness gates: each component registers a name and marks it synced.
#[derive(Debug, Default)]
pub struct Readiness {
    gates: Mutex<BTreeMap<&'static str, bool>>,
    /// Watches that died and are being restarted, with how often each has died.
    down: Mutex<BTreeMap<&'static str, u64>>,
    /// Since when the API server has not answered, if it does not.
    unreachable_since: Mutex<Option<Instant>>,
    /// The objects the watches read but could not represent (clamped or left out), reported.
    pub refusals: super::refusals::Refusals,
}

impl Readiness {
    /// Readiness whose watches report the objects they cannot represent to `refusals`.
    pub fn with_refusals(refusals: super::refusals::Refusals) -> Self {
        Self {
            refusals,
            ..Self::default()
        }
    }

    /// Registers a gate that is not yet synced.
    pub fn register(&self, name: &'static str) {
        self.gates
            .lock()
            .expect("readiness lock")
            .entry(name)
            .or_insert(false);
    }

    /// Marks a gate synced.
    pub fn mark_synced(&self, name: &'static str) {
        let mut gates = self.gates.lock().expect("readiness lock");
        let was_ready = gates.values().all(|ok| *ok);
        gates.insert(name, true);
        let now_ready = gates.values().all(|ok| *ok);
        drop(gates);
        if !was_ready && now_ready {
            // Every initial list is parsed: their buffers can go back to the system.
            super::memory::release_free_pages();
        }
    }

    /// Records that the watch `name` died (its task panicked or its stream ended): the replica
    /// is not ready until [`Self::watch_listed`] says it holds a fresh list again.
    pub fn watch_down(&self, name: &'static str) {
        *self
            .down
            .lock()
            .expect("readiness lock")
            .entry(name)
            .or_default() += 1;
    }

    /// Records that the watch `name` holds a complete list (again).
    pub fn watch_listed(&self, name: &'static str) {
        self.down.lock().expect("readiness lock").remove(name);
    }

    /// Records whether the API server answered a probe at `now`.
    pub fn api_server_answered(&self, answered: bool, now: Instant) {
        let mut since = self.unreachable_since.lock().expect("readiness lock");
        *since = if answered { None } else { since.or(Some(now)) };
    }

    /// What keeps the replica from being ready at `now`: gates not yet synced, and the API
    /// server when it has not answered for longer than [`STALE_AFTER`]. Empty when ready.
    pub fn pending(&self, now: Instant) -> Vec<String> {
        let gates = self.gates.lock().expect("readiness lock");
        let mut pending: Vec<String> = gates
            .iter()
            .filter(|(_, ok)| !**ok)
            .map(|(name, _)| format!("not synced: {name}"))
            .collect();
        drop(gates);
        let down = self.down.lock().expect("readiness lock");
        pending.extend(
            down.iter()
                .map(|(name, times)| format!("watch {name} died ({times}x); restarting it")),
        );
        drop(down);
        let since = *self.unreachable_since.lock().expect("readiness lock");
        if let Some(silent) = stale_for(since, now) {
            pending.push(format!(
                "watches stale: the API server has not answered for {}s",
                silent.as_secs()
            ));
        }
        pending
    }
}

/// How long the API server has been silent, once that is longer than [`STALE_AFTER`].
fn stale_for(unreachable_since: Option<Instant>, now: Instant) -> Option<Duration> {
    let silent = now.saturating_duration_since(unreachable_since?);
    (silent > STALE_AFTER).then_some(silent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_once_every_gate_is_synced() {
        let ready = Readiness::default();
        let now = Instant::now();
        ready.register("windows");
        ready.register("drain");
        assert_eq!(
            ready.pending(now),
            ["not synced: drain", "not synced: windows"]
        );
        ready.mark_synced("windows");
        ready.mark_synced("drain");
        assert!(ready.pending(now).is_empty());
    }

    #[test]
    fn a_dead_watch_makes_the_replica_not_ready_until_it_is_listed_again() {
        let ready = Readiness::default();
        let now = Instant::now();
        ready.register("windows");
        ready.mark_synced("windows");
        ready.watch_down("citrusts");
        ready.watch_down("citrusts");
        assert_eq!(
            ready.pending(now),
            ["watch citrusts died (2x); restarting it"]
        );
        ready.watch_listed("citrusts");
        assert!(ready.pending(now).is_empty());
    }

    #[test]
    fn an_api_server_silent_for_longer_than_the_bound_makes_the_replica_not_ready() {
        let ready = Readiness::default();
        let t0 = Instant::now();
        ready.api_server_answered(false, t0);
        // A short hiccup is not enough.
        assert!(ready.pending(t0 + STALE_AFTER).is_empty());
        // A later failure does not move the start of the silence.
        ready.api_server_answered(false, t0 + Duration::from_secs(5));
        let pending = ready.pending(t0 + Duration::from_secs(12));
        assert_eq!(
            pending,
            ["watches stale: the API server has not answered for 12s"]
        );
        // One answer and it is ready again, no restart needed.
        ready.api_server_answered(true, t0 + Duration::from_secs(13));
        assert!(ready.pending(t0 + Duration::from_secs(14)).is_empty());
    }
}
