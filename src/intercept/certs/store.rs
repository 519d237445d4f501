//! The Secret the webhook's certificates live in, shared by every replica: its shape (pure),
//! and obtaining, creating or renewing it through the API server, where replicas agree by
//! resourceVersion.

use jiff::Timestamp;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tracing::info;

use super::Error;
use super::bundle::{
    Assessment, Bundle, CA_CRT, CA_KEY, Renewal, TLS_CRT, TLS_KEY, assess, issue, sans,
};
use crate::resources::names::{MANAGED_BY_KEY, MANAGED_BY_VALUE};
use crate::runtime::write::{self, retry_conflicts};

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

async fn write(
    client: &Client,
    target: &CertSecret,
    force: Option<Renewal>,
) -> Result<Bundle, Error> {
    let (namespace, name, sans) = (&target.namespace, &target.name, &target.sans);
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    // A 409 (another replica created or renewed it since it was read) reads again, a few
    // times; then the Secret is contended.
    let kube_err = |source: kube::Error| {
        if write::is_conflict(&source) {
            Error::Contended(format!("{namespace}/{name}"))
        } else {
            Error::Kube {
                secret: format!("{namespace}/{name}"),
                source,
            }
        }
    };
    let contended = |e: &Error| matches!(e, Error::Contended(_));
    let (api, kube_err) = (&api, &kube_err);
    retry_conflicts(contended, |_| async move {
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
        api.replace(name, &PostParams::default(), &replacement)
            .await
            .map_err(kube_err)?;
        info!(secret = %format!("{namespace}/{name}"), ?renewal, reason, "webhook certificate renewed");
        Ok(bundle)
    })
    .await
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
    use crate::intercept::certs::sans;

    fn fresh_bundle() -> Bundle {
        let now: Timestamp = "2026-03-01T00:00:00Z".parse().unwrap();
        issue(None, Renewal::All, &sans("disruption-guard", "guard"), now).unwrap()
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
}
