//! The webhook's rate limit: a token bucket per client address (the API server's, or whoever
//! else reaches the port). Over the limit a review is allowed without being looked at (fail
//! open, counted as `rate_limited`): a flood of forged AdmissionReviews then cannot set
//! rollouts going faster than the limit, and a legitimate flood only loses the holds, as when
//! the operator is down. Buckets from `governor` (a keyed GCRA limiter) rather than a second
//! hand-written bucket map beside the API's.

use std::net::IpAddr;
use std::num::NonZeroU32;

use governor::{DefaultKeyedRateLimiter, Quota};

/// Clients remembered before those whose bucket has refilled are forgotten.
const MAX_CLIENTS: usize = 10_000;

/// Token buckets keyed by client address; `None` inside when the limit is off.
#[derive(Debug)]
pub struct ReviewLimiter {
    limiter: Option<DefaultKeyedRateLimiter<IpAddr>>,
}

impl ReviewLimiter {
    /// `per_second` reviews per second on average per client address, bursts of `burst`;
    /// 0 turns the limit off.
    pub fn new(per_second: u32, burst: u32) -> Self {
        let limiter = NonZeroU32::new(per_second).map(|rate| {
            let burst = NonZeroU32::new(burst.max(per_second)).unwrap_or(rate);
            governor::RateLimiter::keyed(Quota::per_second(rate).allow_burst(burst))
        });
        ReviewLimiter { limiter }
    }

    /// Takes one token for `client` (no address: the limit does not apply); false when its
    /// bucket is empty.
    pub fn allow(&self, client: Option<IpAddr>) -> bool {
        let (Some(limiter), Some(client)) = (&self.limiter, client) else {
            return true;
        };
        if limiter.len() > MAX_CLIENTS {
            limiter.retain_recent();
        }
        limiter.check_key(&client).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> Option<IpAddr> {
        Some(IpAddr::from([10, 0, 0, last]))
    }

    #[test]
    fn a_client_over_its_burst_is_limited_and_others_are_not() {
        let limiter = ReviewLimiter::new(1, 3);
        assert!((0..3).all(|_| limiter.allow(ip(1))));
        assert!(
            !limiter.allow(ip(1)),
            "the fourth review at once is over the burst"
        );
        assert!(limiter.allow(ip(2)), "another address has its own bucket");
    }

    #[test]
    fn zero_turns_the_limit_off() {
        let limiter = ReviewLimiter::new(0, 1);
        assert!((0..1000).all(|_| limiter.allow(ip(1))));
    }

    #[test]
    fn a_review_without_a_client_address_is_not_limited() {
        let limiter = ReviewLimiter::new(1, 1);
        assert!((0..10).all(|_| limiter.allow(None)));
    }
}
