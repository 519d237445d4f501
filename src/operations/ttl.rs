//! Time to live of a window: the server's default and maximum, and when a renewed window
//! ends. Pure functions of plain data and an injected `now`; durations are Go durations
//! ([`crate::resources::duration`]).

use std::time::Duration;

use jiff::Timestamp;

pub use crate::resources::duration::{format, parse};

/// Limits on a window's time to live, set by `--default-ttl` and `--max-ttl`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TtlLimits {
    /// Used when a request names no ttl.
    pub default: Duration,
    /// No window is opened or renewed for longer.
    pub max: Duration,
}

impl TtlLimits {
    /// The ttl of a new window: the request's, or the default; 422-worthy text when invalid.
    pub fn for_open(&self, requested: Option<&str>) -> Result<Duration, String> {
        let ttl = match requested {
            None => return Ok(self.default.min(self.max)),
            Some(text) => parse(text).map_err(|e| format!("ttl: {e}"))?,
        };
        if ttl > self.max {
            return Err(format!(
                "ttl: {} is longer than the maximum {} (--max-ttl)",
                format(ttl),
                format(self.max)
            ));
        }
        Ok(ttl)
    }

    /// When a window renewed at `now` ends: now + the requested ttl, capped by the maximum.
    pub fn renewed_until(
        &self,
        requested: Option<&str>,
        now: Timestamp,
    ) -> Result<Timestamp, String> {
        let ttl = match requested {
            None => self.default,
            Some(text) => parse(text).map_err(|e| format!("ttl: {e}"))?,
        }
        .min(self.max);
        let span = jiff::SignedDuration::try_from(ttl).map_err(|e| format!("ttl: {e}"))?;
        now.checked_add(span).map_err(|e| format!("ttl: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: TtlLimits = TtlLimits {
        default: Duration::from_secs(30 * 60),
        max: Duration::from_secs(2 * 3600),
    };

    #[test]
    fn an_open_without_ttl_gets_the_default_and_one_over_the_maximum_is_refused() {
        assert_eq!(LIMITS.for_open(None), Ok(Duration::from_secs(1800)));
        assert_eq!(LIMITS.for_open(Some("2h")), Ok(Duration::from_secs(7200)));
        let err = LIMITS.for_open(Some("3h")).unwrap_err();
        assert!(err.contains("maximum 2h"), "{err}");
    }

    #[test]
    fn a_renewal_extends_from_now_and_is_capped_by_the_maximum() {
        let now: Timestamp = "2026-01-01T10:00:00Z".parse().unwrap();
        let until = LIMITS.renewed_until(Some("10m"), now).unwrap();
        assert_eq!(until.to_string(), "2026-01-01T10:10:00Z");
        let capped = LIMITS.renewed_until(Some("10h"), now).unwrap();
        assert_eq!(capped.to_string(), "2026-01-01T12:00:00Z");
        assert!(LIMITS.renewed_until(Some("soon"), now).is_err());
    }

    #[test]
    fn an_overflowing_ttl_is_refused_naming_the_field_on_open_and_on_renew() {
        let huge = "94522879700260684295381835.4h";
        let err = LIMITS.for_open(Some(huge)).unwrap_err();
        assert!(
            err.starts_with("ttl: ") && err.contains("too large"),
            "{err}"
        );
        let now: Timestamp = "2026-01-01T10:00:00Z".parse().unwrap();
        let err = LIMITS.renewed_until(Some(huge), now).unwrap_err();
        assert!(
            err.starts_with("ttl: ") && err.contains("too large"),
            "{err}"
        );
    }
}
