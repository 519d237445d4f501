//! The trusted issuers as configured: `--oidc-issuer URL` (repeatable), each with what applies
//! to it alone. `--oidc-ca-file ISSUER=PATH` adds a private CA for that issuer's HTTPS only
//! (a bare `PATH` is for the only issuer, and refused when there are several: a CA that vouches
//! for a self-hosted GitLab must not vouch for `token.actions.githubusercontent.com` too).
//! `--oidc-jwks-host ISSUER=HOST[:PORT]` names a host other than the issuer's own that its
//! `jwks_uri` and redirects may lead to. Pure: the flags are parsed and resolved here, and
//! every mistake is a start-up error naming the flag.

use std::path::PathBuf;

/// An HTTPS origin: host and port (scheme is always `https`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Origin {
    /// The host as URLs carry it (lower case; an IPv6 address in brackets).
    pub host: String,
    /// The port, 443 when the URL names none.
    pub port: u16,
}

impl Origin {
    /// The origin of an `https://` URL; `None` for anything else.
    pub fn of(url: &reqwest::Url) -> Option<Origin> {
        (url.scheme() == "https").then_some(())?;
        Some(Origin {
            host: url.host_str()?.to_ascii_lowercase(),
            port: url.port_or_known_default()?,
        })
    }

    /// `HOST` or `HOST:PORT`, as `--oidc-jwks-host` takes it.
    pub fn parse(text: &str) -> Result<Origin, String> {
        let url = reqwest::Url::parse(&format!("https://{text}"))
            .map_err(|e| format!("{text:?} is not a host[:port]: {e}"))?;
        if url.path() != "/" || url.query().is_some() || !url.username().is_empty() {
            return Err(format!("{text:?} is not a host[:port]"));
        }
        Origin::of(&url).ok_or_else(|| format!("{text:?} is not a host[:port]"))
    }
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// One `--oidc-ca-file`: for `issuer` (`None`: the only one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaFile {
    /// The issuer it is for, normalized.
    pub issuer: Option<String>,
    /// The PEM bundle.
    pub path: PathBuf,
}

/// One `--oidc-jwks-host`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwksHost {
    /// The issuer it is for, normalized.
    pub issuer: String,
    /// The host its keys may also come from.
    pub origin: Origin,
}

/// What applies to one trusted issuer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuerConfig {
    /// Its URL, normalized (`iss` exactly).
    pub url: String,
    /// Its private CA, trusted beside the system's for this issuer only.
    pub ca_file: Option<PathBuf>,
    /// Every origin discovery, its redirects, `jwks_uri` and its redirects may be fetched
    /// from: the issuer's own first, then its `--oidc-jwks-host`s.
    pub origins: Vec<Origin>,
}

impl IssuerConfig {
    /// An issuer with no private CA and no other host (it must be a valid issuer URL).
    pub fn new(url: &str) -> Result<IssuerConfig, String> {
        let url = normalize_issuer(url)?;
        let parsed = reqwest::Url::parse(&url).map_err(|e| format!("{url}: {e}"))?;
        let own = Origin::of(&parsed).ok_or_else(|| format!("{url}: not an https:// URL"))?;
        Ok(IssuerConfig {
            url,
            ca_file: None,
            origins: vec![own],
        })
    }
}

/// Splits `ISSUER=VALUE` where ISSUER is an `https://` URL; `None` when the text has no such
/// prefix.
fn split_issuer(text: &str) -> Option<(&str, &str)> {
    let rest = text.strip_prefix("https://")?;
    let at = rest.find('=')?;
    Some((&text[..8 + at], &rest[at + 1..]))
}

/// Parses `--oidc-ca-file`: `ISSUER=PATH` or a bare `PATH`.
pub fn parse_ca_file(text: &str) -> Result<CaFile, String> {
    let text = text.trim();
    match split_issuer(text) {
        Some((issuer, path)) if !path.is_empty() => Ok(CaFile {
            issuer: Some(normalize_issuer(issuer)?),
            path: PathBuf::from(path),
        }),
        Some(_) => Err(format!("--oidc-ca-file {text:?}: no path after the issuer")),
        None if text.starts_with("https://") => Err(format!(
            "--oidc-ca-file {text:?}: ISSUER=PATH, or a bare PATH for the only issuer"
        )),
        None if text.is_empty() => Err("--oidc-ca-file: empty".into()),
        None => Ok(CaFile {
            issuer: None,
            path: PathBuf::from(text),
        }),
    }
}

/// Parses `--oidc-jwks-host`: `ISSUER=HOST[:PORT]`.
pub fn parse_jwks_host(text: &str) -> Result<JwksHost, String> {
    let text = text.trim();
    let (issuer, host) = split_issuer(text)
        .ok_or_else(|| format!("--oidc-jwks-host {text:?}: ISSUER=HOST[:PORT]"))?;
    Ok(JwksHost {
        issuer: normalize_issuer(issuer)?,
        origin: Origin::parse(host).map_err(|e| format!("--oidc-jwks-host: {e}"))?,
    })
}

