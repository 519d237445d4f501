//! When a window opens, ends and is deleted: pure functions of the window and `now`.
//!
//! `openedAt` is the window's creation time (so an operator that was down when CI opened the
//! window still counts its TTL from the moment CI asked). `expiresAt` is
//! `max(openedAt + ttl, spec.expiresAt)`, capped at `openedAt + --max-ttl`. A window that has
//! ended (Closed or Expired) stays ended: a late renewal does not reopen it.

use jiff::{SignedDuration, Timestamp};

use crate::resources::{Phase, TestWindow};

/// Where a window stands at `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// When the window opened.
    pub opened_at: Timestamp,
    /// When the window ends by itself (already capped).
    pub expires_at: Timestamp,
    /// The phase at `now`: Active, Closed or Expired (never Pending).
    pub phase: Phase,
    /// When the window ended, for Closed and Expired.
    pub ended_at: Option<Timestamp>,
    /// The previous status had an earlier `expiresAt`: the window was renewed.
    pub renewed: bool,
}

/// Decides a window's phase and times at `now`; `max_ttl` caps how long it may stay open.
pub fn decide(window: &TestWindow, now: Timestamp, max_ttl: SignedDuration) -> Timing {
    let status = window.status.as_ref();
    let opened_at = status
        .and_then(|s| s.opened_at.as_ref())
        .or(window.metadata.creation_timestamp.as_ref())
        .map(|t| t.0)
        .unwrap_or(now);
    let ttl = SignedDuration::try_from(std::time::Duration::from(window.spec.ttl))
        .unwrap_or(SignedDuration::MAX);
    let ttl = if window.spec.ttl.is_negative() {
        SignedDuration::ZERO
    } else {
        ttl
    };
    let by_ttl = opened_at.saturating_add(ttl).unwrap_or(Timestamp::MAX);
    let requested = window
        .spec
        .expires_at
        .as_ref()
        .map_or(by_ttl, |t| t.0.max(by_ttl));
    let cap = opened_at.saturating_add(max_ttl).unwrap_or(Timestamp::MAX);
    let expires_at = requested.min(cap);
    let previous = status.and_then(|s| s.expires_at.as_ref()).map(|t| t.0);
    if let Some(s) = status.filter(|s| s.phase.is_final()) {
        return Timing {
            opened_at,
            expires_at: previous.unwrap_or(expires_at),
            phase: s.phase,
            ended_at: Some(s.ended_at.as_ref().map_or(now, |t| t.0)),
            renewed: false,
        };
    }
    let renewed = previous.is_some_and(|p| expires_at > p);
    let (phase, ended_at) = if window.spec.closed || window.metadata.deletion_timestamp.is_some() {
        (Phase::Closed, Some(now.min(expires_at)))
    } else if now >= expires_at {
        (Phase::Expired, Some(expires_at))
    } else {
        (Phase::Active, None)
    };
    Timing {
        opened_at,
        expires_at,
        phase,
        ended_at,
        renewed: renewed && phase == Phase::Active,
    }
}

/// Whether an ended window has been kept for `retention` and should now be deleted.
pub fn retention_over(timing: &Timing, now: Timestamp, retention: SignedDuration) -> bool {
    timing
        .ended_at
        .is_some_and(|end| end.saturating_add(retention).unwrap_or(Timestamp::MAX) <= now)
}

