//! A CI id-token as data: its header read before any key is looked up (the algorithm
//! allow-list, the key id), its issuer peeked before it is verified (to route it: an issuer the
//! operator does not trust falls through to TokenReview), and the checks of its registered
//! claims (`iss`, `aud`, `exp`, `nbf`, `iat`) with an injected `now`, so each refusal is named
//! and unit-tested. The signature itself is checked by `jsonwebtoken` in [`super::keys`].

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::Algorithm;
use serde::Deserialize;
use serde_json::{Map, Value};

/// Tolerated clock difference between the issuer and the operator, in seconds.
pub const LEEWAY_SECS: i64 = 60;
/// Longest accepted token, in bytes (GitHub's are about 1 KiB; a JWKS-sized limit is plenty).
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// Why a token was refused; the text is the problem's `detail`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refusal(pub String);

fn refuse(text: impl Into<String>) -> Refusal {
    Refusal(text.into())
}

/// The JOSE header fields that matter here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The signature algorithm, from the allow-list.
    pub alg: Algorithm,
    /// The key id, if the token names one.
    pub kid: Option<String>,
}

/// Asymmetric signature algorithms only: a verifier that accepted `none` would take unsigned
/// tokens, and one that accepted HMAC could be handed a token "signed" with the issuer's
/// *public* key as the shared secret (the classic key-confusion attack).
pub const ALLOWED: &[Algorithm] = &[
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// Whether `token` has the shape of a JWS (three base64url parts): only those are looked at
/// as id-tokens; anything else is left to the other kinds of credential.
pub fn looks_like_jwt(token: &str) -> bool {
    let mut parts = token.split('.');
    let ok = |p: Option<&str>| {
        p.is_some_and(|p| {
            p.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
    };
    let (h, c, s) = (parts.next(), parts.next(), parts.next());
    ok(h) && h != Some("") && ok(c) && c != Some("") && ok(s) && parts.next().is_none()
}

fn part(token: &str, index: usize, what: &str) -> Result<Map<String, Value>, Refusal> {
    let text = token
        .split('.')
        .nth(index)
        .ok_or_else(|| refuse(format!("token: not a JWT (no {what})")))?;
    let bytes = URL_SAFE_NO_PAD
        .decode(text)
        .map_err(|_| refuse(format!("token: its {what} is not base64url")))?;
    serde_json::from_slice(&bytes)
        .map_err(|_| refuse(format!("token: its {what} is not a JSON object")))
}

/// The token's `iss`, read without verifying anything: used only to pick the verifier.
pub fn peek_issuer(token: &str) -> Option<String> {
    if token.len() > MAX_TOKEN_BYTES || !looks_like_jwt(token) {
        return None;
    }
    part(token, 1, "payload")
        .ok()?
        .get("iss")
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// The header, with the algorithm checked against [`ALLOWED`].
pub fn header(token: &str) -> Result<Header, Refusal> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(refuse(format!(
            "token: longer than {MAX_TOKEN_BYTES} bytes"
        )));
    }
    let header = part(token, 0, "header")?;
    let alg = header
        .get("alg")
        .and_then(Value::as_str)
        .ok_or_else(|| refuse("token: alg: missing from the header"))?;
    if alg.eq_ignore_ascii_case("none") {
        return Err(refuse(
            "token: alg: \"none\" (an unsigned token) is never accepted",
        ));
    }
    if alg.to_ascii_uppercase().starts_with("HS") {
        return Err(refuse(format!(
            "token: alg: {alg:?} is a shared-secret algorithm; only asymmetric signatures \
             (RS*, PS*, ES256, ES384, EdDSA) are accepted"
        )));
    }
    let alg = Algorithm::deserialize(Value::String(alg.to_string()))
        .ok()
        .filter(|a| ALLOWED.contains(a))
        .ok_or_else(|| refuse(format!("token: alg: {alg:?} is not an accepted algorithm")))?;
    let kid = header
        .get("kid")
        .and_then(Value::as_str)
        .map(str::to_string);
    Ok(Header { alg, kid })
}

/// The registered claims of a verified token, and all of them for the trust checks.
#[derive(Debug, Clone, PartialEq)]
pub struct Claims {
    /// `iss`.
    pub iss: String,
    /// `sub`.
    pub sub: String,
    /// `aud`, a string or a list.
    pub aud: Vec<String>,
    /// `exp`, seconds since the epoch.
    pub exp: i64,
    /// `nbf`, if present.
    pub nbf: Option<i64>,
    /// `iat`, if present ([`check`] requires it).
    pub iat: Option<i64>,
    /// Every claim as sent.
    pub all: Map<String, Value>,
}

impl Claims {
    /// Reads the registered claims; a missing `iss`, `sub`, `aud` or `exp` is a refusal (a
    /// missing `iat` is [`check`]'s).
    pub fn from_json(all: Map<String, Value>) -> Result<Self, Refusal> {
        let string = |name: &str| {
            all.get(name)
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| refuse(format!("token: {name}: missing or not a string")))
        };
        let number = |name: &str| match all.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_i64()
                .or_else(|| v.as_f64().map(|f| f as i64))
                .map(Some)
                .ok_or_else(|| refuse(format!("token: {name}: not a number"))),
        };
        let aud = match all.get("aud") {
            Some(Value::String(a)) => vec![a.clone()],
            Some(Value::Array(list)) => list
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect(),
            _ => return Err(refuse("token: aud: missing")),
        };
        Ok(Claims {
            iss: string("iss")?,
            sub: string("sub")?,
            aud,
            exp: number("exp")?.ok_or_else(|| refuse("token: exp: missing"))?,
            nbf: number("nbf")?,
            iat: number("iat")?,
            all,
        })
    }

    /// A claim's value as a string (numbers and booleans in their JSON form), if it is a scalar.
    pub fn text(&self, name: &str) -> Option<String> {
        match self.all.get(name)? {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            Value::Bool(b) => Some(b.to_string()),
            _ => None,
        }
    }
}

