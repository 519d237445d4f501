//! The eviction webhook's serving certificate, which the operator manages itself: a self-signed
//! CA and a serving certificate signed by it, kept in one Secret that every replica shares.
//!
//! - Validity: the CA 1 year ([`CA_VALIDITY`]), the serving certificate 90 days
//!   ([`SERVING_VALIDITY`]). Each is renewed once less than a third of its own validity remains
//!   (the CA after about 8 months, the serving certificate after 60 days), so a replica that
//!   misses a check by days still serves a valid certificate.
//! - Renewing the serving certificate keeps the CA: the webhook's `caBundle` does not change.
//!   Renewing the CA keeps the previous CA in `ca.crt` (behind the new one) while it is still
//!   valid, so clients that still hold the old bundle keep trusting what they had.
//! - The Secret (`kubernetes.io/tls`): `tls.crt`, `tls.key` (the serving pair), `ca.crt` (the
//!   bundle the webhook registration publishes), `ca.key` (the current CA's key, to sign the
//!   next serving certificate).
//! - Replicas agree through the API server: the Secret is created (a 409 means another replica
//!   was first: read theirs) or replaced with its `resourceVersion` (a 409: read again).
//!
//! - The Secret goes when the webhook registration goes: it carries an owner reference to it
//!   ([`CertSecret::owned_by`]), so `helm uninstall`, which deletes the chart's registration,
//!   leaves no Secret behind (garbage collection; no delete right, no uninstall hook). A Secret
//!   written before it had one gets it at the next check.
//!
//! Pure: [`sans`], [`assess`], [`issue`], [`secret`], [`from_secret`], [`lacks_owner`]. I/O:
//! [`ensure`], [`renew`], on a [`CertSecret`].

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PublicKeyData as _,
};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tracing::info;
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;

use crate::resources::names::{MANAGED_BY_KEY, MANAGED_BY_VALUE};

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

/// The Secret that stores `bundle`.
pub fn secret(namespace: &str, name: &str, bundle: &Bundle) -> Secret {
    let data = [
        (TLS_CRT, &bundle.cert),
        (TLS_KEY, &bundle.key),
        (CA_CRT, &bundle.ca_bundle),
        (CA_KEY, &bundle.ca_key),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
    .collect();
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            labels: Some(
                [(MANAGED_BY_KEY.to_string(), MANAGED_BY_VALUE.to_string())]
                    .into_iter()
                    .collect(),
            ),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/tls".to_string()),
        data: Some(data),
        ..Secret::default()
    }
}

/// The bundle a Secret stores, when it has every key as text.
pub fn from_secret(secret: &Secret) -> Option<Bundle> {
    let data = secret.data.as_ref()?;
    let text = |key: &str| {
        data.get(key)
            .and_then(|b| String::from_utf8(b.0.clone()).ok())
    };
    Some(Bundle {
        ca_bundle: text(CA_CRT)?,
        ca_key: text(CA_KEY)?,
        cert: text(TLS_CRT)?,
        key: text(TLS_KEY)?,
    })
}

/// Whether `stored` should carry an owner reference to `owner` and does not.
pub fn lacks_owner(stored: &Secret, owner: Option<&OwnerReference>) -> bool {
    owner.is_some_and(|owner| {
        !stored
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.uid == owner.uid)
    })
}

/// Default name of the Secret.
pub const SECRET_NAME: &str = "disruption-guard-webhook-tls";

/// Where the bundle is kept and which names its serving certificate is for.
#[derive(Debug, Clone, PartialEq)]
pub struct CertSecret {
    /// Namespace of the Secret (the operator's).
    pub namespace: String,
    /// Name of the Secret.
    pub name: String,
    /// The names the serving certificate must be valid for ([`sans`]).
    pub sans: Vec<String>,
    /// Kept by someone else (cert-manager): read, never written, and renewed by its keeper.
    pub external: bool,
    /// The object whose deletion deletes the Secret (the webhook registration), if any.
    pub owner: Option<OwnerReference>,
}

impl CertSecret {
    /// The Secret `namespace/name` for a webhook behind the Service `namespace/service`.
    pub fn for_service(namespace: &str, name: &str, service: &str) -> Self {
        CertSecret {
            namespace: namespace.to_string(),
            name: name.to_string(),
            sans: sans(service, namespace),
            external: false,
            owner: None,
        }
    }

