//! The webhook's rate limit: a token bucket per requester — the client address the review came
//! from, the user the API server says asked for the eviction (`userInfo.username`), and the
//! eviction's namespace. Every review the API server sends comes from its own address, so a
//! bucket per address alone would be one bucket for the whole cluster, and one tenant's flood
//! of evictions would empty it for everyone; keyed by who asked and where, a tenant's flood
//! drains only its own bucket, and a forged flood posted straight to the port (from another
//! address) drains none of the API server's.
//!
//! Only reviews that could set something going reach a bucket: the handler answers those that
//! cannot concern a lone replica (a pod the cache does not hold, a namespace out of scope, a
//! node not being disrupted) from the caches first, at no cost. Over the limit a review is
//! allowed without acting on it (fail open, counted as `rate_limited`): a flood of forged
//! AdmissionReviews then cannot set rollouts going faster than the limit, and a legitimate
//! flood only loses the holds, as when the operator is down.
//!
//! The key is a hash (with a per-process random seed, so nobody can aim two requesters at one
//! bucket) of the three, so a forged username of a megabyte costs eight bytes; the buckets are
//! the runtime's [`KeyedLimit`], bounded as the API's are.

use std::hash::{BuildHasher, Hash, Hasher};
use std::net::IpAddr;

use crate::runtime::address_slots::canonical;
use crate::runtime::keyed_limit::KeyedLimit;

/// Requesters remembered before those whose bucket has refilled are forgotten.
const MAX_REQUESTERS: usize = 10_000;

/// Who asked for an eviction, as far as the webhook can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Requester<'a> {
    /// The address the review came from (the API server's, or whoever else reaches the port).
    pub client: Option<IpAddr>,
    /// `request.userInfo.username`.
    pub username: &'a str,
    /// The eviction's namespace.
    pub namespace: &'a str,
}

/// Token buckets keyed by requester.
#[derive(Debug)]
pub struct ReviewLimiter {
    buckets: KeyedLimit<u64>,
    seed: std::collections::hash_map::RandomState,
}

impl ReviewLimiter {
    /// `per_second` reviews per second on average per requester, bursts of `burst` (at least
    /// `per_second`); 0 turns the limit off.
    pub fn new(per_second: u32, burst: u32) -> Self {
        let burst = burst.max(per_second);
        ReviewLimiter {
            buckets: KeyedLimit::per_second(f64::from(per_second), burst, MAX_REQUESTERS),
            seed: std::collections::hash_map::RandomState::new(),
        }
    }

    /// Takes one token for `requester`; false when its bucket is empty.
    pub fn allow(&self, requester: &Requester<'_>) -> bool {
        let mut hasher = self.seed.build_hasher();
        requester.client.map(canonical).hash(&mut hasher);
        requester.username.hash(&mut hasher);
        requester.namespace.hash(&mut hasher);
        self.buckets.allow(&hasher.finish())
    }

    /// Requesters remembered now.
    pub fn requesters(&self) -> usize {
        self.buckets.keys()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const API_SERVER: Option<IpAddr> = Some(IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1)));

    fn tenant<'a>(username: &'a str, namespace: &'a str) -> Requester<'a> {
        Requester {
            client: API_SERVER,
            username,
            namespace,
        }
    }

    #[test]
    fn one_tenants_flood_through_the_api_server_drains_only_its_own_bucket() {
        let limiter = ReviewLimiter::new(1, 3);
        let flooder = tenant("system:serviceaccount:a:evictor", "a");
        assert!((0..3).all(|_| limiter.allow(&flooder)));
        assert!(
            !limiter.allow(&flooder),
            "the fourth review at once is over the burst"
        );
        let drainer = tenant("system:serviceaccount:karpenter:karpenter", "b");
        assert!(
            limiter.allow(&drainer),
            "another user in another namespace has its own bucket, from the same address"
        );
        assert!(
            limiter.allow(&tenant("system:serviceaccount:a:evictor", "c")),
            "the same user in another namespace too"
        );
    }

    #[test]
    fn a_forged_flood_from_another_address_leaves_the_api_servers_buckets_alone() {
        let limiter = ReviewLimiter::new(1, 1);
        let forged = Requester {
            client: Some("10.244.3.7".parse().unwrap()),
            ..tenant("system:serviceaccount:karpenter:karpenter", "b")
        };
        assert!(limiter.allow(&forged));
        assert!(!limiter.allow(&forged));
        assert!(limiter.allow(&tenant("system:serviceaccount:karpenter:karpenter", "b")));
    }

    #[test]
    fn an_ipv4_client_on_a_dual_stack_socket_shares_its_ipv4_bucket() {
        let limiter = ReviewLimiter::new(1, 1);
        let v4 = tenant("u", "a");
        let mapped = Requester {
            client: Some("::ffff:10.0.0.1".parse().unwrap()),
            ..v4
        };
        assert!(limiter.allow(&v4));
        assert!(!limiter.allow(&mapped));
    }

    #[test]
    fn zero_turns_the_limit_off() {
        let limiter = ReviewLimiter::new(0, 1);
        assert!((0..1000).all(|_| limiter.allow(&tenant("u", "a"))));
    }

    #[test]
    fn requesters_are_bounded_whatever_the_usernames_sent() {
        let limiter = ReviewLimiter::new(1_000_000, 1);
        let long = "x".repeat(10_000);
        for i in 0..20_000 {
            let username = format!("{long}{i}");
            limiter.allow(&tenant(&username, "a"));
        }
        assert!(
            limiter.requesters() <= MAX_REQUESTERS + 1,
            "{}",
            limiter.requesters()
        );
    }
}
