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
//! Bounded in cost whatever the issuer publishes or a token says: a JWKS of more than
//! [`MAX_JWKS_KEYS`] keys is refused whole (the previous keys kept), and a token is tried
//! against at most [`MAX_TRIES`] keys (a token without `kid` otherwise against every key). A
//! refusal because the keys cannot be fetched tells the caller only that (401); the fetch error
//! goes to the log and `disruption_guard_api_oidc_key_fetches_total`.
//!
//! JWT and JWK work is done by `jsonwebtoken` 9.3: the last line of that crate built on
//! `ring`, the crypto library the operator's TLS (rustls, kube, rcgen) already uses; versions
//! 10 and later offer only `aws-lc-rs` (a C build) or the RustCrypto stack (`rsa`, whose
//! timing advisory is open), either a second crypto library in the binary.

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::{Map, Value};
use tracing::{info, warn};

use super::fetch::Fetcher;
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

/// Most keys one JWKS may hold; a larger one is refused whole and the previous keys are kept.
/// Issuers publish a handful (GitHub Actions about 4, GitLab 2, a Kubernetes issuer one per
/// key in rotation): 64 leaves ten times that for a rotation's overlap, while a 1 MiB document
/// could otherwise make every refresh parse some 2,500 RSA keys, and every kid-less token try
/// them all. A JWKS that grows past it is a misconfigured or hostile issuer, said in the log.
pub const MAX_JWKS_KEYS: usize = 64;
/// Most keys one token's signature is tried against. A token names its key (`kid`) with every
/// issuer seen in practice, and then one key fits; without `kid` each key whose algorithm fits
/// is a candidate, and each try is a full signature check an unauthenticated caller buys. Four
/// covers an issuer's current key and those still in rotation (tried in the order the JWKS
/// lists them, current first with the common issuers), and bounds a made-up token to four
/// checks however many keys are published.
pub const MAX_TRIES: usize = 4;

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
    /// Where fetches and refusals are counted.
    metrics: Option<Arc<ApiMetrics>>,
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

/// Why a fetch of the keys failed: `result` is the metric's label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchFailed {
    /// `failed` or `too_many_keys`.
    pub result: &'static str,
    /// What went wrong, for the log.
    pub error: String,
}

impl From<String> for FetchFailed {
    fn from(error: String) -> Self {
        Self {
            result: "failed",
            error,
        }
    }
}