    /// The same Secret, deleted by garbage collection when `owner` is.
    pub fn owned_by(self, owner: Option<OwnerReference>) -> Self {
        CertSecret { owner, ..self }
    }

    /// The same Secret, kept by someone else (cert-manager): see [`obtain`].
    pub fn kept_elsewhere(self) -> Self {
        CertSecret {
            external: true,
            ..self
        }
    }
}

/// The bundle to serve: [`ensure`]d here, or, for a Secret kept elsewhere, as it is now
/// ([`from_kept_secret`]).
pub async fn obtain(client: &Client, secret: &CertSecret) -> Result<Bundle, Error> {
    if !secret.external {
        return ensure(client, secret).await;
    }
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &secret.namespace);
    let stored = secrets
        .get(&secret.name)
        .await
        .map_err(|source| Error::Kube {
            secret: secret.name.clone(),
            source,
        })?;
    from_kept_secret(&stored).ok_or_else(|| Error::Incomplete(secret.name.clone()))
}

/// The bundle of a Secret someone else keeps (cert-manager's `kubernetes.io/tls` Secret with
/// `ca.crt`): no CA key, which only the keeper needs.
pub fn from_kept_secret(secret: &Secret) -> Option<Bundle> {
    let data = secret.data.as_ref()?;
    let text = |key: &str| {
        data.get(key)
            .and_then(|b| String::from_utf8(b.0.clone()).ok())
            .filter(|t| !t.trim().is_empty())
    };
    Some(Bundle {
        ca_bundle: text(CA_CRT)?,
        ca_key: String::new(),
        cert: text(TLS_CRT)?,
        key: text(TLS_KEY)?,
    })
}

/// Returns the Secret's bundle when it is good now, otherwise renews it (creating the Secret if
/// missing). Replicas starting together agree: whoever writes second gets a 409 and reads the
/// winner's bundle.
pub async fn ensure(client: &Client, secret: &CertSecret) -> Result<Bundle, Error> {
    write(client, secret, None).await
}

/// Renews the Secret's bundle now, whatever its state (`renewal` says what is replaced), and
/// returns the new bundle. For rotation by hand and tests; [`ensure`] renews when needed.
pub async fn renew(
    client: &Client,
    secret: &CertSecret,
    renewal: Renewal,
) -> Result<Bundle, Error> {
    write(client, secret, Some(renewal)).await
}

/// Attempts at a read-then-write before giving up on a Secret other writers keep changing.
const ATTEMPTS: usize = 5;

async fn write(
    client: &Client,
    target: &CertSecret,
    force: Option<Renewal>,
) -> Result<Bundle, Error> {
    let (namespace, name, sans) = (&target.namespace, &target.name, &target.sans);
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let kube_err = |source| Error::Kube {
        secret: format!("{namespace}/{name}"),
        source,
    };
    for _ in 0..ATTEMPTS {
        let now = Timestamp::now();
        let stored = api.get_opt(name).await.map_err(kube_err)?;
        let Some(stored) = stored else {
            let bundle = issue(None, Renewal::All, sans, now)?;
            let mut created = secret(namespace, name, &bundle);
            created.metadata.owner_references = target.owner.clone().map(|o| vec![o]);
            match api.create(&PostParams::default(), &created).await {
                Ok(_) => {
                    info!(secret = %format!("{namespace}/{name}"), "webhook certificate created");
                    return Ok(bundle);
                }
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(e) => return Err(kube_err(e)),
            }
        };
        let current = from_secret(&stored);
        let adopt = lacks_owner(&stored, target.owner.as_ref());
        let (renewal, reason) = match (force, current.as_ref()) {
            (Some(renewal), _) => (Some(renewal), "renewal asked for"),
            (None, None) => (Some(Renewal::All), "the Secret lacks a key"),
            (None, Some(bundle)) => match assess(bundle, sans, now) {
                Assessment::Keep if !adopt => return Ok(bundle.clone()),
                Assessment::Keep => (None, "the Secret lacks its owner reference"),
                Assessment::RenewServing(reason) => (Some(Renewal::Serving), reason),
                Assessment::RenewAll(reason) => (Some(Renewal::All), reason),
            },
        };
        let bundle = match (renewal, current.as_ref()) {
            (None, Some(bundle)) => bundle.clone(),
            (renewal, current) => issue(current, renewal.unwrap_or(Renewal::All), sans, now)?,
        };
        let mut replacement = secret(namespace, name, &bundle);
        replacement.metadata.resource_version = stored.metadata.resource_version.clone();
        replacement.metadata.owner_references = stored.metadata.owner_references.clone();
        if let (true, Some(owner)) = (adopt, &target.owner) {
            replacement
                .metadata
                .owner_references
                .get_or_insert_with(Vec::new)
                .push(owner.clone());
        }
        replacement.metadata.labels = Some({
            let mut labels = stored.metadata.labels.clone().unwrap_or_default();
            labels.insert(MANAGED_BY_KEY.to_string(), MANAGED_BY_VALUE.to_string());
            labels
        });
        match api
            .replace(name, &PostParams::default(), &replacement)
            .await
        {
            Ok(_) => {
                info!(secret = %format!("{namespace}/{name}"), ?renewal, reason, "webhook certificate renewed");
                return Ok(bundle);
            }
            // Changed since read (another replica renewed it): look again.
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(kube_err(e)),
        }
    }
    Err(Error::Contended(format!("{namespace}/{name}")))
}

