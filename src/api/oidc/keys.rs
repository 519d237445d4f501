//! The signing keys of one trusted issuer: discovery (`/.well-known/openid-configuration`)
//! and its JWKS fetched over HTTPS, cached, fetched again on a schedule ([`REFRESH_EVERY`])
//! and when a token names a key id the cache does not hold (at most once per
//! [`MIN_REFETCH`], so a flood of made-up key ids cannot turn into a flood of fetches: such a
//! token waits for the next allowed fetch, shared by every request waiting, then is refused).
//!
//! An issuer that is down changes nothing for keys already cached, for a while: keys that no
//! successful fetch has confirmed for `--oidc-keys-max-age` (default [`DEFAULT_MAX_AGE`]) stop
//! verifying, so a key the issuer withdrew (leaked, rotated out) is not honoured forever by an
//! operator that cannot reach the issuer to learn it. A successful fetch replaces the whole set:
//! a withdrawn key stops verifying at once. A token signed with a key that cannot be fetched is
//! refused (401) with the reason, never a 500. The fetching itself (HTTPS, hosts, size) is
//! [`super::fetch`]'s.
//!
//! Bounded in cost whatever the issuer publishes or a token says ([`super::jwks`]): a JWKS of
//! more than [`MAX_JWKS_KEYS`] keys is refused whole (the previous keys kept, [`record`]), and a
//! token is tried against at most [`super::jwks::MAX_TRIES`] keys. A refusal because the keys cannot be fetched tells the caller only that (401); the fetch error
//! goes to the log and `disruption_guard_api_oidc_key_fetches_total`.
//!
//! JWT and JWK work is done by `jsonwebtoken` 9.3: the last line of that crate built on
//! `ring`, the crypto library the operator's TLS (rustls, kube, rcgen) already uses; versions
//! 10 and later offer only `aws-lc-rs` (a C build) or the RustCrypto stack (`rsa`, whose
//! timing advisory is open), either a second crypto library in the binary.

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use jsonwebtoken::Validation;
use serde::Deserialize;
use serde_json::{Map, Value};
use tracing::{info, warn};

use super::fetch::Fetcher;
use super::jwks::{FetchFailed, Key, MAX_JWKS_KEYS, candidates, parse_jwks};
use super::token::{Header, Refusal};
use crate::api::ApiMetrics;

/// How often the keys are fetched again even when nothing asks for it (more often when
/// `--oidc-keys-max-age` is short: [`IssuerKeys::refresh_every`]).
pub const REFRESH_EVERY: Duration = Duration::from_secs(600);
/// Shortest time between two fetches caused by unknown key ids.
pub const MIN_REFETCH: Duration = Duration::from_secs(5);
/// How long keys keep verifying after the last successful fetch, by default: long enough to
/// ride out an issuer's outage of hours (GitHub's and GitLab's have been), short enough that a
/// withdrawn key is not honoured for more than a day by an operator cut off from the issuer.
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(24 * 3600);

#[derive(Default)]
struct Cached {
    keys: Vec<Key>,
    /// When the last fetch was attempted (successful or not).
    attempted: Option<Instant>,
    /// When the last fetch succeeded: the keys are as the issuer published them then.
    fetched: Option<Instant>,
    /// Why the last fetch failed, if it did.
    error: Option<String>,
}

/// The keys of one issuer.
pub struct IssuerKeys {
    fetcher: Fetcher,
    /// `--oidc-keys-max-age`.
    max_age: Duration,
    cached: RwLock<Cached>,
    /// Held while fetching: concurrent unknown key ids share one fetch.
    fetching: tokio::sync::Mutex<()>,
    /// Where fetches and refusals are counted.
    metrics: Option<Arc<ApiMetrics>>,
}

#[derive(Deserialize)]
struct Discovery {
    issuer: String,
    jwks_uri: String,
}

