//! Go durations (`30m`, `1h30m`, `1.5h`, `250ms`), as Kubernetes flags and fields write them:
//! one strict parser for every flag and request field of the operator, and the short format
//! `kubectl` shows.
//!
//! Hand-written rather than kube's `Duration::from_str`: that one panics on an overflowing
//! input such as `99999999999999999999999h` (the test below feeds it), accepts a sign, and
//! accepts a bare `0`; a request body must never panic the server, and a window's ttl is
//! always positive.

use std::time::Duration;

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
            int.parse().map_err(|_| format!("{text:?} is too large"))?
        };
        let mut part = int
            .checked_mul(unit_nanos)
            .ok_or_else(|| format!("{text:?} is too large"))?;
        let mut scale = unit_nanos;
        for digit in frac.chars().take(18) {
            scale /= 10;
            part += u128::from(digit.to_digit(10).unwrap_or(0)) * scale;
        }
        total_nanos = total_nanos
            .checked_add(part)
            .filter(|n| *n <= u128::from(u64::MAX))
            .ok_or_else(|| format!("{text:?} is too large"))?;
        rest = next;
    }
    if total_nanos == 0 {
        return Err(format!("{text:?} must be longer than 0s"));
    }
    let secs = (total_nanos / 1_000_000_000) as u64;
    let nanos = (total_nanos % 1_000_000_000) as u32;
    Ok(Duration::new(secs, nanos))
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
    fn durations_format_the_short_go_way() {
        assert_eq!(format(Duration::from_secs(1800)), "30m");
        assert_eq!(format(Duration::from_secs(5400)), "1h30m");
        assert_eq!(format(Duration::from_secs(45)), "45s");
        assert_eq!(format(Duration::from_millis(1500)), "1.5s");
    }
}
