//! How one issuer's documents are fetched: its own HTTPS client (the system's roots, plus its
//! private CA when `--oidc-ca-file` names one for it, and for it only), every URL and every
//! redirect kept on the issuer's own host or a host `--oidc-jwks-host` names for it (a
//! discovery document cannot send the operator to fetch "keys" elsewhere), and every body read
//! as it streams in, refused once it passes [`MAX_DOCUMENT_BYTES`] whether or not the server
//! sent a `Content-Length`.

use std::time::Duration;

use anyhow::Context as _;
use serde_json::{Map, Value};

use super::issuers::{IssuerConfig, Origin};

/// Largest discovery document or JWKS accepted, in bytes.
pub const MAX_DOCUMENT_BYTES: usize = 1024 * 1024;
/// Most redirects followed for one document.
pub const MAX_REDIRECTS: usize = 5;

/// Fetches the documents of one issuer.
#[derive(Clone)]
pub struct Fetcher {
    issuer: String,
    origins: Vec<Origin>,
    http: reqwest::Client,
}

/// The error and each of its sources, `: `-separated (reqwest's own text names only the step
/// that failed, its sources say why: a certificate, a refused redirect).
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        let next = e.to_string();
        if !text.contains(&next) {
            text = format!("{text}: {next}");
        }
        source = e.source();
    }
    text
}

/// Why `url` may not be fetched for an issuer allowed `origins` (`None`: it may).
pub fn refused_origin(origins: &[Origin], url: &reqwest::Url) -> Option<String> {
    match Origin::of(url) {
        None => Some(format!("{url} is not an https:// URL")),
        Some(origin) if origins.contains(&origin) => None,
        Some(origin) => Some(format!(
            "{url}: host {origin} is neither the issuer's ({}) nor one --oidc-jwks-host names \
             for it",
            origins[0]
        )),
    }
}

/// A body read as it arrives: [`Capped::push`] refuses the chunk that takes it past its limit,
/// so a reader stops there and the rest is never read.
pub struct Capped {
    body: Vec<u8>,
    limit: usize,
}

impl Capped {
    /// An empty body that may grow to `limit` bytes.
    pub fn new(limit: usize) -> Capped {
        Capped {
            body: Vec::new(),
            limit,
        }
    }

    /// Adds `chunk`, or refuses it when the body would pass the limit.
    pub fn push(&mut self, chunk: &[u8]) -> Result<(), String> {
        if self.body.len() + chunk.len() > self.limit {
            return Err(format!("larger than {} bytes", self.limit));
        }
        self.body.extend_from_slice(chunk);
        Ok(())
    }

    /// The body read.
    pub fn into_body(self) -> Vec<u8> {
        self.body
    }
}

impl Fetcher {
    /// The fetcher of `config`'s issuer: reads its CA file, if any, now.
    pub fn new(config: &IssuerConfig) -> anyhow::Result<Fetcher> {
        // The rustls provider must be chosen once per process before an HTTPS client exists.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let origins = config.origins.clone();
        let policy = {
            let origins = origins.clone();
            reqwest::redirect::Policy::custom(move |attempt| {
                if attempt.previous().len() > MAX_REDIRECTS {
                    let error = format!("more than {MAX_REDIRECTS} redirects");
                    return attempt.error(error);
                }
                match refused_origin(&origins, attempt.url()) {
                    None => attempt.follow(),
                    Some(why) => attempt.error(format!("redirect refused: {why}")),
                }
            })
        };
        let mut builder = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .connect_timeout(Duration::from_secs(5))
            .https_only(true)
            .redirect(policy)
            .user_agent(concat!("disruption-guard/", env!("CARGO_PKG_VERSION")));
        if let Some(path) = &config.ca_file {
            let pem = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .with_context(|| format!("{}: not a PEM certificate bundle", path.display()))?;
            anyhow::ensure!(!certs.is_empty(), "{}: no certificate", path.display());
            builder = builder.tls_certs_merge(certs);
        }
        let http = builder
            .build()
            .with_context(|| format!("building the HTTPS client of issuer {}", config.url))?;
        Ok(Fetcher {
            issuer: config.url.clone(),
            origins,
            http,
        })
    }

