//! Per-client rate limiting: a token bucket per client address, checked before
//! authentication so that a flood never reaches the TokenReview API.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Instant;

/// Token buckets keyed by client address.
#[derive(Debug)]
pub struct RateLimiter {
    per_second: f64,
    burst: f64,
    buckets: Mutex<HashMap<IpAddr, Bucket>>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

const MAX_CLIENTS: usize = 50_000;

impl RateLimiter {
    /// `per_second` requests per second on average, bursts of `burst`; 0 disables the limit.
    pub fn new(per_second: f64, burst: u32) -> Self {
        Self {
            per_second,
            burst: f64::from(burst.max(1)),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one token for `client` at `now`; false when its bucket is empty.
    pub fn allow(&self, client: IpAddr, now: Instant) -> bool {
        if self.per_second <= 0.0 {
            return true;
        }
        let mut buckets = self.buckets.lock().expect("rate limiter lock");
        if buckets.len() >= MAX_CLIENTS {
            // Forget clients whose bucket has refilled: they lose nothing.
            let refill = self.burst / self.per_second;
            buckets.retain(|_, b| now.duration_since(b.at).as_secs_f64() < refill);
        }
        let bucket = buckets.entry(client).or_insert(Bucket {
            tokens: self.burst,
            at: now,
        });
        let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * self.per_second).min(self.burst);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_client_gets_its_burst_then_waits_for_refill_while_others_are_untouched() {
        let limiter = RateLimiter::new(2.0, 3);
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let t0 = Instant::now();
        assert!((0..3).all(|_| limiter.allow(a, t0)));
        assert!(!limiter.allow(a, t0));
        assert!(limiter.allow(b, t0));
        assert!(limiter.allow(a, t0 + Duration::from_millis(500)));
        assert!(!limiter.allow(a, t0 + Duration::from_millis(500)));
    }

    #[test]
    fn a_zero_rate_disables_the_limit() {
        let limiter = RateLimiter::new(0.0, 1);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        assert!((0..1000).all(|_| limiter.allow(a, Instant::now())));
    }
}
