//! Retrying the guard's own hiccups: 429, 502, 503, 504 and connection errors are tried again
//! with exponential backoff and full jitter, honouring the server's `Retry-After`, for at most
//! `--retry-for` in total, so that a rolling update of the operator in the middle of a CI job
//! does not fail the job.
//!
//! Whether to retry and how long to wait is [`decide`], a pure function; [`with_retry`] runs an
//! operation under it. Hand-written rather than `backon` (already in the tree through
//! kube-runtime): its jitter adds up to one more delay (`d..2d`) where full jitter draws from
//! `0..d`, its total bound counts only the sleeps and not the attempts themselves (each may
//! take a 10 s connect timeout), and `Retry-After` would have to replace its delay through a
//! callback; what is left of it here is a dozen lines.

use std::future::Future;
use std::time::{Duration, Instant, SystemTime};

use super::ClientError;

/// Ceiling of the first delay; it doubles with every failure up to [`MAX_DELAY`].
pub const BASE_DELAY: Duration = Duration::from_millis(500);
/// Largest delay between two attempts, unless the server asks for more with `Retry-After`.
pub const MAX_DELAY: Duration = Duration::from_secs(10);

/// How long and how often to retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Total time from the first attempt after which no new attempt starts (`--retry-for`).
    pub budget: Duration,
    /// Ceiling of the first delay.
    pub base: Duration,
    /// Largest computed delay.
    pub cap: Duration,
}

impl RetryPolicy {
    /// Retries for `budget` with the default delays.
    pub const fn new(budget: Duration) -> Self {
        Self {
            budget,
            base: BASE_DELAY,
            cap: MAX_DELAY,
        }
    }

    /// One attempt only.
    pub const NONE: RetryPolicy = RetryPolicy::new(Duration::ZERO);
}

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Wait this long, then try again.
    Retry(Duration),
    /// Return the error.
    GiveUp,
}

/// Whether a failure is the guard's own, passing hiccup: too many requests (429), a proxy
/// that found no healthy replica (502, 503, 504), or no connection at all.
pub fn is_transient(err: &ClientError) -> bool {
    match err {
        ClientError::Api { problem, .. } => matches!(problem.status, 429 | 502 | 503 | 504),
        ClientError::Unreachable(_) => true,
        _ => false,
    }
}

/// The decision after `failures` failed attempts (this one included, so at least 1), the last
/// one failing with `err`, `elapsed` after the first attempt started. `jitter` is a random
/// number in `[0, 1)`: the delay is `jitter × min(cap, base × 2^(failures-1))` (full jitter),
/// or the server's `Retry-After` when it sent one. No attempt starts after the budget: a
/// computed delay is cut to what is left of it, and a `Retry-After` beyond it gives up.
pub fn decide(
    policy: &RetryPolicy,
    err: &ClientError,
    failures: u32,
    elapsed: Duration,
    jitter: f64,
) -> Decision {
    if !is_transient(err) {
        return Decision::GiveUp;
    }
    let left = policy.budget.saturating_sub(elapsed);
    if left.is_zero() {
        return Decision::GiveUp;
    }
    let retry_after = match err {
        ClientError::Api { retry_after, .. } => *retry_after,
        _ => None,
    };
    match retry_after {
        Some(wait) if wait > left => Decision::GiveUp,
        Some(wait) => Decision::Retry(wait),
        None => {
            let doublings = failures.saturating_sub(1).min(20);
            let ceiling = policy.base.saturating_mul(1 << doublings).min(policy.cap);
            Decision::Retry(ceiling.mul_f64(jitter.clamp(0.0, 1.0)).min(left))
        }
    }
}