/// What a fetch's `result` at `now` does to `cached`: a success replaces every key (a withdrawn
/// one stops verifying at once); a failure, a JWKS over the bound included, keeps the previous
/// keys, as fresh as they were, and records why. Returns the count of keys, or the failure.
fn record(
    cached: &mut Cached,
    result: Result<Vec<Key>, FetchFailed>,
    now: Instant,
) -> Result<usize, FetchFailed> {
    cached.attempted = Some(now);
    match result {
        Ok(keys) => {
            let count = keys.len();
            cached.keys = keys;
            cached.fetched = Some(now);
            cached.error = None;
            Ok(count)
        }
        Err(failed) => {
            cached.error = Some(failed.error.clone());
            Err(failed)
        }
    }
}

/// How long an unknown key id waits before it may cause a fetch (`None`: fetch now): pure,
/// so it is unit-tested.
pub fn refetch_wait(attempted: Option<Instant>, now: Instant) -> Option<Duration> {
    let since = now.saturating_duration_since(attempted?);
    (since < MIN_REFETCH).then(|| MIN_REFETCH - since)
}

/// Whether keys last fetched at `fetched` may still verify at `now`: pure, so it is unit-tested.
pub fn is_fresh(fetched: Option<Instant>, now: Instant, max_age: Duration) -> bool {
    fetched.is_some_and(|at| now.saturating_duration_since(at) < max_age)
}

impl IssuerKeys {
    /// The keys of the issuer `fetcher` fetches for, verifying for `max_age` after each
    /// successful fetch; nothing is fetched yet.
    pub fn new(fetcher: Fetcher, max_age: Duration) -> Self {
        Self {
            fetcher,
            max_age,
            cached: RwLock::new(Cached::default()),
            fetching: tokio::sync::Mutex::new(()),
            metrics: None,
        }
    }

    /// The same, counting its fetches and refusals in `metrics`.
    pub fn counted(self, metrics: Arc<ApiMetrics>) -> Self {
        Self {
            metrics: Some(metrics),
            ..self
        }
    }

    /// The issuer these keys belong to.
    pub fn issuer(&self) -> &str {
        self.fetcher.issuer()
    }

    /// How often [`super::Verifier::start_refresh`] fetches the keys: every
    /// [`REFRESH_EVERY`], or twice per `max_age` when that is shorter, so keys never age out
    /// while the issuer answers.
    pub fn refresh_every(&self) -> Duration {
        REFRESH_EVERY.min(self.max_age / 2)
    }

    /// Discovery, then the JWKS it names.
    async fn download(&self) -> Result<Vec<Key>, FetchFailed> {
        let issuer = self.issuer();
        let url = format!("{issuer}/.well-known/openid-configuration");
        let doc = self
            .fetcher
            .get_json(&url)
            .await
            .map_err(FetchFailed::from)?;
        let discovery: Discovery =
            serde_json::from_value(Value::Object(doc)).map_err(|e| format!("{url}: {e}"))?;
        // OpenID Connect Discovery 1.0 §4.3: the document must name the issuer it was
        // fetched for, or its keys are not that issuer's.
        if discovery.issuer.trim_end_matches('/') != issuer {
            return Err(
                format!("{url} names issuer {:?}, not {issuer:?}", discovery.issuer).into(),
            );
        }
        // `get_json` refuses a jwks_uri off the issuer's hosts before any request.
        let jwks = self
            .fetcher
            .get_json(&discovery.jwks_uri)
            .await
            .map_err(|e| FetchFailed::from(format!("jwks_uri: {e}")))?;
        let (keys, skipped) = parse_jwks(&jwks).map_err(|e| FetchFailed {
            error: format!("{}: {}", discovery.jwks_uri, e.error),
            ..e
        })?;
        if keys.is_empty() {
            return Err(format!("{}: no usable signing key", discovery.jwks_uri).into());
        }
        info!(issuer, keys = keys.len(), skipped, "issuer keys fetched");
        Ok(keys)
    }