/// Resolves the flags to one configuration per issuer, in the order of `issuers`.
pub fn resolve(
    issuers: &[String],
    ca_files: &[CaFile],
    jwks_hosts: &[JwksHost],
) -> Result<Vec<IssuerConfig>, String> {
    let mut configs = Vec::new();
    for url in issuers {
        let config = IssuerConfig::new(url)?;
        if configs.iter().any(|c: &IssuerConfig| c.url == config.url) {
            return Err(format!("--oidc-issuer {}: given twice", config.url));
        }
        configs.push(config);
    }
    let find = |configs: &mut Vec<IssuerConfig>, issuer: &str, flag: &str| {
        let i = configs.iter().position(|c| c.url == issuer);
        i.ok_or_else(|| format!("{flag} names {issuer:?}, which is not an --oidc-issuer"))
    };
    for ca in ca_files {
        let i = match &ca.issuer {
            Some(issuer) => find(&mut configs, issuer, "--oidc-ca-file")?,
            None if configs.len() == 1 => 0,
            None => {
                return Err(format!(
                    "--oidc-ca-file {}: name the issuer it is for (ISSUER=PATH); with {} issuers a \
                     bare path would vouch for all of them",
                    ca.path.display(),
                    configs.len()
                ));
            }
        };
        if configs[i].ca_file.is_some() {
            return Err(format!(
                "--oidc-ca-file: two CA files for {} (put the certificates in one bundle)",
                configs[i].url
            ));
        }
        configs[i].ca_file = Some(ca.path.clone());
    }
    for host in jwks_hosts {
        let i = find(&mut configs, &host.issuer, "--oidc-jwks-host")?;
        if !configs[i].origins.contains(&host.origin) {
            configs[i].origins.push(host.origin.clone());
        }
    }
    Ok(configs)
}

/// Normalizes an issuer URL as tokens carry it: no trailing slash.
pub fn normalize_issuer(url: &str) -> Result<String, String> {
    let url = url.trim().trim_end_matches('/');
    if !url.starts_with("https://") || url.len() <= "https://".len() {
        return Err(format!("--oidc-issuer {url:?}: must be an https:// URL"));
    }
    Ok(url.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GH: &str = "https://token.actions.githubusercontent.com";
    const GL: &str = "https://gitlab.example.com";

    fn issuers() -> Vec<String> {
        vec![GH.to_string(), format!("{GL}/")]
    }

    #[test]
    fn a_ca_file_applies_to_the_issuer_it_names_only() {
        let ca = parse_ca_file(&format!("{GL}=/etc/ca.pem")).unwrap();
        assert_eq!(ca.issuer.as_deref(), Some(GL));
        let configs = resolve(&issuers(), &[ca], &[]).unwrap();
        assert_eq!(configs[0].url, GH);
        assert_eq!(
            configs[0].ca_file, None,
            "GitHub's issuer keeps the system roots only"
        );
        assert_eq!(configs[1].url, GL);
        assert_eq!(configs[1].ca_file, Some(PathBuf::from("/etc/ca.pem")));
    }

    #[test]
    fn a_bare_ca_file_is_for_the_only_issuer_and_refused_among_several() {
        let bare = parse_ca_file("/etc/ca.pem").unwrap();
        assert_eq!(bare.issuer, None);
        let one = resolve(&[GL.to_string()], std::slice::from_ref(&bare), &[]).unwrap();
        assert_eq!(one[0].ca_file, Some(PathBuf::from("/etc/ca.pem")));
        let err = resolve(&issuers(), &[bare], &[]).unwrap_err();
        assert!(err.contains("name the issuer it is for"), "{err}");
    }

    #[test]
    fn a_flag_naming_an_issuer_not_trusted_is_refused() {
        let ca = parse_ca_file("https://other.example=/ca.pem").unwrap();
        let err = resolve(&issuers(), &[ca], &[]).unwrap_err();
        assert!(err.contains("not an --oidc-issuer"), "{err}");
        let host = parse_jwks_host("https://other.example=keys.example").unwrap();
        let err = resolve(&issuers(), &[], &[host]).unwrap_err();
        assert!(err.contains("--oidc-jwks-host"), "{err}");
        let twice = vec![GH.to_string(), format!("{GH}/")];
        assert!(resolve(&twice, &[], &[]).unwrap_err().contains("twice"));
    }

    #[test]
    fn an_issuer_may_fetch_from_its_own_origin_and_the_hosts_named_for_it() {
        let host = parse_jwks_host("https://accounts.google.com=www.googleapis.com").unwrap();
        let configs = resolve(&["https://accounts.google.com".into()], &[], &[host]).unwrap();
        let origins: Vec<String> = configs[0].origins.iter().map(|o| o.to_string()).collect();
        assert_eq!(
            origins,
            ["accounts.google.com:443", "www.googleapis.com:443"]
        );
        let local = IssuerConfig::new("https://127.0.0.1:8443").unwrap();
        assert_eq!(local.origins[0].to_string(), "127.0.0.1:8443");
    }

    #[test]
    fn malformed_flags_are_refused_naming_the_form() {
        assert!(parse_ca_file("https://gitlab.com").is_err());
        assert!(parse_ca_file("https://gitlab.com=").is_err());
        assert!(parse_ca_file("").is_err());
        assert!(parse_jwks_host("keys.example").is_err());
        assert!(parse_jwks_host("https://gitlab.com=keys.example/path").is_err());
        assert!(parse_jwks_host("https://gitlab.com=http://keys.example").is_err());
        let host = parse_jwks_host("https://gitlab.com=Keys.Example:8443").unwrap();
        assert_eq!(host.origin.to_string(), "keys.example:8443");
    }
}
