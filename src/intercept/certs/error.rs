//! How obtaining the webhook's certificate fails.

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
