//! The webhook's CA and serving certificate as data: which names it serves, whether a bundle
//! is to be kept or renewed, and issuing a new one (rcgen; x509-parser to read one back).

use std::time::Duration;

use jiff::Timestamp;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PublicKeyData as _,
};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;

use super::Error;

/// How long a new CA is valid.
pub const CA_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);
/// How long a new serving certificate is valid.
pub const SERVING_VALIDITY: Duration = Duration::from_secs(90 * 24 * 3600);
/// New certificates start this long before they are made, for clocks that lag.
const BACKDATE: Duration = Duration::from_secs(3600);

/// Secret key of the serving certificate (PEM).
pub const TLS_CRT: &str = "tls.crt";
/// Secret key of the serving certificate's private key (PEM, PKCS#8).
pub const TLS_KEY: &str = "tls.key";
/// Secret key of the CA bundle: the current CA first, then the previous one while it is valid.
pub const CA_CRT: &str = "ca.crt";
/// Secret key of the current CA's private key (PEM, PKCS#8).
pub const CA_KEY: &str = "ca.key";

/// Common name of the CA.
const CA_NAME: &str = "disruption-guard webhook CA";

/// A CA and a serving certificate, all PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct Bundle {
    /// The CA bundle clients trust: the current CA first, then the previous one while it is
    /// still valid.
    pub ca_bundle: String,
    /// The current CA's private key.
    pub ca_key: String,
    /// The serving certificate.
    pub cert: String,
    /// The serving certificate's private key.
    pub key: String,
}

impl std::fmt::Debug for Bundle {
    // Never the keys.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bundle")
            .field("ca_bundle", &self.ca_bundle)
            .field("cert", &self.cert)
            .finish_non_exhaustive()
    }
}

impl Bundle {
    /// The current CA, PEM: the first certificate of the bundle.
    pub fn current_ca(&self) -> Option<&str> {
        pem_blocks(&self.ca_bundle).next()
    }
}

/// What a stored bundle needs at a given time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assessment {
    /// Good for long enough: serve it.
    Keep,
    /// The CA is fine, the serving certificate is not (the reason says why).
    RenewServing(&'static str),
    /// The CA itself is missing, broken or ending (the reason says why): renew both.
    RenewAll(&'static str),
}

/// What a forced or needed renewal replaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    /// A new serving certificate from the current CA; the CA bundle stays.
    Serving,
    /// A new CA (the previous one stays in the bundle while valid) and a new serving
    /// certificate.
    All,
}

/// The names the serving certificate is valid for: the Service's DNS names (what the API
/// server dials in a cluster) and the loopback names (an operator run outside the cluster).
pub fn sans(service: &str, namespace: &str) -> Vec<String> {
    vec![
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
        "localhost".to_string(),
        "127.0.0.1".to_string(),
    ]
}

/// Whether `bundle` is good at `now` for a server named `sans`: the CA and the serving
/// certificate each valid with at least a third of their validity left, the serving certificate
/// signed by the current CA, valid for every name, and each key matching its certificate.
pub fn assess(bundle: &Bundle, sans: &[String], now: Timestamp) -> Assessment {
    let Some(ca_der) = first_der(&bundle.ca_bundle) else {
        return Assessment::RenewAll("the CA bundle holds no certificate");
    };
    let Ok((_, ca)) = x509_parser::parse_x509_certificate(&ca_der) else {
        return Assessment::RenewAll("the CA does not parse");
    };
    if !ca.is_ca() {
        return Assessment::RenewAll("the CA is not a CA");
    }
    if !fresh(&ca, now) {
        return Assessment::RenewAll(
            "the CA is expired or has less than a third of its validity left",
        );
    }
    match KeyPair::from_pem(&bundle.ca_key) {
        Ok(key) if key.subject_public_key_info() == ca.public_key().raw => {}
        _ => return Assessment::RenewAll("the CA key is missing or does not match the CA"),
    }

    let Some(cert_der) = first_der(&bundle.cert) else {
        return Assessment::RenewServing("no serving certificate");
    };
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(&cert_der) else {
        return Assessment::RenewServing("the serving certificate does not parse");
    };
    if cert.issuer().as_raw() != ca.subject().as_raw()
        || cert.verify_signature(Some(ca.public_key())).is_err()
    {
        return Assessment::RenewServing("the serving certificate is not signed by the current CA");
    }
    if !fresh(&cert, now) {
        return Assessment::RenewServing(
            "the serving certificate is expired or has less than a third of its validity left",
        );
    }
    let names = san_names(&cert);
    if !sans.iter().all(|wanted| names.contains(wanted)) {
        return Assessment::RenewServing("the serving certificate lacks a wanted name");
    }
    let Ok(key) = PrivateKeyDer::from_pem_slice(bundle.key.as_bytes()) else {
        return Assessment::RenewServing("the serving key does not parse");
    };
    let provider = rustls::crypto::ring::default_provider();
    if rustls::sign::CertifiedKey::from_der(vec![cert_der.clone()], key, &provider).is_err() {
        return Assessment::RenewServing("the serving key does not match the serving certificate");
    }
    Assessment::Keep
}

