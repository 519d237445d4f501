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
//! JWT and JWK work is done by `jsonwebtoken` 9.3: the last line of that crate built on
//! `ring`, the crypto library the operator's TLS (rustls, kube, rcgen) already uses; versions
//! 10 and later offer only `aws-lc-rs` (a C build) or the RustCrypto stack (`rsa`, whose
//! timing advisory is open), either a second crypto library in the binary.

use std::sync::RwLock;
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::{Map, Value};
use tracing::{info, warn};

use super::fetch::Fetcher;
use super::token::{Header, Refusal};

/// How often the keys are fetched again even when nothing asks for it (more often when
/// `--oidc-keys-max-age` is short: [`IssuerKeys::refresh_every`]).
pub const REFRESH_EVERY: Duration = Duration::from_secs(600);
/// Shortest time between two fetches caused by unknown key ids.
pub const MIN_REFETCH: Duration = Duration::from_secs(5);
/// How long keys keep verifying after the last successful fetch, by default: long enough to
/// ride out an issuer's outage of hours (GitHub's and GitLab's have been), short enough that a
/// withdrawn key is not honoured for more than a day by an operator cut off from the issuer.
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(24 * 3600);

/// One verification key.
struct Key {
    kid: Option<String>,
    alg: Option<Algorithm>,
    key: DecodingKey,
}

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
}

