//! The tests' OIDC issuer (a second kube-apiserver, see `support::issuer`) is a real one:
//! anonymous discovery and JWKS over TLS, tokens with the claims a verifier checks, and a key
//! rotation that keeps tokens minted before it valid until the old key is dropped.

mod support;

use std::time::Duration;

use serde_json::Value;
use support::issuer::Issuer;

const TEN_MINUTES: Duration = Duration::from_secs(600);

fn kids(jwks: &Value) -> Vec<String> {
    jwks["keys"]
        .as_array()
        .expect("JWKS keys")
        .iter()
        .map(|k| k["kid"].as_str().expect("kid").to_string())
        .collect()
}

/// Whether the issuer itself accepts `token` (a TokenReview against it).
fn issuer_accepts(issuer: &Issuer, token: &str, audience: &str) -> bool {
    let review = serde_json::json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": token, "audiences": [audience]}
    });
    let mut create = issuer
        .kubectl()
        .args(["create", "-o", "json", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    create
        .stdin
        .take()
        .unwrap()
        .write_all(review.to_string().as_bytes())
        .unwrap();
    let out = create.wait_with_output().unwrap();
    assert!(out.status.success(), "creating a TokenReview on the issuer");
    let reviewed: Value = serde_json::from_slice(&out.stdout).unwrap();
    reviewed["status"]["authenticated"] == Value::Bool(true)
}

#[test]
fn the_issuer_serves_discovery_and_its_signing_key_to_anyone_over_tls() {
    let issuer = Issuer::shared();
    let discovery = issuer.get_anonymously("/.well-known/openid-configuration");
    assert_eq!(discovery["issuer"], issuer.url());
    assert_eq!(
        discovery["jwks_uri"],
        format!("{}/openid/v1/jwks", issuer.url())
    );
    assert_eq!(
        discovery["id_token_signing_alg_values_supported"],
        serde_json::json!(["RS256"])
    );
    let jwks = issuer.get_anonymously("/openid/v1/jwks");
    assert!(kids(&jwks).contains(&issuer.kid()), "{jwks}");
    assert!(issuer.ca_pem().starts_with("-----BEGIN CERTIFICATE-----"));
}

#[test]
fn a_minted_token_carries_the_claims_a_verifier_checks() {
    let issuer = Issuer::shared();
    let token = issuer.token("ci", "shop", "disruption-guard", Duration::from_secs(3600));
    let (header, claims) = Issuer::decode(&token);
    assert_eq!(header["alg"], "RS256");
    assert_eq!(header["kid"], issuer.kid());
    assert_eq!(claims["iss"], issuer.url());
    assert_eq!(claims["sub"], Issuer::subject("ci", "shop"));
    assert_eq!(claims["aud"], serde_json::json!(["disruption-guard"]));
    let iat = claims["iat"].as_i64().unwrap();
    assert_eq!(claims["nbf"].as_i64().unwrap(), iat);
    assert_eq!(claims["exp"].as_i64().unwrap() - iat, 3600);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!((iat - now).abs() < 60, "iat {iat} is not now ({now})");
}

#[test]
fn rotating_the_signing_key_keeps_earlier_tokens_valid_until_the_old_key_is_dropped() {
    let mut issuer = Issuer::start();
    let before = issuer.token("ci", "shop", "disruption-guard", TEN_MINUTES);
    let old_kid = issuer.kid();
    assert!(issuer_accepts(&issuer, &before, "disruption-guard"));

    issuer.rotate_signing_key();
    let new_kid = issuer.kid();
    assert_ne!(new_kid, old_kid);
    let published = kids(&issuer.get_anonymously("/openid/v1/jwks"));
    assert!(
        published.contains(&old_kid) && published.contains(&new_kid),
        "{published:?}"
    );
    let after = issuer.token("ci", "shop", "disruption-guard", TEN_MINUTES);
    assert_eq!(Issuer::decode(&after).0["kid"], new_kid);
    assert!(issuer_accepts(&issuer, &before, "disruption-guard"));
    assert!(issuer_accepts(&issuer, &after, "disruption-guard"));

    issuer.drop_old_keys();
    assert_eq!(
        kids(&issuer.get_anonymously("/openid/v1/jwks")),
        vec![new_kid]
    );
    assert!(!issuer_accepts(&issuer, &before, "disruption-guard"));
    assert!(issuer_accepts(&issuer, &after, "disruption-guard"));
}