/// What can go wrong while managing the certificate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Generating a key or a certificate failed.
    #[error("generating the webhook certificate: {0}")]
    Generate(#[source] rcgen::Error),
    /// Reading or writing the Secret failed.
    #[error("reading or writing the Secret {secret}: {source}")]
    Kube {
        secret: String,
        #[source]
        source: kube::Error,
    },
    /// Other writers kept changing the Secret between each read and write.
    #[error("the Secret {0} kept changing while the webhook certificate was renewed")]
    Contended(String),
    /// A Secret kept elsewhere lacks `tls.crt`, `tls.key` or `ca.crt` (not issued yet?).
    #[error("the Secret {0} has no tls.crt, tls.key and ca.crt (not issued yet?)")]
    Incomplete(String),
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
mod kept_tests {
    use super::*;

    fn secret(keys: &[(&str, &str)]) -> Secret {
        Secret {
            data: Some(
                keys.iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                    .collect(),
            ),
            ..Secret::default()
        }
    }

    #[test]
    fn a_secret_kept_by_cert_manager_is_read_without_a_ca_key() {
        let kept = secret(&[(TLS_CRT, "cert"), (TLS_KEY, "key"), (CA_CRT, "ca")]);
        let bundle = from_kept_secret(&kept).unwrap();
        assert_eq!(
            (
                bundle.cert.as_str(),
                bundle.key.as_str(),
                bundle.ca_bundle.as_str()
            ),
            ("cert", "key", "ca")
        );
        assert!(bundle.ca_key.is_empty());
        // Not issued yet: cert-manager creates the keys empty, or not at all.
        assert!(from_kept_secret(&secret(&[(TLS_CRT, "cert"), (TLS_KEY, "key")])).is_none());
        assert!(
            from_kept_secret(&secret(&[(TLS_CRT, ""), (TLS_KEY, "k"), (CA_CRT, "c")])).is_none()
        );
    }
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
    fn a_secret_without_its_owner_reference_is_adopted_once() {
        let owner = OwnerReference {
            api_version: "admissionregistration.k8s.io/v1".into(),
            kind: "ValidatingWebhookConfiguration".into(),
            name: "guard".into(),
            uid: "u1".into(),
            ..OwnerReference::default()
        };
        let mut stored = secret("ns", "s", &fresh_bundle());
        assert!(!lacks_owner(&stored, None), "no owner wanted");
        assert!(lacks_owner(&stored, Some(&owner)));
        stored.metadata.owner_references = Some(vec![owner.clone()]);
        assert!(!lacks_owner(&stored, Some(&owner)));
    }

    #[test]
    fn the_secret_round_trips_the_bundle() {
        let bundle = fresh_bundle();
        let stored = secret("guard", "webhook-tls", &bundle);
        assert_eq!(stored.type_.as_deref(), Some("kubernetes.io/tls"));
        let keys: Vec<&str> = stored
            .data
            .as_ref()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys, [CA_CRT, CA_KEY, TLS_CRT, TLS_KEY]);
        assert_eq!(from_secret(&stored), Some(bundle));
        assert_eq!(from_secret(&Secret::default()), None);
    }

    #[test]
    fn the_debug_output_leaves_the_keys_out() {
        let bundle = fresh_bundle();
        let text = format!("{bundle:?}");
        assert!(!text.contains("PRIVATE KEY"), "{text}");
    }
}