/// The keys of a JWKS document usable for signatures (kept: RSA, EC and OKP keys whose `use`
/// is absent or `sig`; skipped, with their count: encryption keys, symmetric keys, and keys
/// this crate cannot read); refused, before any key is read, when it lists more than
/// [`MAX_JWKS_KEYS`].
fn parse_jwks(doc: &Map<String, Value>) -> Result<(Vec<Key>, usize), FetchFailed> {
    let mut keys = Vec::new();
    let mut skipped = 0;
    let list = match doc.get("keys").and_then(Value::as_array) {
        Some(list) if list.len() > MAX_JWKS_KEYS => {
            return Err(FetchFailed {
                result: "too_many_keys",
                error: format!(
                    "the JWKS lists {} keys, more than the {MAX_JWKS_KEYS} accepted",
                    list.len()
                ),
            });
        }
        Some(list) => list.as_slice(),
        None => &[],
    };
    for value in list.iter().cloned() {
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
    Ok((keys, skipped))
}

/// The keys a token with `header` is tried against: those whose key id and algorithm fit (any
/// key id when the token names none), at most [`MAX_TRIES`], in the JWKS's order.
fn candidates<'a>(keys: &'a [Key], header: &Header) -> Vec<&'a Key> {
    keys.iter()
        .filter(|k| header.kid.is_none() || k.kid == header.kid)
        .filter(|k| k.alg.is_none_or(|a| a == header.alg))
        .take(MAX_TRIES)
        .collect()
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
        cached.attempted = Some(now);
        self.count(match &result {
            Ok(_) => "fetched",
            Err(failed) => failed.result,
        });
        match result {
            Ok(keys) => {
                let count = keys.len();
                cached.keys = keys;
                cached.fetched = Some(now);
                cached.error = None;
                Ok(count)
            }
            Err(FetchFailed { result, error }) => {
                let fresh = is_fresh(cached.fetched, now, self.max_age);
                let kept = cached.keys.len();
                if result == "too_many_keys" {
                    warn!(issuer = self.issuer(), %error, max = MAX_JWKS_KEYS, kept, fresh, "issuer's JWKS refused: it lists more keys than accepted; the previous keys are kept, verifying until they are --oidc-keys-max-age old");
                } else {
                    warn!(issuer = self.issuer(), %error, kept, fresh, "issuer keys not fetched; the cached ones verify until they are --oidc-keys-max-age old");
                }
                cached.error = Some(error.clone());
                Err(error)
            }
        }
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

    const RSA_N: &str = "sXchDaQebHnPiGvyDOAT4saGEUetSyo9MKLOoWFsueri23bOdgWp4Dy1WlUzewbgBHod5pcM9H95GQRV3JDXboIRROSBigeC5yjU1hGzHHyXss8UDprecbAYxknTcQkhslANGRUZmdTOQ5qTRsLAt6BTYuyvVRdhS8exSZEy_c4gs_7svlJJQ4H9_NxsiIoLwAEk7-Q3UXERGYw_75IDrGA84-lA_-Ct4eTlXHBIY2EaV7t7LjJaynVJCpkv4LKjTTAumiGUIuQhrNhZLuF_RJLqHpM2kgWFLU7-VTdL1VbC2tejvcI2BlMkEpk1BzBZI0KQB0GaDWFLN-aEAw3vRw";

    /// A JWKS of `n` RSA signing keys, each with `kid` `k<i>` or none.
    fn jwks(n: usize, kids: bool) -> Map<String, Value> {
        let keys: Vec<Value> = (0..n)
            .map(|i| {
                let mut k =
                    json!({"kty": "RSA", "use": "sig", "alg": "RS256", "n": RSA_N, "e": "AQAB"});
                if kids {
                    k["kid"] = json!(format!("k{i}"));
                }
                k
            })
            .collect();
        json!({ "keys": keys }).as_object().unwrap().clone()
    }

    /// `cargo test --lib figures_a_kidless_token -- --ignored --nocapture`: what a made-up
    /// token without `kid` costs against a JWKS of [`MAX_JWKS_KEYS`] RSA keys, tried as
    /// `verify_cached` tries it (at most [`MAX_TRIES`] keys) and against every key.
    #[test]
    #[ignore = "prints figures"]
    fn figures_a_kidless_token_against_a_full_jwks() {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let (keys, _) = parse_jwks(&jwks(MAX_JWKS_KEYS, false)).unwrap();
        let token = format!(
            "{}.{}.{}",
            b64.encode(r#"{"alg":"RS256"}"#),
            b64.encode(r#"{"iss":"https://issuer.example","sub":"x"}"#),
            b64.encode([7u8; 256])
        );
        let header = Header {
            alg: Algorithm::RS256,
            kid: None,
        };
        let validation = Validation::new(Algorithm::RS256);
        let try_all = |keys: &[&Key]| {
            for key in keys {
                let _ = jsonwebtoken::decode::<Map<String, Value>>(&token, &key.key, &validation);
            }
        };
        const TOKENS: u32 = 200;
        for (what, tried) in [
            ("capped", candidates(&keys, &header)),
            ("every key", keys.iter().collect()),
        ] {
            let start = Instant::now();
            for _ in 0..TOKENS {
                try_all(&tried);
            }
            let each = start.elapsed() / TOKENS;
            println!(
                "a kid-less made-up token, {what}: {} keys tried, {} µs per token",
                tried.len(),
                each.as_micros()
            );
        }
    }

    #[test]
    fn a_jwks_over_the_bound_is_refused_whole() {
        let (keys, _) = parse_jwks(&jwks(MAX_JWKS_KEYS, true)).unwrap();
        assert_eq!(keys.len(), MAX_JWKS_KEYS);
        let err = parse_jwks(&jwks(MAX_JWKS_KEYS + 1, true)).err().unwrap();
        assert_eq!(err.result, "too_many_keys");
        assert!(
            err.error.contains("65 keys") && err.error.contains("64"),
            "{err:?}"
        );
    }

    #[test]
    fn a_token_is_tried_against_a_few_keys_at_most() {
        let header = |kid: Option<&str>| Header {
            alg: Algorithm::RS256,
            kid: kid.map(str::to_string),
        };
        let (without_kids, _) = parse_jwks(&jwks(MAX_JWKS_KEYS, false)).unwrap();
        assert_eq!(candidates(&without_kids, &header(None)).len(), MAX_TRIES);
        let (with_kids, _) = parse_jwks(&jwks(MAX_JWKS_KEYS, true)).unwrap();
        assert_eq!(candidates(&with_kids, &header(None)).len(), MAX_TRIES);
        let named = candidates(&with_kids, &header(Some("k40")));
        assert_eq!(named.len(), 1);
        assert_eq!(named[0].kid.as_deref(), Some("k40"));
        assert!(candidates(&with_kids, &header(Some("nope"))).is_empty());
        let es = Header {
            alg: Algorithm::ES256,
            kid: None,
        };
        assert!(
            candidates(&with_kids, &es).is_empty(),
            "the algorithm must fit"
        );
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
        let (keys, skipped) = parse_jwks(doc.as_object().unwrap()).unwrap();
        assert_eq!(keys.len(), 1);
        assert_eq!(keys[0].kid.as_deref(), Some("rsa"));
        assert_eq!(keys[0].alg, Some(Algorithm::RS256));
        assert_eq!(skipped, 3);
    }
}