/// What a token must say to be accepted here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected<'a> {
    /// The issuer whose key verified the token.
    pub issuer: &'a str,
    /// This API's audience (`--token-audience`).
    pub audience: &'a str,
    /// The longest `exp − iat` accepted (`--oidc-max-token-lifetime`), in seconds.
    pub max_lifetime_secs: i64,
}

/// Checks `iss`, `aud`, `exp`, `nbf` and `iat` at `now` (seconds since the epoch), allowing
/// [`LEEWAY_SECS`] of clock skew either way. `iat` is required, and the token's lifetime
/// (`exp − iat`, both the issuer's own clock) may not exceed `expected.max_lifetime_secs`: a
/// token minted to live for days is a long-lived credential, whoever minted it.
pub fn check(claims: &Claims, expected: &Expected, now: i64) -> Result<(), Refusal> {
    let Expected {
        issuer,
        audience,
        max_lifetime_secs,
    } = *expected;
    if claims.iss != issuer {
        return Err(refuse(format!(
            "token: iss: {:?} is not the issuer whose key signed it ({issuer:?})",
            claims.iss
        )));
    }
    if !claims.aud.iter().any(|a| a == audience) {
        return Err(refuse(format!(
            "token: aud: {:?} does not include this API's audience {audience:?} \
             (request the token for that audience)",
            claims.aud
        )));
    }
    let iat = claims
        .iat
        .ok_or_else(|| refuse("token: iat: missing (when the token was issued)"))?;
    let lifetime = claims.exp.saturating_sub(iat);
    if lifetime <= 0 {
        return Err(refuse(format!(
            "token: exp: {} is not after iat {iat}",
            claims.exp
        )));
    }
    if lifetime > max_lifetime_secs {
        return Err(refuse(format!(
            "token: exp: the token lives {lifetime}s from iat to exp, longer than the \
             {max_lifetime_secs}s this API accepts (--oidc-max-token-lifetime)"
        )));
    }
    if claims.exp + LEEWAY_SECS <= now {
        return Err(refuse(format!(
            "token: exp: expired {}s ago",
            now - claims.exp
        )));
    }
    if let Some(nbf) = claims.nbf
        && nbf - LEEWAY_SECS > now
    {
        return Err(refuse(format!(
            "token: nbf: not valid for another {}s (check the clocks)",
            nbf - now
        )));
    }
    if iat - LEEWAY_SECS > now {
        return Err(refuse(format!(
            "token: iat: issued {}s in the future (check the clocks)",
            iat - now
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const HOUR: i64 = 3600;

    /// `check` for this API's audience and a one-hour lifetime cap.
    fn at(c: &Claims, issuer: &str, now: i64) -> Result<(), Refusal> {
        let expected = Expected {
            issuer,
            audience: "disruption-guard",
            max_lifetime_secs: HOUR,
        };
        check(c, &expected, now)
    }

    fn jwt(header: Value, payload: Value) -> String {
        format!(
            "{}.{}.c2ln",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(payload.to_string())
        )
    }

    fn claims(extra: Value) -> Claims {
        let mut all = json!({
            "iss": "https://issuer.example", "sub": "repo:acme/shop:ref:refs/heads/main",
            "aud": "disruption-guard", "exp": 2000, "iat": 1000, "nbf": 1000,
        });
        for (k, v) in extra.as_object().unwrap() {
            all[k] = v.clone();
        }
        Claims::from_json(all.as_object().unwrap().clone()).unwrap()
    }

    #[test]
    fn only_three_base64url_parts_look_like_a_jwt() {
        assert!(looks_like_jwt("eyJh.eyJi.c2ln"));
        assert!(!looks_like_jwt("a-static-token-0123456789"));
        assert!(!looks_like_jwt("a.b"));
        assert!(!looks_like_jwt("a.b.c.d"));
        assert!(!looks_like_jwt("a..c"));
        assert!(!looks_like_jwt("a.b c.d"));
    }

    #[test]
    fn the_issuer_is_peeked_without_verifying() {
        let token = jwt(json!({"alg": "RS256"}), json!({"iss": "https://i.example"}));
        assert_eq!(peek_issuer(&token).as_deref(), Some("https://i.example"));
        assert_eq!(peek_issuer("not-a-jwt"), None);
    }

    #[test]
    fn alg_none_is_refused_by_name() {
        let token = jwt(json!({"alg": "none"}), json!({}));
        assert!(header(&token).unwrap_err().0.contains("\"none\""));
        let token = jwt(json!({"alg": "NONE"}), json!({}));
        assert!(header(&token).is_err());
    }

    #[test]
    fn hmac_is_refused_as_a_shared_secret_algorithm() {
        for alg in ["HS256", "HS384", "HS512"] {
            let token = jwt(json!({"alg": alg}), json!({}));
            assert!(
                header(&token).unwrap_err().0.contains("shared-secret"),
                "{alg}"
            );
        }
    }

    #[test]
    fn asymmetric_algorithms_are_accepted_with_their_key_id() {
        let token = jwt(json!({"alg": "RS256", "kid": "k1"}), json!({}));
        assert_eq!(
            header(&token).unwrap(),
            Header {
                alg: Algorithm::RS256,
                kid: Some("k1".into())
            }
        );
        let token = jwt(json!({"alg": "ES256"}), json!({}));
        assert_eq!(header(&token).unwrap().kid, None);
        let token = jwt(json!({"alg": "XX999"}), json!({}));
        assert!(header(&token).unwrap_err().0.contains("not an accepted"));
    }

    #[test]
    fn a_valid_token_passes_at_any_moment_of_its_life() {
        let c = claims(json!({}));
        for now in [1000, 1500, 1999] {
            at(&c, "https://issuer.example", now).unwrap();
        }
    }

    #[test]
    fn another_audience_is_refused_naming_the_expected_one() {
        let c = claims(json!({"aud": ["sts.amazonaws.com"]}));
        let err = at(&c, "https://issuer.example", 1500).unwrap_err();
        assert!(
            err.0.contains("aud") && err.0.contains("\"disruption-guard\""),
            "{err}"
        );
        let c = claims(json!({"aud": ["sts.amazonaws.com", "disruption-guard"]}));
        at(&c, "https://issuer.example", 1500).unwrap();
    }

    #[test]
    fn an_expired_token_is_refused_after_the_leeway() {
        let c = claims(json!({}));
        at(&c, "https://issuer.example", 2000 + LEEWAY_SECS - 1).unwrap();
        let err = at(&c, "https://issuer.example", 2000 + LEEWAY_SECS).unwrap_err();
        assert!(err.0.starts_with("token: exp: expired"), "{err}");
    }

    #[test]
    fn a_token_not_yet_valid_is_refused_beyond_the_leeway() {
        let c = claims(json!({"nbf": 1500, "iat": 1000}));
        at(&c, "https://issuer.example", 1500 - LEEWAY_SECS).unwrap();
        let err = at(&c, "https://issuer.example", 1400).unwrap_err();
        assert!(err.0.starts_with("token: nbf"), "{err}");
        let c = claims(json!({"nbf": null, "iat": 1500}));
        let err = at(&c, "https://issuer.example", 1400).unwrap_err();
        assert!(err.0.starts_with("token: iat"), "{err}");
    }

    #[test]
    fn a_token_of_another_issuer_is_refused() {
        let c = claims(json!({}));
        let err = at(&c, "https://other.example", 1500).unwrap_err();
        assert!(err.0.starts_with("token: iss"), "{err}");
    }

    #[test]
    fn registered_claims_are_required_and_scalars_read_as_text() {
        let all = json!({"iss": "i", "sub": "s", "aud": "a"});
        let err = Claims::from_json(all.as_object().unwrap().clone()).unwrap_err();
        assert_eq!(err.0, "token: exp: missing");
        let c = claims(json!({"run_id": 42, "ref_protected": true, "x": {"y": 1}}));
        assert_eq!(c.text("run_id").as_deref(), Some("42"));
        assert_eq!(c.text("ref_protected").as_deref(), Some("true"));
        assert_eq!(c.text("x"), None);
    }

    #[test]
    fn a_token_without_iat_is_refused() {
        let c = claims(json!({"iat": null}));
        let err = at(&c, "https://issuer.example", 1500).unwrap_err();
        assert!(err.0.starts_with("token: iat: missing"), "{err}");
    }

    #[test]
    fn a_token_living_longer_than_the_cap_is_refused_at_any_moment() {
        let c = claims(json!({"iat": 1000, "nbf": 1000, "exp": 1000 + HOUR}));
        at(&c, "https://issuer.example", 1500).unwrap();
        let c = claims(json!({"iat": 1000, "nbf": 1000, "exp": 1000 + HOUR + 1}));
        for now in [1000, 1500] {
            let err = at(&c, "https://issuer.example", now).unwrap_err();
            assert!(
                err.0.starts_with("token: exp: the token lives 3601s")
                    && err.0.contains("--oidc-max-token-lifetime"),
                "{err}"
            );
        }
        let c = claims(json!({"iat": 2000, "exp": 2000}));
        let err = at(&c, "https://issuer.example", 1990).unwrap_err();
        assert!(err.0.contains("is not after iat"), "{err}");
    }
}