/// The Karpenter pod annotation value that ends at `expires_at`: a Go duration counted from
/// the pod's `status.startTime` (Karpenter 1.12+), rounded up to whole seconds. Without a start
/// time the pod has not started, and `"true"` is written until it has.
pub fn karpenter_duration(start: Option<Timestamp>, expires_at: Timestamp) -> String {
    match start {
        None => "true".to_string(),
        Some(start) => {
            let d = expires_at.duration_since(start);
            let secs = d.as_secs() + i64::from(d.subsec_nanos() > 0);
            format!("{}s", secs.max(1))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{TestWindowSpec, TestWindowStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn window(ttl: &str) -> TestWindow {
        let mut w = TestWindow::new(
            "w",
            TestWindowSpec {
                selector: Default::default(),
                ttl: ttl.parse().unwrap(),
                expires_at: None,
                closed: false,
                reason: String::new(),
                protect: Default::default(),
                ci: None,
                opened_by: None,
            },
        );
        w.metadata.creation_timestamp = Some(Time(at("2026-01-01T10:00:00Z")));
        w
    }

    const DAY: SignedDuration = SignedDuration::from_hours(24);

    #[test]
    fn a_new_window_is_active_until_opened_at_plus_ttl() {
        let t = decide(&window("30m"), at("2026-01-01T10:10:00Z"), DAY);
        assert_eq!(t.phase, Phase::Active);
        assert_eq!(t.opened_at, at("2026-01-01T10:00:00Z"));
        assert_eq!(t.expires_at, at("2026-01-01T10:30:00Z"));
        assert_eq!(t.ended_at, None);
    }

    #[test]
    fn a_window_expires_at_expires_at_even_when_seen_late() {
        let t = decide(&window("30m"), at("2026-01-01T12:00:00Z"), DAY);
        assert_eq!(t.phase, Phase::Expired);
        assert_eq!(t.ended_at, Some(at("2026-01-01T10:30:00Z")));
    }

    #[test]
    fn a_later_spec_expires_at_renews_and_max_ttl_caps_it() {
        let mut w = window("30m");
        w.status = Some(TestWindowStatus {
            phase: Phase::Active,
            expires_at: Some(Time(at("2026-01-01T10:30:00Z"))),
            ..Default::default()
        });
        w.spec.expires_at = Some(Time(at("2026-01-01T11:00:00Z")));
        let t = decide(&w, at("2026-01-01T10:20:00Z"), DAY);
        assert_eq!(t.expires_at, at("2026-01-01T11:00:00Z"));
        assert!(t.renewed);

        w.spec.expires_at = Some(Time(at("2026-01-05T00:00:00Z")));
        let t = decide(&w, at("2026-01-01T10:20:00Z"), DAY);
        assert_eq!(t.expires_at, at("2026-01-02T10:00:00Z"));
    }

    #[test]
    fn an_earlier_spec_expires_at_does_not_shorten_the_ttl() {
        let mut w = window("30m");
        w.spec.expires_at = Some(Time(at("2026-01-01T10:05:00Z")));
        let t = decide(&w, at("2026-01-01T10:10:00Z"), DAY);
        assert_eq!(t.phase, Phase::Active);
        assert_eq!(t.expires_at, at("2026-01-01T10:30:00Z"));
    }

    #[test]
    fn closing_or_deleting_ends_the_window_now() {
        let mut w = window("30m");
        w.spec.closed = true;
        let t = decide(&w, at("2026-01-01T10:10:00Z"), DAY);
        assert_eq!(
            (t.phase, t.ended_at),
            (Phase::Closed, Some(at("2026-01-01T10:10:00Z")))
        );

        let mut w = window("30m");
        w.metadata.deletion_timestamp = Some(Time(at("2026-01-01T10:12:00Z")));
        let t = decide(&w, at("2026-01-01T10:12:00Z"), DAY);
        assert_eq!(t.phase, Phase::Closed);
    }

    #[test]
    fn an_ended_window_stays_ended_after_a_late_renewal() {
        let mut w = window("30m");
        w.status = Some(TestWindowStatus {
            phase: Phase::Expired,
            expires_at: Some(Time(at("2026-01-01T10:30:00Z"))),
            ended_at: Some(Time(at("2026-01-01T10:30:00Z"))),
            ..Default::default()
        });
        w.spec.ttl = "2h".parse().unwrap();
        let t = decide(&w, at("2026-01-01T10:40:00Z"), DAY);
        assert_eq!(t.phase, Phase::Expired);
        assert_eq!(t.expires_at, at("2026-01-01T10:30:00Z"));
        assert!(!t.renewed);
    }

    #[test]
    fn retention_counts_from_the_end() {
        let t = decide(&window("30m"), at("2026-01-01T11:00:00Z"), DAY);
        let hour = SignedDuration::from_hours(1);
        assert!(!retention_over(&t, at("2026-01-01T11:29:00Z"), hour));
        assert!(retention_over(&t, at("2026-01-01T11:30:00Z"), hour));
    }

    #[test]
    fn the_karpenter_duration_ends_at_expires_at() {
        let d = karpenter_duration(
            Some(at("2026-01-01T10:00:00.5Z")),
            at("2026-01-01T10:30:00Z"),
        );
        assert_eq!(d, "1800s");
        assert_eq!(karpenter_duration(None, at("2026-01-01T10:30:00Z")), "true");
        assert_eq!(
            karpenter_duration(Some(at("2026-01-01T11:00:00Z")), at("2026-01-01T10:30:00Z")),
            "1s"
        );
    }
}
