//! Go durations (`30m`, `1h30m`, `1.5h`, `250ms`), as Kubernetes flags and fields write them:
//! one strict parser for every flag and request field of the operator, and the short format
//! `kubectl` shows.
//!
//! Hand-written rather than kube's `Duration::from_str`: that one panics on an overflowing
//! input such as `99999999999999999999999h` (the test below feeds it), accepts a sign, and
//! accepts a bare `0`; a request body must never panic the server, and a window's ttl is
//! always positive. For the same reason `spec.ttl` is read with [`deserialize_ttl`], not with
//! kube's parser: the controller reads whatever a TestWindow holds, and the API server's own
//! check of it is only as old as the CRD installed.

use std::time::Duration;

/// The longest duration accepted: Go's own limit (`math.MaxInt64` nanoseconds, about 292
/// years), so every value parsed here fits a Go `time.Duration`, a `jiff::SignedDuration` and
/// the API server's CEL `duration()`.
const MAX_NANOS: u128 = i64::MAX as u128;
/// [`MAX_NANOS`] as written in error messages.
const MAX_TEXT: &str = "2562047h47m16.854775807s";

/// Parses a Go duration (`30m`, `1h30m`, `90s`, `1.5h`) into a positive duration.
///
/// Stricter than Go on purpose: no sign, no bare number other than nothing, no overflow.
pub fn parse(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    if s.is_empty() {
        return Err("must not be empty; use a duration such as 30m".into());
    }
    let mut rest = s;
    let mut total_nanos: u128 = 0;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("{text:?} has a number without a unit (ns, us, ms, s, m, h)"))?;
        let (num, after) = rest.split_at(num_end);
        if num.is_empty() || num.starts_with('.') && num.len() == 1 || num.matches('.').count() > 1
        {
            return Err(format!("{text:?} is not a duration such as 30m or 1h30m"));
        }
        let unit_end = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_end);
        let unit_nanos: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => {
                return Err(format!(
                    "{text:?} has an unknown unit {unit:?}; use ns, us, ms, s, m or h"
                ));
            }
        };
        let (int, frac) = num.split_once('.').unwrap_or((num, ""));
        let int: u128 = if int.is_empty() {
            0
        } else {
            int.parse()
                .map_err(|_| format!("{text:?} is too large; the longest duration is {MAX_TEXT}"))?
        };
        // Checked throughout: an integer part just under the limit plus its fraction must be
        // "too large", not an overflow (a panic in debug builds, a wrapped value in release).
        let too_large = || format!("{text:?} is too large; the longest duration is {MAX_TEXT}");
        let mut part = int.checked_mul(unit_nanos).ok_or_else(too_large)?;
        let mut scale = unit_nanos;
        for digit in frac.chars().take(18) {
            scale /= 10;
            part = part
                .checked_add(u128::from(digit.to_digit(10).unwrap_or(0)) * scale)
                .ok_or_else(too_large)?;
        }
        total_nanos = total_nanos
            .checked_add(part)
            .filter(|n| *n <= MAX_NANOS)
            .ok_or_else(too_large)?;
        rest = next;
    }
    if total_nanos == 0 {
        return Err(format!("{text:?} must be longer than 0s"));
    }
    let secs = (total_nanos / 1_000_000_000) as u64;
    let nanos = (total_nanos % 1_000_000_000) as u32;
    Ok(Duration::new(secs, nanos))
}

/// Reads `spec.ttl` without ever failing or panicking: a ttl this parser refuses (too large,
/// malformed, zero or negative) reads as zero, so the window counts as expired at once and
/// protects nothing, as the API would have refused it. Failing instead would fail the whole
/// list of windows and stall the controller for every namespace.
pub fn deserialize_ttl<'de, D>(deserializer: D) -> Result<kube::core::Duration, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let text = <std::borrow::Cow<'de, str> as serde::Deserialize>::deserialize(deserializer)?;
    Ok(ttl_or_zero(&text).into())
}