    /// Fetches the keys now; returns how many are usable, or why the fetch failed (the cached
    /// keys then stay, until they are `max_age` old).
    pub async fn refresh(&self) -> Result<usize, String> {
        let _guard = self.fetching.lock().await;
        self.refresh_locked().await
    }

    async fn refresh_locked(&self) -> Result<usize, String> {
        let result = self.download().await;
        let now = Instant::now();
        let mut cached = self.cached.write().expect("issuer keys lock");
        self.count(match &result {
            Ok(_) => "fetched",
            Err(failed) => failed.result,
        });
        let kept = cached.keys.len();
        let fresh = is_fresh(cached.fetched, now, self.max_age);
        record(&mut cached, result, now).map_err(|FetchFailed { result, error }| {
            if result == "too_many_keys" {
                warn!(issuer = self.issuer(), %error, max = MAX_JWKS_KEYS, kept, fresh, "issuer's JWKS refused: it lists more keys than accepted; the previous keys are kept, verifying until they are --oidc-keys-max-age old");
            } else {
                warn!(issuer = self.issuer(), %error, kept, fresh, "issuer keys not fetched; the cached ones verify until they are --oidc-keys-max-age old");
            }
            error
        })
    }

    fn count(&self, result: &'static str) {
        if let Some(metrics) = &self.metrics {
            metrics.key_fetch(result);
        }
    }

    /// Verifies the signature of `token` (whose header is `header`) and returns its claims
    /// (unchecked: see [`super::token::check`]). A key id the cache does not hold waits for the
    /// next fetch (one at a time, at most one per [`MIN_REFETCH`]: every request waiting then
    /// shares it) before the token is refused, so a rotation at the issuer never fails a
    /// request, and made-up key ids cost one fetch per interval whatever their number.
    pub async fn verify(
        &self,
        token: &str,
        header: &Header,
    ) -> Result<Map<String, Value>, Refusal> {
        if let Some(result) = self.verify_cached(token, header) {
            return result;
        }
        let arrived = Instant::now();
        {
            let _guard = self.fetching.lock().await;
            let attempted = self.cached.read().expect("issuer keys lock").attempted;
            // A fetch that started after this request arrived already answered it.
            let fetched_since = attempted.is_some_and(|at| at >= arrived);
            if !fetched_since {
                if let Some(wait) = refetch_wait(attempted, Instant::now()) {
                    tokio::time::sleep(wait).await;
                }
                let _ = self.refresh_locked().await;
            }
        }
        self.verify_cached(token, header).unwrap_or_else(|| {
            let cached = self.cached.read().expect("issuer keys lock");
            let kid = header.kid.as_deref().unwrap_or("(none)");
            let issuer = self.issuer();
            let Some(error) = &cached.error else {
                return Err(Refusal(format!(
                    "token: kid: key {kid:?} is not among the signing keys issuer {issuer:?} \
                     publishes"
                )));
            };
            // The caller learns that the keys are unavailable, not why: the fetch error names
            // hosts, addresses and certificates of the operator's network.
            let stale = cached
                .fetched
                .filter(|&at| !is_fresh(Some(at), Instant::now(), self.max_age));
            warn!(issuer, kid, %error, last_fetched_secs_ago = stale.map(|at| at.elapsed().as_secs()), "CI token refused: its issuer's keys could not be fetched");
            if let Some(metrics) = &self.metrics {
                metrics.ci_refusal("keys_unavailable");
            }
            Err(Refusal(format!(
                "token: kid: key {kid:?} of issuer {issuer:?} cannot be verified now: the \
                 issuer's keys could not be fetched; retry later"
            )))
        })
    }

