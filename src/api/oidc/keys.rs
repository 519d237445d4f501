//! The signing keys of one trusted issuer: discovery (`/.well-known/openid-configuration`)
//! and its JWKS fetched over HTTPS, cached, fetched again on a schedule ([`REFRESH_EVERY`])
//! and when a token names a key id the cache does not hold (at most once per
//! [`MIN_REFETCH`], so a flood of made-up key ids cannot turn into a flood of fetches: such a
//! token waits for the next allowed fetch, shared by every request waiting, then is refused).
//!
//! An issuer that is down changes nothing for keys already cached; a token signed with a key
//! that cannot be fetched is refused (401) with the reason, never a 500.
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

use super::token::{Header, Refusal};

/// How often the keys are fetched again even when nothing asks for it.
pub const REFRESH_EVERY: Duration = Duration::from_secs(600);
/// Shortest time between two fetches caused by unknown key ids.
pub const MIN_REFETCH: Duration = Duration::from_secs(5);
/// Largest discovery document or JWKS accepted, in bytes.
const MAX_DOCUMENT_BYTES: usize = 1024 * 1024;

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
    /// Why the last fetch failed, if it did.
    error: Option<String>,
}

/// The keys of one issuer.
pub struct IssuerKeys {
    issuer: String,
    http: reqwest::Client,
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
    /// The keys of `issuer` (no trailing slash), fetched with `http`; nothing is fetched yet.
    pub fn new(issuer: String, http: reqwest::Client) -> Self {
        Self {
            issuer,
            http,
            cached: RwLock::new(Cached::default()),
            fetching: tokio::sync::Mutex::new(()),
        }
    }

    /// The issuer these keys belong to.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    async fn get_json(&self, url: &str) -> Result<Map<String, Value>, String> {
        if !url.starts_with("https://") {
            return Err(format!("{url} is not an https:// URL"));
        }
        let resp = self
            .http
            .get(url)
            .send()
            .await
            .map_err(|e| format!("GET {url}: {e}"))?;
        if !resp.status().is_success() {
            return Err(format!("GET {url}: {}", resp.status()));
        }
        if resp
            .content_length()
            .is_some_and(|n| n as usize > MAX_DOCUMENT_BYTES)
        {
            return Err(format!("GET {url}: larger than {MAX_DOCUMENT_BYTES} bytes"));
        }
        let body = resp.bytes().await.map_err(|e| format!("GET {url}: {e}"))?;
        if body.len() > MAX_DOCUMENT_BYTES {
            return Err(format!("GET {url}: larger than {MAX_DOCUMENT_BYTES} bytes"));
        }
        serde_json::from_slice(&body).map_err(|e| format!("GET {url}: not a JSON object: {e}"))
    }

    /// Discovery, then the JWKS it names.
    async fn download(&self) -> Result<Vec<Key>, String> {
        let url = format!("{}/.well-known/openid-configuration", self.issuer);
        let doc = self.get_json(&url).await?;
        let discovery: Discovery =
            serde_json::from_value(Value::Object(doc)).map_err(|e| format!("{url}: {e}"))?;
        // OpenID Connect Discovery 1.0 §4.3: the document must name the issuer it was
        // fetched for, or its keys are not that issuer's.
        if discovery.issuer.trim_end_matches('/') != self.issuer {
            return Err(format!(
                "{url} names issuer {:?}, not {:?}",
                discovery.issuer, self.issuer
            ));
        }
        let jwks = self.get_json(&discovery.jwks_uri).await?;
        let (keys, skipped) = parse_jwks(&jwks);
        if keys.is_empty() {
            return Err(format!("{}: no usable signing key", discovery.jwks_uri));
        }
        info!(issuer = %self.issuer, keys = keys.len(), skipped, "issuer keys fetched");
        Ok(keys)
    }

    /// Fetches the keys now; on failure the cached keys stay.
    pub async fn refresh(&self) {
        let _guard = self.fetching.lock().await;
        self.refresh_locked().await;
    }

    async fn refresh_locked(&self) {
        let result = self.download().await;
        let mut cached = self.cached.write().expect("issuer keys lock");
        cached.attempted = Some(Instant::now());
        match result {
            Ok(keys) => {
                cached.keys = keys;
                cached.error = None;
            }
            Err(error) => {
                warn!(issuer = %self.issuer, %error, kept = cached.keys.len(), "issuer keys not fetched; keeping the cached ones");
                cached.error = Some(error);
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
                self.refresh_locked().await;
            }
        }
        self.verify_cached(token, header).unwrap_or_else(|| {
            let cached = self.cached.read().expect("issuer keys lock");
            let kid = header.kid.as_deref().unwrap_or("(none)");
            Err(Refusal(match &cached.error {
                Some(error) => format!(
                    "token: kid: key {kid:?} of issuer {:?} is not known and the issuer's keys \
                     could not be fetched ({error})",
                    self.issuer
                ),
                None => format!(
                    "token: kid: key {kid:?} is not among the signing keys issuer {:?} \
                     publishes",
                    self.issuer
                ),
            }))
        })
    }

    /// `None` when no cached key fits the token's key id and algorithm.
    fn verify_cached(
        &self,
        token: &str,
        header: &Header,
    ) -> Option<Result<Map<String, Value>, Refusal>> {
        let cached = self.cached.read().expect("issuer keys lock");
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