/// The wait a `Retry-After` header asks for at `now`: delay-seconds or an HTTP-date (a date in
/// the past is no wait); `None` when it is neither.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Runs `op` until it succeeds, fails for good, or the policy gives up; each retry says on
/// stderr what failed and when the next attempt comes.
pub async fn with_retry<T, F, Fut>(
    policy: &RetryPolicy,
    what: &str,
    mut op: F,
) -> Result<T, ClientError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ClientError>>,
{
    let started = Instant::now();
    let mut failures = 0u32;
    loop {
        let err = match op().await {
            Ok(value) => return Ok(value),
            Err(err) => err,
        };
        failures += 1;
        let elapsed = started.elapsed();
        match decide(policy, &err, failures, elapsed, fastrand::f64()) {
            Decision::Retry(wait) => {
                eprintln!(
                    "warning: {what}: {err}; retrying in {:.1}s (attempt {}, {}s left of \
                     --retry-for {}s)",
                    wait.as_secs_f64(),
                    failures + 1,
                    policy.budget.saturating_sub(elapsed).as_secs(),
                    policy.budget.as_secs()
                );
                tokio::time::sleep(wait).await;
            }
            Decision::GiveUp => {
                if failures > 1 {
                    eprintln!(
                        "error: {what}: giving up after {failures} attempts in {}s",
                        elapsed.as_secs()
                    );
                }
                return Err(err);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operations::problem::Problem;

    fn status(code: u16, retry_after: Option<Duration>) -> ClientError {
        ClientError::Api {
            problem: Box::new(Problem {
                type_: "about:blank".into(),
                title: "t".into(),
                status: code,
                detail: "d".into(),
                instance: None,
                window: None,
            }),
            retry_after,
        }
    }

    const POLICY: RetryPolicy = RetryPolicy::new(Duration::from_secs(120));

    #[test]
    fn only_the_guards_hiccups_are_retried() {
        for code in [429, 502, 503, 504] {
            assert!(matches!(
                decide(&POLICY, &status(code, None), 1, Duration::ZERO, 0.5),
                Decision::Retry(_)
            ));
        }
        let refused = ClientError::Unreachable("connection refused".into());
        assert!(matches!(
            decide(&POLICY, &refused, 1, Duration::ZERO, 0.5),
            Decision::Retry(_)
        ));
        for code in [400, 401, 403, 404, 409, 422, 500] {
            assert_eq!(
                decide(&POLICY, &status(code, None), 1, Duration::ZERO, 0.5),
                Decision::GiveUp,
                "{code}"
            );
        }
        for err in [
            ClientError::Transport("not a window".into()),
            ClientError::Config("no server".into()),
        ] {
            assert_eq!(
                decide(&POLICY, &err, 1, Duration::ZERO, 0.5),
                Decision::GiveUp
            );
        }
    }

    #[test]
    fn the_delay_is_full_jitter_under_a_doubling_ceiling_up_to_the_cap() {
        let err = ClientError::Unreachable("reset".into());
        let at = |failures, jitter| decide(&POLICY, &err, failures, Duration::ZERO, jitter);
        assert!(matches!(at(1, 0.999_999), Decision::Retry(d) if d < BASE_DELAY));
        assert_eq!(at(1, 0.5), Decision::Retry(Duration::from_millis(250)));
        assert_eq!(at(2, 0.5), Decision::Retry(Duration::from_millis(500)));
        assert_eq!(at(3, 0.5), Decision::Retry(Duration::from_secs(1)));
        assert_eq!(at(6, 0.5), Decision::Retry(Duration::from_secs(5)));
        assert_eq!(
            at(7, 0.5),
            Decision::Retry(Duration::from_secs(5)),
            "capped at 10s"
        );
        assert_eq!(at(1000, 1.0), Decision::Retry(MAX_DELAY));
        assert_eq!(
            at(3, 0.0),
            Decision::Retry(Duration::ZERO),
            "full jitter starts at 0"
        );
    }

    #[test]
    fn retry_after_replaces_the_computed_delay_within_the_budget() {
        let asked = status(503, Some(Duration::from_secs(7)));
        assert_eq!(
            decide(&POLICY, &asked, 1, Duration::ZERO, 0.1),
            Decision::Retry(Duration::from_secs(7))
        );
        assert_eq!(
            decide(&POLICY, &asked, 1, Duration::from_secs(115), 0.1),
            Decision::GiveUp,
            "waiting past the budget is giving up"
        );
    }

    #[test]
    fn no_attempt_starts_after_the_budget() {
        let err = ClientError::Unreachable("refused".into());
        assert_eq!(
            decide(&POLICY, &err, 9, Duration::from_secs(118), 1.0),
            Decision::Retry(Duration::from_secs(2)),
            "the last wait is cut to what is left"
        );
        assert_eq!(
            decide(&POLICY, &err, 9, Duration::from_secs(120), 0.5),
            Decision::GiveUp
        );
        assert_eq!(
            decide(&RetryPolicy::NONE, &err, 1, Duration::ZERO, 0.5),
            Decision::GiveUp
        );
    }

    #[test]
    fn retry_after_is_seconds_or_an_http_date() {
        let now = httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        assert_eq!(
            parse_retry_after("120", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(parse_retry_after(" 0 ", now), Some(Duration::ZERO));
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:50:07 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            parse_retry_after("Sunday, 06-Nov-94 08:49:47 GMT", now),
            Some(Duration::from_secs(10)),
            "RFC 850 form"
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now),
            Some(Duration::ZERO),
            "a past date is no wait"
        );
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-5", now), None);
    }

    #[tokio::test]
    async fn an_operation_is_retried_until_it_succeeds_and_not_after_a_permanent_error() {
        let quick = RetryPolicy {
            budget: Duration::from_secs(60),
            base: Duration::from_millis(1),
            cap: Duration::from_millis(1),
        };
        let mut calls = 0;
        let result = with_retry(&quick, "test", || {
            calls += 1;
            let n = calls;
            async move {
                if n < 3 {
                    Err(ClientError::Unreachable("refused".into()))
                } else {
                    Ok(n)
                }
            }
        })
        .await;
        assert_eq!(result.unwrap(), 3);

        let mut calls = 0;
        let result: Result<(), _> = with_retry(&quick, "test", || {
            calls += 1;
            async { Err(status(422, None)) }
        })
        .await;
        assert!(result.is_err());
        assert_eq!(calls, 1);
    }
}
