//! What this replica remembers of the evictions it held back, per (Deployment uid, node uid):
//! when it first denied one (the timeout counts from there), whether it started the rollout,
//! and whether it already reported the timeout. In memory only: the Deployment's
//! rolled-out-for-node record and its `restartedAt` tell every replica, and this one after a
//! restart, that a rollout is under way and since when (see [`super::decide`]).
//!
//! Entries go when the held pod is gone, or after [`FORGET_AFTER`] whatever happened.
//!
//! [`Skips`] remembers, the same way, which pods' evictions were let through because a rollout
//! cannot save them, so each (pod, reason) gets one Event.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

/// How long an entry is kept at most: past every timeout, so an eviction let through after
/// its timeout is not held back again while its pod goes.
pub const FORGET_AFTER: Duration = Duration::from_secs(60 * 60);

/// The key of an entry: (Deployment uid, node uid).
pub type Key = (String, String);

#[derive(Debug, Clone, Copy)]
struct Entry {
    first_denied: Timestamp,
    rollout_started: bool,
    timeout_reported: bool,
}

/// The entries, shared by the handlers and the rollout tasks.
#[derive(Debug, Default)]
pub struct Denials {
    entries: Mutex<HashMap<Key, Entry>>,
}

/// What is remembered for one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Memory {
    /// When this replica first denied.
    pub first_denied: Option<Timestamp>,
    /// Whether it started the rollout (and it did not fail).
    pub rollout_started: bool,
}

impl Denials {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Entry>> {
        self.entries.lock().expect("denials lock")
    }

    /// What is remembered for `key`.
    pub fn recall(&self, key: &Key) -> Memory {
        self.lock()
            .get(key)
            .map(|e| Memory {
                first_denied: Some(e.first_denied),
                rollout_started: e.rollout_started,
            })
            .unwrap_or_default()
    }

    /// Records a deny at `now`; with `start_rollout`, claims the rollout. True when this call
    /// claimed it (of concurrent denies, exactly one does).
    pub fn deny(&self, key: &Key, now: Timestamp, start_rollout: bool) -> bool {
        let mut entries = self.lock();
        let forget = SignedDuration::try_from(FORGET_AFTER).unwrap_or(SignedDuration::MAX);
        entries.retain(|_, e| now.duration_since(e.first_denied) < forget);
        let entry = entries.entry(key.clone()).or_insert(Entry {
            first_denied: now,
            rollout_started: false,
            timeout_reported: false,
        });
        let claimed = start_rollout && !entry.rollout_started;
        entry.rollout_started |= claimed;
        claimed
    }

    /// The rollout failed: the next deny starts it again.
    pub fn rollout_failed(&self, key: &Key) {
        if let Some(e) = self.lock().get_mut(key) {
            e.rollout_started = false;
        }
    }

    /// Records that an eviction was let through after the timeout; true the first time (worth
    /// an Event and a count).
    pub fn timed_out(&self, key: &Key, since: Timestamp) -> bool {
        let mut entries = self.lock();
        let entry = entries.entry(key.clone()).or_insert(Entry {
            first_denied: since,
            rollout_started: false,
            timeout_reported: false,
        });
        !std::mem::replace(&mut entry.timeout_reported, true)
    }

    /// Forgets `key` (its pod is gone); returns when it was first denied.
    pub fn forget(&self, key: &Key) -> Option<Timestamp> {
        self.lock().remove(key).map(|e| e.first_denied)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Key {
        ("d".into(), "n".into())
    }

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn the_first_deny_is_remembered_and_claims_the_rollout_once() {
        let d = Denials::default();
        assert_eq!(d.recall(&key()), Memory::default());
        assert!(d.deny(&key(), t("2026-01-01T00:00:00Z"), true));
        assert!(!d.deny(&key(), t("2026-01-01T00:00:10Z"), true));
        assert_eq!(
            d.recall(&key()),
            Memory {
                first_denied: Some(t("2026-01-01T00:00:00Z")),
                rollout_started: true
            }
        );
    }

    #[test]
    fn a_failed_rollout_is_claimed_again_by_a_later_deny() {
        let d = Denials::default();
        assert!(d.deny(&key(), t("2026-01-01T00:00:00Z"), true));
        d.rollout_failed(&key());
        assert!(d.deny(&key(), t("2026-01-01T00:00:05Z"), true));
        assert_eq!(
            d.recall(&key()).first_denied,
            Some(t("2026-01-01T00:00:00Z"))
        );
    }

    #[test]
    fn a_deny_without_a_rollout_claims_nothing() {
        let d = Denials::default();
        assert!(!d.deny(&key(), t("2026-01-01T00:00:00Z"), false));
        assert!(!d.recall(&key()).rollout_started);
    }

    #[test]
    fn the_timeout_is_news_once() {
        let d = Denials::default();
        d.deny(&key(), t("2026-01-01T00:00:00Z"), true);
        assert!(d.timed_out(&key(), t("2026-01-01T00:00:00Z")));
        assert!(!d.timed_out(&key(), t("2026-01-01T00:00:00Z")));
    }

    #[test]
    fn entries_go_with_their_pod_or_after_an_hour() {
        let d = Denials::default();
        d.deny(&key(), t("2026-01-01T00:00:00Z"), true);
        assert_eq!(d.forget(&key()), Some(t("2026-01-01T00:00:00Z")));
        assert_eq!(d.forget(&key()), None);
        d.deny(&key(), t("2026-01-01T00:00:00Z"), true);
        let other = ("e".to_string(), "n".to_string());
        d.deny(&other, t("2026-01-01T01:00:00Z"), false);
        assert_eq!(d.recall(&key()), Memory::default());
    }
}

/// The (pod uid, reason) pairs already reported as let through because a rollout cannot save
/// the pod, with when; kept for [`FORGET_AFTER`].
#[derive(Debug, Default)]
pub struct Skips {
    reported: Mutex<HashMap<(String, &'static str), Timestamp>>,
}

impl Skips {
    /// Records a skip of `pod_uid` for `reason` at `now`; true the first time (worth an Event).
    pub fn first(&self, pod_uid: &str, reason: &'static str, now: Timestamp) -> bool {
        let mut reported = self.reported.lock().expect("skips lock");
        let forget = SignedDuration::try_from(FORGET_AFTER).unwrap_or(SignedDuration::MAX);
        reported.retain(|_, at| now.duration_since(*at) < forget);
        reported
            .insert((pod_uid.to_string(), reason), now)
            .is_none()
    }
}

#[cfg(test)]
mod skip_tests {
    use super::*;

    #[test]
    fn a_skip_is_reported_once_per_pod_and_reason_until_forgotten() {
        let skips = Skips::default();
        let t0: Timestamp = "2026-03-01T10:00:00Z".parse().unwrap();
        assert!(skips.first("p1", "recreate", t0));
        assert!(!skips.first("p1", "recreate", t0));
        assert!(skips.first("p2", "recreate", t0));
        assert!(skips.first("p1", "paused", t0));
        let later = t0 + SignedDuration::try_from(FORGET_AFTER).unwrap();
        assert!(skips.first("p1", "recreate", later));
    }
}
