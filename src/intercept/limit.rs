//! The webhook's rate limit: a token bucket per client address (the API server's, or whoever
//! else reaches the port). Over the limit a review is allowed without being looked at (fail
//! open, counted as `rate_limited`): a flood of forged AdmissionReviews then cannot set
//! rollouts going faster than the limit, and a legitimate flood only loses the holds, as when
//! the operator is down. The buckets are the runtime's [`KeyedLimit`], as the API's are.

use std::net::IpAddr;

use crate::runtime::keyed_limit::KeyedLimit;

/// Clients remembered before those whose bucket has refilled are forgotten.
const MAX_CLIENTS: usize = 10_000;

/// Token buckets keyed by client address.
#[derive(Debug)]
pub struct ReviewLimiter {
    buckets: KeyedLimit<IpAddr>,
}

impl ReviewLimiter {
    /// `per_second` reviews per second on average per client address, bursts of `burst` (at
    /// least `per_second`); 0 turns the limit off.
    pub fn new(per_second: u32, burst: u32) -> Self {
        let burst = burst.max(per_second);
        ReviewLimiter {
            buckets: KeyedLimit::per_second(f64::from(per_second), burst, MAX_CLIENTS),
        }
    }

    /// Takes one token for `client` (no address: the limit does not apply); false when its
    /// bucket is empty.
    pub fn allow(&self, client: Option<IpAddr>) -> bool {
        client.is_none_or(|client| self.buckets.allow(&client))
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