    /// The issuer whose documents these are.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// GETs `url` (on one of the issuer's origins) and parses the body, at most
    /// [`MAX_DOCUMENT_BYTES`], as a JSON object.
    pub async fn get_json(&self, url: &str) -> Result<Map<String, Value>, String> {
        let parsed = reqwest::Url::parse(url).map_err(|e| format!("{url}: {e}"))?;
        if let Some(why) = refused_origin(&self.origins, &parsed) {
            return Err(why);
        }
        let mut resp = self
            .http
            .get(parsed)
            .send()
            .await
            .map_err(|e| format!("GET {url}: {}", chain(&e)))?;
        if !resp.status().is_success() {
            return Err(format!("GET {url}: {}", resp.status()));
        }
        if resp
            .content_length()
            .is_some_and(|n| n > MAX_DOCUMENT_BYTES as u64)
        {
            return Err(format!("GET {url}: larger than {MAX_DOCUMENT_BYTES} bytes"));
        }
        let mut body = Capped::new(MAX_DOCUMENT_BYTES);
        while let Some(chunk) = resp
            .chunk()
            .await
            .map_err(|e| format!("GET {url}: {}", chain(&e)))?
        {
            body.push(&chunk).map_err(|e| format!("GET {url}: {e}"))?;
        }
        serde_json::from_slice(&body.into_body())
            .map_err(|e| format!("GET {url}: not a JSON object: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origins(list: &[&str]) -> Vec<Origin> {
        list.iter().map(|o| Origin::parse(o).unwrap()).collect()
    }

    fn url(text: &str) -> reqwest::Url {
        reqwest::Url::parse(text).unwrap()
    }

    #[test]
    fn only_the_issuers_own_origin_and_the_named_hosts_may_be_fetched() {
        let allowed = origins(&["gitlab.example.com", "keys.example.com:8443"]);
        assert_eq!(
            refused_origin(
                &allowed,
                &url("https://gitlab.example.com/oauth/discovery/keys")
            ),
            None
        );
        assert_eq!(
            refused_origin(&allowed, &url("https://GitLab.Example.com:443/x")),
            None
        );
        assert_eq!(
            refused_origin(&allowed, &url("https://keys.example.com:8443/k")),
            None
        );
        for other in [
            "https://evil.example/keys",
            "https://gitlab.example.com:8443/keys",
            "https://keys.example.com/k",
            "https://gitlab.example.com.evil.example/keys",
        ] {
            let why = refused_origin(&allowed, &url(other)).expect(other);
            assert!(why.contains("--oidc-jwks-host"), "{why}");
        }
        let why = refused_origin(&allowed, &url("http://gitlab.example.com/keys")).unwrap();
        assert!(why.contains("not an https:// URL"), "{why}");
    }

    #[test]
    fn a_body_is_refused_by_the_chunk_that_passes_the_limit() {
        let mut body = Capped::new(MAX_DOCUMENT_BYTES);
        let chunk = vec![b' '; 64 * 1024];
        for _ in 0..16 {
            body.push(&chunk).unwrap();
        }
        assert_eq!(
            body.push(b" ").unwrap_err(),
            format!("larger than {MAX_DOCUMENT_BYTES} bytes")
        );
        assert_eq!(
            body.into_body().len(),
            MAX_DOCUMENT_BYTES,
            "exactly the limit is kept"
        );
    }

    #[test]
    fn an_error_names_its_sources() {
        let inner = std::io::Error::other("invalid peer certificate: UnknownIssuer");
        assert_eq!(
            chain(&Wrapped(inner)),
            "client error: invalid peer certificate: UnknownIssuer"
        );
    }

    #[derive(Debug)]
    struct Wrapped(std::io::Error);
    impl std::fmt::Display for Wrapped {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("client error")
        }
    }
    impl std::error::Error for Wrapped {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }
}
