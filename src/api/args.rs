//! The HTTP API's flags (`disruption-guard operator --help`, section API): address,
//! authentication, CI id-tokens, window lifetimes and the limits of the server.

use clap::Args;

use super::{oidc, ratelimit, static_tokens};

/// `--token-audience` when none is given and no OIDC issuer is trusted: the same for every
/// install, which is harmless for ServiceAccount tokens (another cluster's are not valid here)
/// but not for CI id-tokens, so [`ApiArgs::audience`] refuses it with `--oidc-issuer`.
pub const DEFAULT_TOKEN_AUDIENCE: &str = "disruption-guard";

/// Flags of the HTTP API.
#[derive(Debug, Clone, Args)]
pub struct ApiArgs {
    /// Address of the HTTP API for CI.
    #[arg(long, env = "DISRUPTION_GUARD_API_ADDR", default_value = "0.0.0.0:8080")]
    pub api_addr: std::net::SocketAddr,

    /// Audience ServiceAccount tokens and CI id-tokens must carry to be accepted by the API.
    /// Give each install its own (e.g. `disruption-guard:<cluster>`): a token minted for one
    /// install's audience is then worthless at every other. Default: `disruption-guard:` and
    /// `--cluster-name`; with neither, `disruption-guard`, which is refused with `--oidc-issuer`.
    #[arg(long, env = "DISRUPTION_GUARD_TOKEN_AUDIENCE")]
    pub token_audience: Option<String>,

    /// This cluster's name, different for every cluster CI reaches (e.g. `ci-eu-1`): the
    /// token audience is then `disruption-guard:<name>` unless `--token-audience` names one.
    #[arg(long, env = "DISRUPTION_GUARD_CLUSTER_NAME")]
    pub cluster_name: Option<String>,

    /// Serve the API without authentication. For local runs only.
    #[arg(long, env = "DISRUPTION_GUARD_INSECURE_NO_AUTH")]
    pub insecure_no_auth: bool,

    /// Static bearer tokens for CI outside the cluster: a Secret `namespace/name` whose key
    /// `tokens.yaml` lists `{name, token, namespaces}` entries (re-read every 30s).
    #[arg(long, env = "DISRUPTION_GUARD_STATIC_TOKENS_SECRET", value_parser = static_tokens::parse_secret_ref, conflicts_with = "static_tokens_file")]
    pub static_tokens_secret: Option<static_tokens::Source>,

    /// Static bearer tokens from a file (same format as the Secret's `tokens.yaml`).
    #[arg(long, env = "DISRUPTION_GUARD_STATIC_TOKENS_FILE")]
    pub static_tokens_file: Option<std::path::PathBuf>,

    /// An OIDC issuer whose CI id-tokens the API verifies itself (repeatable; env
    /// comma-separated), e.g. `https://token.actions.githubusercontent.com`. What each token
    /// may do is declared per namespace in `CITrust` objects; tokens of other issuers go to
    /// TokenReview as before.
    #[arg(long = "oidc-issuer", env = "DISRUPTION_GUARD_OIDC_ISSUERS", value_delimiter = ',', value_parser = parse_issuer_flag)]
    pub oidc_issuers: Vec<String>,

    /// PEM bundle of CA certificates trusted, beside the system's, when fetching one issuer's
    /// discovery document and keys, and for that issuer only: `ISSUER=PATH` (repeatable; env
    /// comma-separated). A bare `PATH` is for the only `--oidc-issuer`; with several it is
    /// refused.
    #[arg(long = "oidc-ca-file", env = "DISRUPTION_GUARD_OIDC_CA_FILE", value_delimiter = ',', value_parser = oidc::issuers::parse_ca_file)]
    pub oidc_ca_files: Vec<oidc::issuers::CaFile>,

    /// A host other than the issuer's own that its `jwks_uri` and redirects may lead to:
    /// `ISSUER=HOST[:PORT]` (repeatable; env comma-separated), e.g.
    /// `https://accounts.google.com=www.googleapis.com`. Otherwise discovery, its `jwks_uri`
    /// and every redirect must stay on the issuer's own host and port.
    #[arg(long = "oidc-jwks-host", env = "DISRUPTION_GUARD_OIDC_JWKS_HOSTS", value_delimiter = ',', value_parser = oidc::issuers::parse_jwks_host)]
    pub oidc_jwks_hosts: Vec<oidc::issuers::JwksHost>,

