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
//! - `bundle`: the certificates themselves, pure: [`sans`], [`assess`], [`issue`];
//! - `store`: the Secret that holds them: [`secret`], [`from_secret`], [`lacks_owner`] (pure),
//!   and [`ensure`], [`renew`], [`obtain`] on a [`CertSecret`] (I/O);
//! - `error`: how obtaining them fails.

mod bundle;
mod error;
mod store;

pub use bundle::{
    Assessment, Bundle, CA_CRT, CA_KEY, CA_VALIDITY, Renewal, SERVING_VALIDITY, TLS_CRT, TLS_KEY,
    assess, issue, sans,
};
pub use error::Error;
pub use store::{
    CertSecret, SECRET_NAME, ensure, from_kept_secret, from_secret, lacks_owner, obtain, renew,
    secret,
};
