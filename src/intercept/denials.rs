//! What this replica remembers of the evictions it held back, per (Deployment uid, node uid):
//! when it first denied one, whether it started the rollout and wrote the hold record, and
//! whether it already reported the timeout. Memory only bridges the moments before the
//! Deployment's records reach the cache: the hold record
//! (`disruption-guard.io/eviction-held-since`, written beside the first deny) and the
//! rolled-out-for-node record tell every replica, and this one after a restart, since when an
//! eviction is held and that a rollout is under way (see [`super::decide`]).
//!
//! Entries go when the held pod is gone, after [`FORGET_AFTER`] whatever happened, and when
//! the Deployment's records for the node, once seen, are gone: the node's disruption ended
//! (the drain watcher removes them), so a later one is a new episode.
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
    hold_recording: bool,
    record_seen: bool,
    timeout_reported: bool,
}

impl Entry {
    fn new(first_denied: Timestamp) -> Self {
        Self {
            first_denied,
            rollout_started: false,
            hold_recording: false,
            record_seen: false,
            timeout_reported: false,
        }
    }
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

/// What one deny claimed: of concurrent denies, exactly one claims each write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claims {
    /// Start the rollout.
    pub rollout: bool,
    /// Write the hold record.
    pub hold_record: bool,
    /// When this replica first denied (what the hold record says).
    pub first_denied: Timestamp,
}

impl Denials {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Entry>> {
        self.entries.lock().expect("denials lock")
    }

    /// What is remembered for `key`, given whether the Deployment carries a record for the
    /// node right now (`recorded`, from the cache). Records seen before and gone now mean the
    /// node's disruption ended: the entry is forgotten and this is a new episode.
    pub fn recall(&self, key: &Key, recorded: bool) -> Memory {
        let mut entries = self.lock();
        let Some(entry) = entries.get_mut(key) else {
            return Memory::default();
        };
        if recorded {
            entry.record_seen = true;
        } else if entry.record_seen {
            entries.remove(key);
            return Memory::default();
        }
        Memory {
            first_denied: Some(entry.first_denied),
            rollout_started: entry.rollout_started,
        }
    }

    /// Records a deny at `now`; with `start_rollout`, claims the rollout, with `record_hold`,
    /// the hold record's write.
    pub fn deny(
        &self,
        key: &Key,
        now: Timestamp,
        start_rollout: bool,
        record_hold: bool,
    ) -> Claims {
        let mut entries = self.lock();
        let forget = SignedDuration::try_from(FORGET_AFTER).unwrap_or(SignedDuration::MAX);
        entries.retain(|_, e| now.duration_since(e.first_denied) < forget);
        let entry = entries.entry(key.clone()).or_insert(Entry::new(now));
        let rollout = start_rollout && !entry.rollout_started;
        entry.rollout_started |= rollout;
        let hold_record = record_hold && !entry.hold_recording;
        entry.hold_recording |= hold_record;
        Claims {
            rollout,
            hold_record,
            first_denied: entry.first_denied,
        }
    }

    /// The rollout failed: the next deny starts it again.
    pub fn rollout_failed(&self, key: &Key) {
        if let Some(e) = self.lock().get_mut(key) {
            e.rollout_started = false;
        }
    }

    /// Writing the hold record failed: the next deny writes it again.
    pub fn hold_record_failed(&self, key: &Key) {
        if let Some(e) = self.lock().get_mut(key) {
            e.hold_recording = false;
        }
    }

    /// Records that an eviction was let through after the timeout; true the first time (worth
    /// an Event and a count).
    pub fn timed_out(&self, key: &Key, since: Timestamp) -> bool {
        let mut entries = self.lock();
        let entry = entries.entry(key.clone()).or_insert(Entry::new(since));
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
        assert_eq!(d.recall(&key(), false), Memory::default());
        assert!(
            d.deny(&key(), t("2026-01-01T00:00:00Z"), true, false)
                .rollout
        );
        assert!(
            !d.deny(&key(), t("2026-01-01T00:00:10Z"), true, false)
                .rollout
        );
        assert_eq!(
            d.recall(&key(), false),
            Memory {
                first_denied: Some(t("2026-01-01T00:00:00Z")),
                rollout_started: true
            }
        );
    }

    #[test]
    fn a_failed_rollout_is_claimed_again_by_a_later_deny() {
        let d = Denials::default();
        assert!(
            d.deny(&key(), t("2026-01-01T00:00:00Z"), true, false)
                .rollout
        );
        d.rollout_failed(&key());
        assert!(
            d.deny(&key(), t("2026-01-01T00:00:05Z"), true, false)
                .rollout
        );
        assert_eq!(
            d.recall(&key(), false).first_denied,
            Some(t("2026-01-01T00:00:00Z"))
        );
    }

    #[test]
    fn a_deny_without_a_rollout_claims_nothing() {
        let d = Denials::default();
        let claims = d.deny(&key(), t("2026-01-01T00:00:00Z"), false, false);
        assert!(!claims.rollout && !claims.hold_record);
        assert!(!d.recall(&key(), false).rollout_started);
    }

    #[test]
    fn the_hold_record_is_claimed_once_with_the_first_deny_time_and_again_after_a_failure() {
        let d = Denials::default();
        let first = d.deny(&key(), t("2026-01-01T00:00:00Z"), true, true);
        assert!(first.hold_record);
        assert_eq!(first.first_denied, t("2026-01-01T00:00:00Z"));
        assert!(
            !d.deny(&key(), t("2026-01-01T00:00:02Z"), true, true)
                .hold_record
        );
        d.hold_record_failed(&key());
        let again = d.deny(&key(), t("2026-01-01T00:00:04Z"), true, true);
        assert!(again.hold_record);
        assert_eq!(again.first_denied, t("2026-01-01T00:00:00Z"));
    }

    #[test]
    fn records_seen_and_then_gone_start_a_new_episode() {
        let d = Denials::default();
        d.deny(&key(), t("2026-01-01T00:00:00Z"), true, true);
        // Before the records reach the cache, memory stands.
        assert!(d.recall(&key(), false).rollout_started);
        // Seen on the Deployment, then removed when the node's disruption ended.
        assert!(d.recall(&key(), true).rollout_started);
        assert_eq!(d.recall(&key(), false), Memory::default());
        let next = d.deny(&key(), t("2026-01-01T00:30:00Z"), true, true);
        assert!(next.rollout && next.hold_record);
        assert_eq!(next.first_denied, t("2026-01-01T00:30:00Z"));
    }

    #[test]
    fn the_timeout_is_news_once() {
        let d = Denials::default();
        d.deny(&key(), t("2026-01-01T00:00:00Z"), true, true);
        assert!(d.timed_out(&key(), t("2026-01-01T00:00:00Z")));
        assert!(!d.timed_out(&key(), t("2026-01-01T00:00:00Z")));
    }

    #[test]
    fn entries_go_with_their_pod_or_after_an_hour() {
        let d = Denials::default();
        d.deny(&key(), t("2026-01-01T00:00:00Z"), true, true);
        assert_eq!(d.forget(&key()), Some(t("2026-01-01T00:00:00Z")));
        assert_eq!(d.forget(&key()), None);
        d.deny(&key(), t("2026-01-01T00:00:00Z"), true, true);
        let other = ("e".to_string(), "n".to_string());
        d.deny(&other, t("2026-01-01T01:00:00Z"), false, false);
        assert_eq!(d.recall(&key(), false), Memory::default());
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