    /// How long an issuer's keys keep verifying after the last successful fetch of its JWKS:
    /// while the issuer cannot be reached, keys it may have withdrawn are honoured this long,
    /// no longer (at least 10s).
    #[arg(long, env = "DISRUPTION_GUARD_OIDC_KEYS_MAX_AGE", default_value = "24h", value_parser = crate::resources::duration::parse)]
    pub oidc_keys_max_age: std::time::Duration,

    /// Longest lifetime (`exp − iat`) of an accepted CI id-token; a token minted to live
    /// longer is refused (401), whatever its remaining time. The default covers GitHub Actions
    /// (minutes) and GitLab, whose id-tokens live as long as the job's timeout (1h by default).
    #[arg(long, env = "DISRUPTION_GUARD_OIDC_MAX_TOKEN_LIFETIME", default_value = "1h", value_parser = crate::resources::duration::parse)]
    pub oidc_max_token_lifetime: std::time::Duration,

    /// Time to live of a window whose open names none.
    #[arg(long, env = "DISRUPTION_GUARD_DEFAULT_TTL", default_value = "30m", value_parser = crate::resources::duration::parse)]
    pub default_ttl: std::time::Duration,

    /// Largest accepted request body, in bytes.
    #[arg(long, env = "DISRUPTION_GUARD_MAX_BODY_BYTES", default_value_t = 64 * 1024)]
    pub max_body_bytes: usize,

    /// Requests per second each client may make on average (0: no limit). A client is its
    /// authenticated identity once its token is known, its address before.
    #[arg(long, env = "DISRUPTION_GUARD_RATE_LIMIT", default_value_t = 20.0)]
    pub rate_limit: f64,

    /// Requests each client may make in a burst.
    #[arg(long, env = "DISRUPTION_GUARD_RATE_BURST", default_value_t = 100)]
    pub rate_burst: u32,

    /// Proxies (CIDRs or addresses, comma-separated) whose X-Forwarded-For names the client
    /// address used for rate limiting; from any other peer the header is ignored.
    #[arg(
        long,
        env = "DISRUPTION_GUARD_TRUSTED_PROXIES",
        value_delimiter = ',',
        value_parser = ratelimit::parse_cidr
    )]
    pub trusted_proxies: Vec<ipnet::IpNet>,

    /// Time a client has to send a request's headers, from when its connection opened or
    /// was answered; a connection that is slower (or idle) is closed.
    #[arg(long, env = "DISRUPTION_GUARD_HEADER_READ_TIMEOUT", default_value = "10s", value_parser = crate::resources::duration::parse)]
    pub header_read_timeout: std::time::Duration,

    /// Time a client has to send a request's whole body, from when its headers arrived; a
    /// slower body is a 408 and the connection is closed (the body is read before the request
    /// is authenticated).
    #[arg(long, env = "DISRUPTION_GUARD_BODY_READ_TIMEOUT", default_value = "10s", value_parser = crate::resources::duration::parse)]
    pub body_read_timeout: std::time::Duration,

    /// Connections served at once; further clients wait to be accepted. Lowered to what the
    /// limit of open files leaves, when that is less.
    #[arg(long, env = "DISRUPTION_GUARD_MAX_CONNECTIONS", default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,

    /// Connections one client address may have open at once; one more is answered 429 and
    /// closed. Behind a proxy every connection comes from the proxy's address: raise it there.
    #[arg(long, env = "DISRUPTION_GUARD_MAX_CONNECTIONS_PER_ADDRESS", default_value_t = 1_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections_per_address: u32,

    /// `?wait=true` requests each identity may have in progress at once; more are answered
    /// 429 (0 refuses every wait).
    #[arg(long, env = "DISRUPTION_GUARD_MAX_WAITS_PER_IDENTITY", default_value_t = 50)]
    pub max_waits_per_identity: u32,
}