/// Issues what `renewal` replaces: a new serving certificate from `previous`'s CA, or a new CA
/// (keeping `previous`'s CA in the bundle while it is valid at `now`) and a serving certificate.
/// Without a usable `previous`, always both.
pub fn issue(
    previous: Option<&Bundle>,
    renewal: Renewal,
    sans: &[String],
    now: Timestamp,
) -> Result<Bundle, Error> {
    let reuse_ca = match (renewal, previous) {
        (Renewal::Serving, Some(previous)) => match (
            previous.current_ca(),
            KeyPair::from_pem(&previous.ca_key).ok(),
        ) {
            (Some(ca_pem), Some(ca_key)) => Some((previous, ca_pem, ca_key)),
            _ => None,
        },
        _ => None,
    };
    let (ca_bundle, issuer, ca_key_pem) = match reuse_ca {
        Some((previous, ca_pem, ca_key)) => {
            let issuer = Issuer::from_ca_cert_pem(ca_pem, ca_key).map_err(Error::Generate)?;
            (previous.ca_bundle.clone(), issuer, previous.ca_key.clone())
        }
        None => {
            let (ca_pem, issuer, ca_key_pem) = new_ca(now)?;
            let still_valid = previous
                .and_then(Bundle::current_ca)
                .filter(|pem| valid_at(pem, now));
            let ca_bundle = match still_valid {
                Some(old) => format!("{ca_pem}{old}"),
                None => ca_pem,
            };
            (ca_bundle, issuer, ca_key_pem)
        }
    };

    let mut params = CertificateParams::new(sans.to_vec()).map_err(Error::Generate)?;
    if let Some(first) = sans.first() {
        params.distinguished_name.push(DnType::CommonName, first);
    }
    params.use_authority_key_identifier_extension = true;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    (params.not_before, params.not_after) = validity(now, SERVING_VALIDITY)?;
    let key = KeyPair::generate().map_err(Error::Generate)?;
    let cert = params.signed_by(&key, &issuer).map_err(Error::Generate)?;
    Ok(Bundle {
        ca_bundle,
        ca_key: ca_key_pem,
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// A new self-signed CA: its PEM, the issuer that signs with it, and its key's PEM.
fn new_ca(now: Timestamp) -> Result<(String, Issuer<'static, KeyPair>, String), Error> {
    let mut params = CertificateParams::new(Vec::new()).map_err(Error::Generate)?;
    params.distinguished_name.push(DnType::CommonName, CA_NAME);
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::CrlSign,
    ];
    (params.not_before, params.not_after) = validity(now, CA_VALIDITY)?;
    let key = KeyPair::generate().map_err(Error::Generate)?;
    let cert = params.self_signed(&key).map_err(Error::Generate)?;
    let key_pem = key.serialize_pem();
    Ok((cert.pem(), Issuer::new(params, key), key_pem))
}

/// Not before (backdated an hour) and not after, for a certificate made at `now`.
fn validity(
    now: Timestamp,
    valid_for: Duration,
) -> Result<(time::OffsetDateTime, time::OffsetDateTime), Error> {
    let at = |secs: i64| {
        time::OffsetDateTime::from_unix_timestamp(secs)
            .map_err(|_| Error::Generate(rcgen::Error::Time))
    };
    let start = now.as_second();
    Ok((
        at(start - BACKDATE.as_secs() as i64)?,
        at(start + valid_for.as_secs() as i64)?,
    ))
}

/// Valid at `now`, with at least a third of its validity left.
fn fresh(cert: &X509Certificate<'_>, now: Timestamp) -> bool {
    let not_before = cert.validity().not_before.timestamp();
    let not_after = cert.validity().not_after.timestamp();
    let now = now.as_second();
    let third = (not_after - not_before) / 3;
    not_before <= now && now < not_after - third
}

/// Whether the PEM certificate is valid at `now`.
fn valid_at(pem: &str, now: Timestamp) -> bool {
    first_der(pem).is_some_and(|der| {
        x509_parser::parse_x509_certificate(&der).is_ok_and(|(_, cert)| {
            let v = cert.validity();
            v.not_before.timestamp() <= now.as_second() && now.as_second() < v.not_after.timestamp()
        })
    })
}

/// The DNS names and IP addresses a certificate is valid for, as text.
fn san_names(cert: &X509Certificate<'_>) -> Vec<String> {
    let Ok(Some(ext)) = cert.subject_alternative_name() else {
        return Vec::new();
    };
    ext.value
        .general_names
        .iter()
        .filter_map(|name| match name {
            GeneralName::DNSName(dns) => Some(dns.to_string()),
            GeneralName::IPAddress(bytes) => match bytes.len() {
                4 => Some(std::net::Ipv4Addr::from(<[u8; 4]>::try_from(*bytes).ok()?).to_string()),
                16 => {
                    Some(std::net::Ipv6Addr::from(<[u8; 16]>::try_from(*bytes).ok()?).to_string())
                }
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// The first certificate of a PEM text, as DER.
fn first_der(pem: &str) -> Option<CertificateDer<'static>> {
    CertificateDer::pem_slice_iter(pem.as_bytes()).next()?.ok()
}

/// The PEM blocks of a text, each with its BEGIN and END lines and a final newline.
fn pem_blocks(text: &str) -> impl Iterator<Item = &str> {
    const END: &str = "-----END CERTIFICATE-----";
    let mut rest = text;
    std::iter::from_fn(move || {
        let start = rest.find("-----BEGIN CERTIFICATE-----")?;
        let end = start + rest[start..].find(END)? + END.len();
        let end = if rest[end..].starts_with('\n') {
            end + 1
        } else {
            end
        };
        let block = &rest[start..end];
        rest = &rest[end..];
        Some(block)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<String> {
        sans("disruption-guard", "guard")
    }

    fn now() -> Timestamp {
        "2026-03-01T00:00:00Z".parse().unwrap()
    }

    fn days(n: i64) -> jiff::SignedDuration {
        jiff::SignedDuration::from_hours(24 * n)
    }

    fn fresh_bundle() -> Bundle {
        issue(None, Renewal::All, &names(), now()).unwrap()
    }

    #[test]
    fn the_serving_names_are_the_service_dns_names_and_loopback() {
        assert_eq!(
            names(),
            [
                "disruption-guard.guard.svc",
                "disruption-guard.guard.svc.cluster.local",
                "localhost",
                "127.0.0.1",
            ]
        );
    }

    #[test]
    fn a_new_bundle_is_kept_and_valid_for_every_name() {
        let bundle = fresh_bundle();
        assert_eq!(assess(&bundle, &names(), now()), Assessment::Keep);
        let der = first_der(&bundle.cert).unwrap();
        let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
        assert_eq!(san_names(&cert), names());
        assert!(!cert.is_ca());
        assert_eq!(pem_blocks(&bundle.ca_bundle).count(), 1);
    }

    #[test]
    fn the_serving_certificate_is_renewed_once_a_third_of_its_validity_is_left() {
        let bundle = fresh_bundle();
        // 90 days: kept for the first 60 (less the hour it is backdated), renewed after.
        assert_eq!(
            assess(&bundle, &names(), now() + days(59)),
            Assessment::Keep
        );
        assert!(matches!(
            assess(&bundle, &names(), now() + days(60)),
            Assessment::RenewServing(_)
        ));
    }

    #[test]
    fn the_ca_is_renewed_once_a_third_of_its_validity_is_left() {
        let bundle = fresh_bundle();
        let serving = issue(Some(&bundle), Renewal::Serving, &names(), now() + days(240)).unwrap();
        assert_eq!(
            assess(&serving, &names(), now() + days(240)),
            Assessment::Keep
        );
        assert!(matches!(
            assess(&serving, &names(), now() + days(244)),
            Assessment::RenewAll(_)
        ));
    }

    #[test]
    fn a_certificate_not_yet_valid_is_renewed() {
        let bundle = fresh_bundle();
        assert!(matches!(
            assess(&bundle, &names(), now() - days(1)),
            Assessment::RenewAll(_)
        ));
    }

    #[test]
    fn a_new_name_renews_the_serving_certificate() {
        let bundle = fresh_bundle();
        let other = sans("renamed", "guard");
        assert!(matches!(
            assess(&bundle, &other, now()),
            Assessment::RenewServing(_)
        ));
    }

    #[test]
    fn renewing_the_serving_certificate_keeps_the_ca_bundle() {
        let bundle = fresh_bundle();
        let renewed = issue(Some(&bundle), Renewal::Serving, &names(), now()).unwrap();
        assert_eq!(renewed.ca_bundle, bundle.ca_bundle);
        assert_eq!(renewed.ca_key, bundle.ca_key);
        assert_ne!(renewed.cert, bundle.cert);
        assert_ne!(renewed.key, bundle.key);
        assert_eq!(assess(&renewed, &names(), now()), Assessment::Keep);
    }

    #[test]
    fn renewing_the_ca_keeps_the_previous_ca_in_the_bundle_while_it_is_valid() {
        let bundle = fresh_bundle();
        let renewed = issue(Some(&bundle), Renewal::All, &names(), now()).unwrap();
        let cas: Vec<&str> = pem_blocks(&renewed.ca_bundle).collect();
        assert_eq!(cas.len(), 2);
        assert_ne!(cas[0], bundle.current_ca().unwrap());
        assert_eq!(cas[1], bundle.current_ca().unwrap());
        assert_eq!(assess(&renewed, &names(), now()), Assessment::Keep);

        let later = issue(Some(&bundle), Renewal::All, &names(), now() + days(400)).unwrap();
        assert_eq!(
            pem_blocks(&later.ca_bundle).count(),
            1,
            "the old CA expired"
        );
    }

    #[test]
    fn a_serving_certificate_from_another_ca_is_renewed() {
        let bundle = fresh_bundle();
        let other = fresh_bundle();
        let mixed = Bundle {
            cert: other.cert,
            key: other.key,
            ..bundle
        };
        assert!(matches!(
            assess(&mixed, &names(), now()),
            Assessment::RenewServing(_)
        ));
    }

    #[test]
    fn a_key_that_does_not_match_is_renewed() {
        let bundle = fresh_bundle();
        let other = fresh_bundle();
        let wrong_key = Bundle {
            key: other.key.clone(),
            ..bundle.clone()
        };
        assert!(matches!(
            assess(&wrong_key, &names(), now()),
            Assessment::RenewServing(_)
        ));
        let wrong_ca_key = Bundle {
            ca_key: other.ca_key,
            ..bundle
        };
        assert!(matches!(
            assess(&wrong_ca_key, &names(), now()),
            Assessment::RenewAll(_)
        ));
    }

    #[test]
    fn garbage_renews_everything() {
        let garbage = Bundle {
            ca_bundle: "not a certificate".into(),
            ca_key: String::new(),
            cert: String::new(),
            key: String::new(),
        };
        assert!(matches!(
            assess(&garbage, &names(), now()),
            Assessment::RenewAll(_)
        ));
        let renewed = issue(Some(&garbage), Renewal::Serving, &names(), now()).unwrap();
        assert_eq!(assess(&renewed, &names(), now()), Assessment::Keep);
    }

    #[test]
    fn the_debug_output_leaves_the_keys_out() {
        let bundle = fresh_bundle();
        let text = format!("{bundle:?}");
        assert!(!text.contains("PRIVATE KEY"), "{text}");
    }
}