#[derive(Deserialize)]
struct Discovery {
    issuer: String,
    jwks_uri: String,
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

/// The keys of a JWKS document usable for signatures (kept: RSA, EC and OKP keys whose `use`
/// is absent or `sig`; skipped, with their count: encryption keys, symmetric keys, and keys
/// this crate cannot read).
fn parse_jwks(doc: &Map<String, Value>) -> (Vec<Key>, usize) {
    let mut keys = Vec::new();
    let mut skipped = 0;
    let list = doc
        .get("keys")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for value in list {
        let Ok(jwk) = serde_json::from_value::<Jwk>(value) else {
            skipped += 1;
            continue;
        };
        let usable = !matches!(
            jwk.algorithm,
            jsonwebtoken::jwk::AlgorithmParameters::OctetKey(_)
        ) && matches!(
            jwk.common.public_key_use,
            None | Some(PublicKeyUse::Signature)
        );
        match DecodingKey::from_jwk(&jwk) {
            Ok(key) if usable => keys.push(Key {
                kid: jwk.common.key_id.clone(),
                alg: jwk
                    .common
                    .key_algorithm
                    .and_then(|a| a.to_string().parse::<Algorithm>().ok()),
                key,
            }),
            _ => skipped += 1,
        }
    }
    (keys, skipped)
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
    async fn download(&self) -> Result<Vec<Key>, String> {
        let issuer = self.issuer();
        let url = format!("{issuer}/.well-known/openid-configuration");
        let doc = self.fetcher.get_json(&url).await?;
        let discovery: Discovery =
            serde_json::from_value(Value::Object(doc)).map_err(|e| format!("{url}: {e}"))?;
        // OpenID Connect Discovery 1.0 §4.3: the document must name the issuer it was
        // fetched for, or its keys are not that issuer's.
        if discovery.issuer.trim_end_matches('/') != issuer {
            return Err(format!(
                "{url} names issuer {:?}, not {issuer:?}",
                discovery.issuer
            ));
        }
        // `get_json` refuses a jwks_uri off the issuer's hosts before any request.
        let jwks = self
            .fetcher
            .get_json(&discovery.jwks_uri)
            .await
            .map_err(|e| format!("jwks_uri: {e}"))?;
        let (keys, skipped) = parse_jwks(&jwks);
        if keys.is_empty() {
            return Err(format!("{}: no usable signing key", discovery.jwks_uri));
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
        cached.attempted = Some(now);
        match result {
            Ok(keys) => {
                let count = keys.len();
                cached.keys = keys;
                cached.fetched = Some(now);
                cached.error = None;
                Ok(count)
            }
            Err(error) => {
                let fresh = is_fresh(cached.fetched, now, self.max_age);
                warn!(issuer = self.issuer(), %error, kept = cached.keys.len(), fresh, "issuer keys not fetched; the cached ones verify until they are --oidc-keys-max-age old");
                cached.error = Some(error.clone());
                Err(error)
            }
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
            let stale = cached
                .fetched
                .filter(|&at| !is_fresh(Some(at), Instant::now(), self.max_age));
            Err(Refusal(match (&cached.error, stale) {
                (Some(error), Some(at)) => format!(
                    "token: kid: the keys of issuer {issuer:?} were last fetched {}s ago, longer \
                     than --oidc-keys-max-age ({}s) allows, and cannot be fetched now ({error})",
                    at.elapsed().as_secs(),
                    self.max_age.as_secs()
                ),
                (Some(error), None) => format!(
                    "token: kid: key {kid:?} of issuer {issuer:?} is not known and the issuer's \
                     keys could not be fetched ({error})"
                ),
                (None, _) => format!(
                    "token: kid: key {kid:?} is not among the signing keys issuer {issuer:?} \
                     publishes"
                ),
            }))
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
        let candidates: Vec<&Key> = cached
            .keys
            .iter()
            .filter(|k| header.kid.is_none() || k.kid == header.kid)
            .filter(|k| k.alg.is_none_or(|a| a == header.alg))
            .collect();
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

    #[test]
    fn only_asymmetric_signing_keys_are_kept_from_a_jwks() {
        let doc = json!({"keys": [
            {"kty": "RSA", "kid": "rsa", "use": "sig", "alg": "RS256",
             "n": "sXchDaQebHnPiGvyDOAT4saGEUetSyo9MKLOoWFsueri23bOdgWp4Dy1WlUzewbgBHod5pcM9H95GQRV3JDXboIRROSBigeC5yjU1hGzHHyXss8UDprecbAYxknTcQkhslANGRUZmdTOQ5qTRsLAt6BTYuyvVRdhS8exSZEy_c4gs_7svlJJQ4H9_NxsiIoLwAEk7-Q3UXERGYw_75IDrGA84-lA_-Ct4eTlXHBIY2EaV7t7LjJaynVJCpkv4LKjTTAumiGUIuQhrNhZLuF_RJLqHpM2kgWFLU7-VTdL1VbC2tejvcI2BlMkEpk1BzBZI0KQB0GaDWFLN-aEAw3vRw",
             "e": "AQAB"},
            {"kty": "RSA", "kid": "enc", "use": "enc",
             "n": "sXchDaQebHnPiGvyDOAT4saGEUetSyo9MKLOoWFsueri23bOdgWp4Dy1WlUzewbgBHod5pcM9H95GQRV3JDXboIRROSBigeC5yjU1hGzHHyXss8UDprecbAYxknTcQkhslANGRUZmdTOQ5qTRsLAt6BTYuyvVRdhS8exSZEy_c4gs_7svlJJQ4H9_NxsiIoLwAEk7-Q3UXERGYw_75IDrGA84-lA_-Ct4eTlXHBIY2EaV7t7LjJaynVJCpkv4LKjTTAumiGUIuQhrNhZLuF_RJLqHpM2kgWFLU7-VTdL1VbC2tejvcI2BlMkEpk1BzBZI0KQB0GaDWFLN-aEAw3vRw",
             "e": "AQAB"},
            {"kty": "oct", "kid": "hmac", "k": "c2VjcmV0"},
            {"kty": "weird", "kid": "x"},
        ]});
        let (keys, skipped) = parse_jwks(doc.as_object().unwrap());
        assert_eq!(keys.len(), 1);
        assert_eq!(keys[0].kid.as_deref(), Some("rsa"));
        assert_eq!(keys[0].alg, Some(Algorithm::RS256));
        assert_eq!(skipped, 3);
    }
}