    /// `None` when no cached key fits the token's key id and algorithm, or the cached keys are
    /// older than `max_age`.
    fn verify_cached(
        &self,
        token: &str,
        header: &Header,
    ) -> Option<Result<Map<String, Value>, Refusal>> {
        let cached = self.cached.read().expect("issuer keys lock");
        if !is_fresh(cached.fetched, Instant::now(), self.max_age) {
            return None;
        }
        let candidates = candidates(&cached.keys, header);
        if candidates.is_empty() {
            return None;
        }
        // Signature only: the registered claims are checked by `token::check` with an
        // injected `now`, so every refusal names its claim and is unit-tested.
        let mut validation = Validation::new(header.alg);
        validation.validate_exp = false;
        validation.validate_nbf = false;
        validation.validate_aud = false;
        validation.required_spec_claims.clear();
        let mut last = None;
        for key in candidates {
            match jsonwebtoken::decode::<Map<String, Value>>(token, &key.key, &validation) {
                Ok(data) => return Some(Ok(data.claims)),
                Err(e) => last = Some(e),
            }
        }
        let reason = match last.as_ref().map(|e| e.kind()) {
            Some(jsonwebtoken::errors::ErrorKind::InvalidSignature) => {
                "token: signature: does not verify with the issuer's key".to_string()
            }
            Some(jsonwebtoken::errors::ErrorKind::InvalidAlgorithm) => {
                format!("token: alg: {:?} does not fit the issuer's key", header.alg)
            }
            _ => format!(
                "token: not a valid signed JWT ({})",
                last.map(|e| e.to_string()).unwrap_or_default()
            ),
        };
        Some(Err(Refusal(reason)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_jwks_over_the_bound_keeps_the_previous_keys_as_fresh_as_they_were() {
        let doc = |n: usize| {
            let key = json!({"kty": "RSA", "kid": "k", "n": crate::api::oidc::jwks::tests::RSA_N, "e": "AQAB"});
            json!({"keys": vec![key; n]}).as_object().unwrap().clone()
        };
        let mut cached = Cached::default();
        let first = Instant::now();
        assert_eq!(
            record(&mut cached, parse_jwks(&doc(2)).map(|(k, _)| k), first),
            Ok(2)
        );
        let later = first + Duration::from_secs(600);
        let refused = parse_jwks(&doc(MAX_JWKS_KEYS + 1)).map(|(k, _)| k);
        let err = record(&mut cached, refused, later).unwrap_err();
        assert_eq!(err.result, "too_many_keys");
        assert_eq!(cached.keys.len(), 2, "the previous keys are kept");
        assert_eq!(
            cached.fetched,
            Some(first),
            "and are no fresher than they were"
        );
        assert_eq!(cached.attempted, Some(later));
        assert!(cached.error.as_deref().unwrap().contains("65 keys"));
        assert_eq!(
            record(&mut cached, parse_jwks(&doc(1)).map(|(k, _)| k), later),
            Ok(1)
        );
        assert_eq!(cached.error, None);
    }

    #[test]
    fn an_unknown_key_id_fetches_again_at_most_once_per_interval() {
        let now = Instant::now();
        assert_eq!(refetch_wait(None, now), None);
        assert_eq!(
            refetch_wait(Some(now), now + MIN_REFETCH / 4),
            Some(MIN_REFETCH * 3 / 4)
        );
        assert_eq!(refetch_wait(Some(now), now + MIN_REFETCH), None);
    }

    #[test]
    fn keys_verify_until_they_are_max_age_past_the_last_successful_fetch() {
        let fetched = Instant::now();
        let day = DEFAULT_MAX_AGE;
        assert!(
            !is_fresh(None, fetched, day),
            "never fetched: nothing verifies"
        );
        assert!(is_fresh(Some(fetched), fetched, day));
        assert!(is_fresh(
            Some(fetched),
            fetched + day - Duration::from_secs(1),
            day
        ));
        assert!(!is_fresh(Some(fetched), fetched + day, day));
        assert!(!is_fresh(Some(fetched), fetched + day * 30, day));
    }
}
