//! A token bucket per key, bounded in memory: `governor`'s keyed GCRA limiter, shared by the
//! HTTP API's per-client limit, the webhook's per-address limit and the `TokenRefused` Events
//! per CITrust. Once it holds more than its bound of keys, the keys whose bucket has refilled
//! are forgotten (they lose nothing: a forgotten key starts again with a full bucket); a key
//! still limited is kept, so a flood of new keys never resets the limit of an old one.

use std::hash::Hash;
use std::num::NonZeroU32;
use std::time::Duration;

use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

/// Token buckets keyed by `K`; no limit at all when built with a zero rate.
#[derive(Debug)]
pub struct KeyedLimit<K: Hash + Eq + Clone> {
    limiter: Option<DefaultKeyedRateLimiter<K>>,
    max_keys: usize,
}

impl<K: Hash + Eq + Clone> KeyedLimit<K> {
    /// `per_second` tokens a second on average per key (fractions allowed), bursts of `burst`;
    /// a rate of 0 (or one that is not a finite positive number) turns the limit off.
    pub fn per_second(per_second: f64, burst: u32, max_keys: usize) -> Self {
        let limiter = (per_second.is_finite() && per_second > 0.0)
            .then(|| Duration::from_secs_f64(1.0 / per_second))
            .and_then(Quota::with_period)
            .map(|quota| RateLimiter::keyed(quota.allow_burst(nonzero(burst))));
        Self { limiter, max_keys }
    }

    /// One token per `period` on average per key, bursts of `burst`.
    pub fn every(period: Duration, burst: u32, max_keys: usize) -> Self {
        let limiter = Quota::with_period(period)
            .map(|quota| RateLimiter::keyed(quota.allow_burst(nonzero(burst))));
        Self { limiter, max_keys }
    }

    /// Takes one token for `key`; false when its bucket is empty.
    pub fn allow(&self, key: &K) -> bool {
        let Some(limiter) = &self.limiter else {
            return true;
        };
        if limiter.len() > self.max_keys {
            limiter.retain_recent();
            limiter.shrink_to_fit();
        }
        limiter.check_key(key).is_ok()
    }

    /// Keys held now.
    pub fn keys(&self) -> usize {
        self.limiter.as_ref().map_or(0, |l| l.len())
    }
}

fn nonzero(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_gets_its_burst_then_waits_for_a_refill_while_others_are_untouched() {
        let limit = KeyedLimit::per_second(2.0, 3, 100);
        assert!((0..3).all(|_| limit.allow(&"a")));
        assert!(!limit.allow(&"a"), "the fourth at once is over the burst");
        assert!(limit.allow(&"b"), "another key has its own bucket");
        std::thread::sleep(Duration::from_millis(600));
        assert!(limit.allow(&"a"), "one token back after half a second");
        assert!(!limit.allow(&"a"));
    }

    #[test]
    fn a_fractional_rate_is_a_token_per_period() {
        let limit = KeyedLimit::per_second(0.5, 1, 100);
        assert!(limit.allow(&1));
        assert!(!limit.allow(&1), "the next token comes in 2 s");
    }

    #[test]
    fn a_zero_rate_turns_the_limit_off() {
        let limit = KeyedLimit::per_second(0.0, 1, 100);
        assert!((0..1000).all(|_| limit.allow(&"a")));
        let limit = KeyedLimit::per_second(f64::NAN, 1, 100);
        assert!((0..1000).all(|_| limit.allow(&"a")));
        let limit = KeyedLimit::every(Duration::ZERO, 1, 100);
        assert!((0..1000).all(|_| limit.allow(&"a")));
    }

    #[test]
    fn a_flood_of_new_keys_is_bounded_and_never_frees_a_limited_key() {
        // One token per minute: nobody's bucket refills during the test.
        let limit = KeyedLimit::every(Duration::from_secs(60), 1, 1_000);
        assert!(limit.allow(&0u32));
        assert!(!limit.allow(&0u32));
        for key in 1..=5_000u32 {
            limit.allow(&key);
        }
        assert!(!limit.allow(&0u32), "the flood did not reset key 0");
        // Keys whose bucket has refilled are dropped once over the bound.
        let refilling = KeyedLimit::per_second(1_000_000.0, 1, 1_000);
        for key in 0..5_000u32 {
            refilling.allow(&key);
        }
        assert!(refilling.keys() <= 1_001, "{} keys held", refilling.keys());
    }
}
