//! A JWKS document as data: the signing keys it holds, refused whole past [`MAX_JWKS_KEYS`],
//! and the keys a token is tried against, at most [`MAX_TRIES`]. Pure, so unit-tested; the
//! fetching and the cache are [`super::keys`]'s.

use jsonwebtoken::Algorithm;
use jsonwebtoken::DecodingKey;
use jsonwebtoken::jwk::{Jwk, PublicKeyUse};
use serde_json::{Map, Value};

use super::token::Header;

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
pub struct Key {
    /// Its key id, when the JWKS names one.
    pub kid: Option<String>,
    /// The algorithm it is for, when the JWKS says.
    pub alg: Option<Algorithm>,
    /// The key itself.
    pub key: DecodingKey,
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
pub fn parse_jwks(doc: &Map<String, Value>) -> Result<(Vec<Key>, usize), FetchFailed> {
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
pub fn candidates<'a>(keys: &'a [Key], header: &Header) -> Vec<&'a Key> {
    keys.iter()
        .filter(|k| header.kid.is_none() || k.kid == header.kid)
        .filter(|k| k.alg.is_none_or(|a| a == header.alg))
        .take(MAX_TRIES)
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use jsonwebtoken::Validation;
    use serde_json::json;
    use std::time::Instant;

    pub(crate) const RSA_N: &str = "sXchDaQebHnPiGvyDOAT4saGEUetSyo9MKLOoWFsueri23bOdgWp4Dy1WlUzewbgBHod5pcM9H95GQRV3JDXboIRROSBigeC5yjU1hGzHHyXss8UDprecbAYxknTcQkhslANGRUZmdTOQ5qTRsLAt6BTYuyvVRdhS8exSZEy_c4gs_7svlJJQ4H9_NxsiIoLwAEk7-Q3UXERGYw_75IDrGA84-lA_-Ct4eTlXHBIY2EaV7t7LjJaynVJCpkv4LKjTTAumiGUIuQhrNhZLuF_RJLqHpM2kgWFLU7-VTdL1VbC2tejvcI2BlMkEpk1BzBZI0KQB0GaDWFLN-aEAw3vRw";

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