impl ApiArgs {
    /// The audience tokens must carry: `--token-audience`, else `disruption-guard:` and
    /// `--cluster-name`, else [`DEFAULT_TOKEN_AUDIENCE`]; refused (naming the flags) when an
    /// OIDC issuer is trusted with neither flag, since a CI id-token minted for one install's
    /// guard would then be accepted by every install that trusts the same subject.
    pub fn audience(&self) -> Result<String, String> {
        fn given(v: &Option<String>) -> Option<&str> {
            v.as_deref().map(str::trim).filter(|v| !v.is_empty())
        }
        if let Some(audience) = given(&self.token_audience) {
            return Ok(audience.to_string());
        }
        if let Some(cluster) = given(&self.cluster_name) {
            return Ok(format!("{DEFAULT_TOKEN_AUDIENCE}:{cluster}"));
        }
        if !self.oidc_issuers.is_empty() && !self.insecure_no_auth {
            return Err(format!(
                "--oidc-issuer needs a token audience of this install's own: set \
                 --token-audience (e.g. {DEFAULT_TOKEN_AUDIENCE}:<cluster>) or --cluster-name \
                 (the audience becomes {DEFAULT_TOKEN_AUDIENCE}:<name>); with the shared default \
                 {DEFAULT_TOKEN_AUDIENCE:?} a CI id-token minted for another install's guard \
                 would be accepted here"
            ));
        }
        Ok(DEFAULT_TOKEN_AUDIENCE.to_string())
    }
}

/// What the API's flags resolve to once checked together ([`ApiArgs::checked`]).
pub struct Checked {
    /// The audience tokens must carry.
    pub audience: String,
    /// One configuration per trusted OIDC issuer (none without issuers or without auth).
    pub issuers: Vec<oidc::issuers::IssuerConfig>,
}

impl ApiArgs {
    /// Checks what flags say together, with no I/O: the audience, `--default-ttl` within
    /// `max_ttl`, and the OIDC issuers with their CA files and JWKS hosts. The API checks this
    /// as it starts, and `operator --check-config` before anything connects.
    pub fn checked(&self, max_ttl: std::time::Duration) -> Result<Checked, String> {
        let audience = self.audience()?;
        if self.default_ttl > max_ttl {
            return Err("--default-ttl must not exceed --max-ttl".into());
        }
        let issuers = if self.oidc_issuers.is_empty() || self.insecure_no_auth {
            Vec::new()
        } else {
            if self.oidc_keys_max_age < std::time::Duration::from_secs(10) {
                return Err("--oidc-keys-max-age must be at least 10s".into());
            }
            oidc::issuers::resolve(
                &self.oidc_issuers,
                &self.oidc_ca_files,
                &self.oidc_jwks_hosts,
            )?
        };
        Ok(Checked { audience, issuers })
    }
}

fn parse_issuer_flag(text: &str) -> Result<String, String> {
    oidc::normalize_issuer(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        api: ApiArgs,
    }

    fn audience(args: &[&str]) -> Result<String, String> {
        let mut all = vec!["test"];
        all.extend(args);
        Cli::try_parse_from(all).unwrap().api.audience()
    }

    #[test]
    fn an_oidc_issuer_without_an_audience_of_its_own_is_refused_naming_the_flags() {
        let issuer = "--oidc-issuer=https://token.actions.githubusercontent.com";
        let err = audience(&[issuer]).unwrap_err();
        assert!(
            err.contains("--token-audience") && err.contains("--cluster-name"),
            "{err}"
        );
        assert_eq!(
            audience(&[issuer, "--cluster-name=ci-eu-1"]).unwrap(),
            "disruption-guard:ci-eu-1"
        );
        assert_eq!(
            audience(&[
                issuer,
                "--token-audience=guard.example.com",
                "--cluster-name=x"
            ])
            .unwrap(),
            "guard.example.com"
        );
        assert!(audience(&[issuer, "--token-audience= "]).is_err());
    }

    #[test]
    fn without_oidc_issuers_the_default_audience_stays() {
        assert_eq!(audience(&[]).unwrap(), DEFAULT_TOKEN_AUDIENCE);
        assert_eq!(
            audience(&["--insecure-no-auth"]).unwrap(),
            DEFAULT_TOKEN_AUDIENCE
        );
        assert_eq!(
            audience(&["--insecure-no-auth", "--oidc-issuer=https://gitlab.com"]).unwrap(),
            DEFAULT_TOKEN_AUDIENCE
        );
    }
}
