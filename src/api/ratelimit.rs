//! Per-client rate limiting: a token bucket per client, checked before the request is
//! authenticated, so that a flood never reaches the TokenReview API.
//!
//! A client is its identity when its credential is already known (a static token, or a
//! Kubernetes token reviewed within the authentication cache's lifetime), so that a CI fleet
//! behind one Ingress or NAT does not share one bucket; otherwise it is its address: the
//! connection's peer, or the client named by `X-Forwarded-For` when the peer is one of the
//! `--trusted-proxies`.

use std::net::{IpAddr, SocketAddr};

use ipnet::IpNet;

use crate::runtime::address_slots::canonical;
use crate::runtime::keyed_limit::KeyedLimit;

/// Whose bucket a request takes its token from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RateKey {
    /// An authenticated identity (`system:serviceaccount:ns:sa`, `static:<name>`).
    Identity(String),
    /// A client address.
    Address(IpAddr),
}

/// Clients held before those whose bucket has refilled are forgotten.
const MAX_CLIENTS: usize = 50_000;

/// Token buckets keyed by client ([`KeyedLimit`]).
#[derive(Debug)]
pub struct RateLimiter {
    buckets: KeyedLimit<RateKey>,
}

impl RateLimiter {
    /// `per_second` requests per second on average, bursts of `burst`; 0 disables the limit.
    pub fn new(per_second: f64, burst: u32) -> Self {
        Self {
            buckets: KeyedLimit::per_second(per_second, burst, MAX_CLIENTS),
        }
    }

    /// Takes one token for `client`; false when its bucket is empty.
    pub fn allow(&self, client: &RateKey) -> bool {
        self.buckets.allow(client)
    }
}

/// A `--trusted-proxies` entry: a CIDR (`10.0.0.0/8`) or a single address.
pub fn parse_cidr(text: &str) -> Result<IpNet, String> {
    let text = text.trim();
    text.parse::<IpNet>()
        .or_else(|_| text.parse::<IpAddr>().map(IpNet::from))
        .map_err(|_| format!("{text:?} is not a CIDR such as 10.0.0.0/8 or an address"))
}

/// One hop of `X-Forwarded-For`: an address, possibly with a port (`1.2.3.4:5`, `[::1]:5`).
fn hop(text: &str) -> Option<IpAddr> {
    let text = text.trim();
    text.parse::<IpAddr>()
        .ok()
        .or_else(|| text.parse::<SocketAddr>().ok().map(|s| s.ip()))
}

/// The client address of a request from `peer` carrying the `X-Forwarded-For` header values
/// `forwarded` (in order): `peer` itself unless it is a trusted proxy; otherwise the hops are
/// read from the right, each trusted proxy passing the request on from the hop before it, and
/// the first hop that is not a trusted proxy is the client. A hop that is not an address
/// stops the walk at the last trusted proxy, which is then taken as the client: what comes
/// before a malformed hop cannot be believed.
pub fn client_address(peer: IpAddr, forwarded: &[&str], trusted: &[IpNet]) -> IpAddr {
    let is_trusted = |ip: &IpAddr| trusted.iter().any(|net| net.contains(&canonical(*ip)));
    if !is_trusted(&peer) {
        return peer;
    }
    let mut client = peer;
    for text in forwarded.iter().rev().flat_map(|v| v.rsplit(',')) {
        if text.trim().is_empty() {
            continue;
        }
        let Some(ip) = hop(text) else {
            return client;
        };
        client = canonical(ip);
        if !is_trusted(&client) {
            return client;
        }
    }
    client
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn two_identities_from_one_address_have_two_buckets() {
        let limiter = RateLimiter::new(1.0, 1);
        let ci = |n: &str| RateKey::Identity(format!("system:serviceaccount:ci:{n}"));
        assert!(limiter.allow(&ci("a")));
        assert!(!limiter.allow(&ci("a")));
        assert!(limiter.allow(&ci("b")));
        assert!(limiter.allow(&RateKey::Address(ip("10.0.0.1"))));
    }

    #[test]
    fn forwarded_for_is_believed_only_from_a_trusted_proxy() {
        let trusted = [
            parse_cidr("10.0.0.0/8").unwrap(),
            parse_cidr("fd00::1").unwrap(),
        ];
        let xff = ["203.0.113.7, 10.1.1.1"];
        assert_eq!(
            client_address(ip("192.0.2.1"), &xff, &trusted),
            ip("192.0.2.1"),
            "an untrusted peer is the client whatever it claims"
        );
        assert_eq!(
            client_address(ip("10.2.2.2"), &xff, &trusted),
            ip("203.0.113.7"),
            "the first untrusted hop from the right"
        );
        assert_eq!(
            client_address(ip("10.2.2.2"), &["198.51.100.9", "203.0.113.7"], &trusted),
            ip("203.0.113.7"),
            "several headers read as one list, a client's own claim to the left is ignored"
        );
        assert_eq!(
            client_address(ip("fd00::1"), &["203.0.113.7:4321"], &trusted),
            ip("203.0.113.7"),
            "a hop with a port"
        );
        assert_eq!(
            client_address(ip("::ffff:10.2.2.2"), &["[2001:db8::5]:80"], &trusted),
            ip("2001:db8::5"),
            "an IPv4-mapped peer is its IPv4 address"
        );
        assert_eq!(
            client_address(
                ip("10.2.2.2"),
                &["203.0.113.7, garbage, 10.1.1.1"],
                &trusted
            ),
            ip("10.1.1.1"),
            "a malformed hop stops the walk at the last proxy"
        );
        assert_eq!(
            client_address(ip("10.2.2.2"), &[], &trusted),
            ip("10.2.2.2")
        );
        assert_eq!(
            client_address(ip("10.2.2.2"), &xff, &[]),
            ip("10.2.2.2"),
            "no trusted proxies: the header is never read"
        );
        assert!(parse_cidr("10.0.0.0/33").is_err());
        assert!(parse_cidr("proxy").is_err());
    }
}