/// The ttl `text` names, or zero (with a warning) when [`parse`] refuses it.
pub fn ttl_or_zero(text: &str) -> Duration {
    parse(text).unwrap_or_else(|err| {
        let shown: String = err.chars().take(200).collect();
        tracing::warn!(error = %shown, "a window's spec.ttl cannot be read; the window counts as expired");
        Duration::ZERO
    })
}

/// Formats a duration the short Go way: `1h30m`, `30m`, `45s`, `1.5s`.
pub fn format(d: Duration) -> String {
    let secs = d.as_secs();
    let (h, m, s) = (secs / 3600, (secs % 3600) / 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 || d.subsec_nanos() > 0 || out.is_empty() {
        if d.subsec_nanos() > 0 {
            let frac = format!("{:09}", d.subsec_nanos());
            out.push_str(&format!("{s}.{}s", frac.trim_end_matches('0')));
        } else {
            out.push_str(&format!("{s}s"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_parse() {
        assert_eq!(parse("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
    }

    #[test]
    fn malformed_zero_negative_and_huge_durations_are_refused_without_panicking() {
        for bad in [
            "",
            "0",
            "0s",
            "-5m",
            "30",
            "m",
            "abc",
            "1x",
            "1..5m",
            ".m",
            "5m-",
            "NaN",
            "inf",
            "99999999999999999999999h",
            "1e9h",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn an_overflowing_duration_is_too_large_rather_than_a_panic_or_a_wrapped_value() {
        // The integer part times the unit fits u128 by a hair; its fraction used to overflow.
        let err = parse("94522879700260684295381835.4h").unwrap_err();
        assert!(err.contains("too large"), "{err}");
        // The same just under the limit of every unit, with and without a fraction.
        for (unit, nanos) in [
            ("ns", 1u128),
            ("us", 1_000),
            ("ms", 1_000_000),
            ("s", 1_000_000_000),
            ("m", 60_000_000_000),
            ("h", 3_600_000_000_000),
        ] {
            let int = u128::MAX / nanos;
            for text in [
                format!("{int}{unit}"),
                format!("{int}.999999999999999999{unit}"),
                format!("{int}0{unit}"),
                format!("1{unit}{int}.9{unit}"),
            ] {
                assert!(parse(&text).is_err(), "{text} was accepted");
            }
        }
    }

    #[test]
    fn the_longest_duration_is_gos_and_one_nanosecond_more_is_refused() {
        assert_eq!(parse(MAX_TEXT), Ok(Duration::from_nanos(i64::MAX as u64)));
        assert!(parse("2562047h47m16.854775808s").is_err());
        assert!(parse("2562048h").is_err());
    }

    #[test]
    fn a_stored_ttl_that_cannot_be_read_reads_as_zero_without_panicking() {
        #[derive(serde::Deserialize)]
        struct Spec {
            #[serde(deserialize_with = "deserialize_ttl")]
            ttl: kube::core::Duration,
        }
        let read = |ttl: &str| {
            serde_json::from_value::<Spec>(serde_json::json!({ "ttl": ttl }))
                .unwrap()
                .ttl
        };
        assert_eq!(read("30m"), Duration::from_secs(1800));
        // What kube itself writes back (std's Debug format) reads the same.
        assert_eq!(
            read(&kube::core::Duration::from(Duration::from_millis(1500)).to_string()),
            Duration::from_millis(1500)
        );
        for bad in [
            "94522879700260684295381835.4h",
            "1e400h",
            "abc",
            "-5m",
            "0s",
        ] {
            assert_eq!(read(bad), Duration::ZERO, "{bad}");
        }
    }

    #[test]
    fn durations_format_the_short_go_way() {
        assert_eq!(format(Duration::from_secs(1800)), "30m");
        assert_eq!(format(Duration::from_secs(5400)), "1h30m");
        assert_eq!(format(Duration::from_secs(45)), "45s");
        assert_eq!(format(Duration::from_millis(1500)), "1.5s");
    }
}
