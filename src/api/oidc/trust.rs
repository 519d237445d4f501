//! Which `CITrust` objects a verified id-token matches, and what they let it do: pure
//! functions of the trusts, the claims and the request, unit-tested.
//!
//! A trust matches when its `issuer` equals the token's `iss`, its `subject` pattern matches
//! `sub` ([`subject_matches`]) and every claim it names has exactly its value. Several may
//! match; the request is allowed when any matching trust grants the verb and its bounds admit
//! the window ([`admits`]).

use std::collections::BTreeMap;
use std::time::Duration;

use kube::ResourceExt;

use super::token::Claims;
use crate::api::verb::Verb;
use crate::resources::{Bounds, CITrust, Grant};

/// The grant a route needs.
pub fn grant_for(verb: Verb) -> Grant {
    match verb {
        Verb::Create => Grant::Open,
        Verb::Patch => Grant::Renew,
        Verb::Delete => Grant::Close,
        Verb::Get | Verb::List => Grant::Read,
    }
}

/// Whether a `subject` pattern is acceptable: its first two `:`-separated parts (the kind of
/// subject and the repository or project path) are literal, so that no pattern can match
/// another repository, or a fork, by accident. The CRD's validation says the same.
pub fn check_pattern(pattern: &str) -> Result<(), String> {
    let mut parts = pattern.splitn(3, ':');
    let (kind, repo) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if kind.is_empty() || repo.is_empty() || kind.contains('*') || repo.contains('*') {
        return Err(format!(
            "subject: {pattern:?}: its first two ':'-separated parts (kind and repository) \
             must be literal"
        ));
    }
    Ok(())
}

/// Whether `sub` matches `pattern`: exact, where each `*` stands for one or more characters
/// other than `:` and `/` (so `refs/heads/*` matches `refs/heads/main` but not
/// `refs/heads/a/b`, and `*` never spans two parts of the subject). Hand-written rather than a
/// regex or glob crate: the one rule is this narrow on purpose, and a general matcher would
/// accept patterns (`**`, classes) that widen it.
pub fn subject_matches(pattern: &str, sub: &str) -> bool {
    if check_pattern(pattern).is_err() {
        return false;
    }
    fn go(p: &[u8], s: &[u8]) -> bool {
        match p.split_first() {
            None => s.is_empty(),
            Some((b'*', rest)) => {
                // One or more characters other than ':' and '/'.
                let run = s.iter().take_while(|&&c| c != b':' && c != b'/').count();
                (1..=run).any(|n| go(rest, &s[n..]))
            }
            Some((c, rest)) => s.first() == Some(c) && go(rest, &s[1..]),
        }
    }
    go(pattern.as_bytes(), sub.as_bytes())
}

/// Why `trust` does not match `claims`, or `None` when it does.
pub fn mismatch(trust: &CITrust, claims: &Claims) -> Option<String> {
    let spec = &trust.spec;
    if spec.issuer != claims.iss {
        return Some(format!("issuer is {:?}", spec.issuer));
    }
    if !subject_matches(&spec.subject, &claims.sub) {
        return Some(format!("sub does not match {:?}", spec.subject));
    }
    for (name, want) in &spec.claims {
        match claims.text(name) {
            Some(got) if &got == want => {}
            Some(got) => return Some(format!("claim {name} is {got:?}, not {want:?}")),
            None => return Some(format!("claim {name} is missing (wanted {want:?})")),
        }
    }
    None
}

/// A trust that matched and grants the verb asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Granted {
    /// `namespace/name` of the CITrust.
    pub trust: String,
    /// Its bounds.
    pub bounds: Bounds,
}

/// The trusts of namespace `ns` that match `claims` and grant `verb`; a 403-worthy reason
/// when none does. `forbidden`: cluster admins forbade CI trust in the namespace.
pub fn decide(
    trusts: &[CITrust],
    ns: &str,
    forbidden: bool,
    claims: &Claims,
    verb: Verb,
) -> Result<Vec<Granted>, String> {
    if ns.is_empty() {
        return Err(
            "namespace: a CI token may act in one namespace at a time (CITrust is namespaced)"
                .into(),
        );
    }
    if forbidden {
        return Err(format!(
            "namespace: CI trust is forbidden in namespace {ns} (label {}=false)",
            crate::resources::citrust::CI_TRUST_LABEL
        ));
    }
    let grant = grant_for(verb);
    let mut reasons = Vec::new();
    let mut granted = Vec::new();
    let mut of_issuer = 0;
    for trust in trusts
        .iter()
        .filter(|t| t.namespace().as_deref() == Some(ns))
    {
        if trust.spec.issuer != claims.iss {
            continue;
        }
        of_issuer += 1;
        let name = trust.name_any();
        match mismatch(trust, claims) {
            Some(why) => reasons.push(format!("{name}: {why}")),
            None if trust.spec.grants.contains(&grant) => granted.push(Granted {
                trust: format!("{ns}/{name}"),
                bounds: trust.spec.bounds.clone().unwrap_or_default(),
            }),
            None => reasons.push(format!(
                "{name}: grants {}, not {}",
                grants_text(&trust.spec.grants),
                grant.as_str()
            )),
        }
    }
    if !granted.is_empty() {
        return Ok(granted);
    }
    if of_issuer == 0 {
        return Err(format!(
            "namespace: no CITrust in namespace {ns} trusts issuer {:?}",
            claims.iss
        ));
    }
    Err(format!(
        "namespace: no CITrust in namespace {ns} lets sub {:?} {} windows ({})",
        claims.sub,
        grant.as_str(),
        reasons.join("; ")
    ))
}

fn grants_text(grants: &[Grant]) -> String {
    grants
        .iter()
        .map(|g| g.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether a window of `ttl` selecting with `match_labels` is within `bounds`; the reason
/// (naming the field) when not.
pub fn admits(
    bounds: &Bounds,
    ttl: Duration,
    match_labels: &BTreeMap<String, String>,
) -> Result<(), String> {
    if let Some(max) = &bounds.max_ttl {
        let max: Duration = (*max).into();
        if ttl > max {
            return Err(format!(
                "ttl: {} is above the {} this CI trust allows",
                crate::api::ttl::format(ttl),
                crate::api::ttl::format(max)
            ));
        }
    }
    for (key, value) in &bounds.match_labels {
        if match_labels.get(key) != Some(value) {
            return Err(format!(
                "selector: must require {key}={value} (in matchLabels) under this CI trust"
            ));
        }
    }
    Ok(())
}

/// Whether any of `granted` admits the window; the first refusal, naming its trust, when
/// none does.
pub fn any_admits(
    granted: &[Granted],
    ttl: Duration,
    match_labels: &BTreeMap<String, String>,
) -> Result<(), String> {
    let mut first = None;
    for g in granted {
        match admits(&g.bounds, ttl, match_labels) {
            Ok(()) => return Ok(()),
            Err(why) => {
                first.get_or_insert_with(|| format!("{why} (CITrust {})", g.trust));
            }
        }
    }
    match first {
        Some(why) => Err(why),
        None => Ok(()),
    }
}

/// The longest ttl any of `granted` allows (`None`: unbounded): a window opened without a
/// ttl gets the server's default capped by it.
pub fn ttl_cap(granted: &[Granted]) -> Option<Duration> {
    let mut cap = Some(Duration::ZERO);
    for g in granted {
        match (&g.bounds.max_ttl, cap) {
            (None, _) => return None,
            (Some(max), Some(c)) => cap = Some(c.max((*max).into())),
            (Some(_), None) => {}
        }
    }
    cap.filter(|_| !granted.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::CITrustSpec;
    use serde_json::json;

    const GH: &str = "https://token.actions.githubusercontent.com";

    fn trust(name: &str, ns: &str, subject: &str, grants: &[Grant]) -> CITrust {
        let mut t = CITrust::new(
            name,
            CITrustSpec {
                issuer: GH.into(),
                subject: subject.into(),
                claims: BTreeMap::new(),
                grants: grants.to_vec(),
                bounds: None,
            },
        );
        t.metadata.namespace = Some(ns.into());
        t
    }

    fn claims(sub: &str, extra: serde_json::Value) -> Claims {
        let mut all = json!({"iss": GH, "sub": sub, "aud": "disruption-guard", "exp": 2000});
        for (k, v) in extra.as_object().unwrap() {
            all[k] = v.clone();
        }
        Claims::from_json(all.as_object().unwrap().clone()).unwrap()
    }

    const ALL: &[Grant] = &[Grant::Open, Grant::Renew, Grant::Close, Grant::Read];

    #[test]
    fn an_exact_subject_matches_only_itself() {
        let p = "repo:acme/shop:ref:refs/heads/main";
        assert!(subject_matches(p, p));
        assert!(!subject_matches(p, "repo:acme/shop:ref:refs/heads/main2"));
        assert!(!subject_matches(p, "repo:acme/shop:ref:refs/heads/mai"));
    }

    #[test]
    fn a_star_matches_within_one_path_segment_only() {
        let p = "repo:acme/shop:ref:refs/heads/*";
        assert!(subject_matches(p, "repo:acme/shop:ref:refs/heads/main"));
        assert!(!subject_matches(p, "repo:acme/shop:ref:refs/heads/"));
        assert!(!subject_matches(p, "repo:acme/shop:ref:refs/heads/a/b"));
        assert!(!subject_matches(p, "repo:acme/shop:ref:refs/heads/main:x"));
        let p = "repo:acme/shop:environment:*";
        assert!(subject_matches(p, "repo:acme/shop:environment:prod"));
        assert!(!subject_matches(p, "repo:acme/shop:pull_request"));
    }

    #[test]
    fn a_pattern_can_never_match_another_repository_or_a_fork() {
        for p in [
            "repo:acme/*:ref:refs/heads/main",
            "repo:*",
            "*:acme/shop",
            "repo:acme/shop*",
        ] {
            assert!(check_pattern(p).is_err(), "{p}");
            assert!(
                !subject_matches(p, "repo:acme/shop:ref:refs/heads/main"),
                "{p}"
            );
            assert!(
                !subject_matches(p, "repo:acme/shop-fork:ref:refs/heads/main"),
                "{p}"
            );
        }
        assert!(!subject_matches(
            "repo:acme/shop:*",
            "repo:mallory/shop:pull_request"
        ));
    }

    #[test]
    fn a_matching_trust_grants_its_verbs_in_its_namespace_only() {
        let trusts = [trust(
            "main",
            "shop",
            "repo:acme/shop:ref:refs/heads/main",
            ALL,
        )];
        let c = claims("repo:acme/shop:ref:refs/heads/main", json!({}));
        let granted = decide(&trusts, "shop", false, &c, Verb::Create).unwrap();
        assert_eq!(granted[0].trust, "shop/main");
        let err = decide(&trusts, "other", false, &c, Verb::Create).unwrap_err();
        assert!(
            err.contains("no CITrust in namespace other trusts issuer"),
            "{err}"
        );
    }

    #[test]
    fn a_namespace_labelled_against_ci_trust_grants_nothing() {
        let trusts = [trust(
            "main",
            "shop",
            "repo:acme/shop:ref:refs/heads/main",
            ALL,
        )];
        let c = claims("repo:acme/shop:ref:refs/heads/main", json!({}));
        let err = decide(&trusts, "shop", true, &c, Verb::Get).unwrap_err();
        assert!(err.contains("ci-trust=false"), "{err}");
    }

    #[test]
    fn a_read_only_trust_refuses_an_open_naming_what_it_grants() {
        let trusts = [trust(
            "ro",
            "shop",
            "repo:acme/shop:ref:refs/heads/main",
            &[Grant::Read],
        )];
        let c = claims("repo:acme/shop:ref:refs/heads/main", json!({}));
        decide(&trusts, "shop", false, &c, Verb::List).unwrap();
        let err = decide(&trusts, "shop", false, &c, Verb::Create).unwrap_err();
        assert!(err.contains("ro: grants read, not open"), "{err}");
    }

    #[test]
    fn every_named_claim_must_match_exactly() {
        let mut t = trust("main", "shop", "repo:acme/shop:ref:refs/heads/main", ALL);
        t.spec.claims = BTreeMap::from([
            ("event_name".to_string(), "push".to_string()),
            ("repository_owner_id".to_string(), "1234".to_string()),
        ]);
        let trusts = [t];
        let sub = "repo:acme/shop:ref:refs/heads/main";
        let ok = claims(
            sub,
            json!({"event_name": "push", "repository_owner_id": 1234}),
        );
        decide(&trusts, "shop", false, &ok, Verb::Create).unwrap();
        let prt = claims(
            sub,
            json!({"event_name": "pull_request_target", "repository_owner_id": 1234}),
        );
        let err = decide(&trusts, "shop", false, &prt, Verb::Create).unwrap_err();
        assert!(
            err.contains("claim event_name is \"pull_request_target\""),
            "{err}"
        );
        let missing = claims(sub, json!({"event_name": "push"}));
        let err = decide(&trusts, "shop", false, &missing, Verb::Create).unwrap_err();
        assert!(err.contains("repository_owner_id is missing"), "{err}");
    }

    #[test]
    fn any_matching_trust_grants() {
        let trusts = [
            trust(
                "ro",
                "shop",
                "repo:acme/shop:ref:refs/heads/*",
                &[Grant::Read],
            ),
            trust("main", "shop", "repo:acme/shop:ref:refs/heads/main", ALL),
            trust("other", "shop", "repo:acme/web:ref:refs/heads/main", ALL),
        ];
        let c = claims("repo:acme/shop:ref:refs/heads/main", json!({}));
        let granted = decide(&trusts, "shop", false, &c, Verb::Delete).unwrap();
        assert_eq!(granted.len(), 1);
        let c = claims("repo:acme/shop:ref:refs/heads/dev", json!({}));
        let err = decide(&trusts, "shop", false, &c, Verb::Delete).unwrap_err();
        assert!(err.contains("ro: grants read, not close"), "{err}");
        assert!(err.contains("main: sub does not match"), "{err}");
    }

    #[test]
    fn the_every_namespace_list_is_never_granted() {
        let trusts = [trust(
            "main",
            "shop",
            "repo:acme/shop:ref:refs/heads/main",
            ALL,
        )];
        let c = claims("repo:acme/shop:ref:refs/heads/main", json!({}));
        assert!(decide(&trusts, "", false, &c, Verb::List).is_err());
    }

    fn bounded(trust: &str, max: Option<&str>, labels: &[(&str, &str)]) -> Granted {
        Granted {
            trust: trust.into(),
            bounds: Bounds {
                max_ttl: max.map(|m| m.parse().unwrap()),
                match_labels: labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            },
        }
    }

    #[test]
    fn a_ttl_above_the_bound_is_refused_naming_the_trust() {
        let g = [bounded("shop/main", Some("1h"), &[])];
        any_admits(&g, Duration::from_secs(3600), &BTreeMap::new()).unwrap();
        let err = any_admits(&g, Duration::from_secs(3601), &BTreeMap::new()).unwrap_err();
        assert!(
            err.starts_with("ttl: ") && err.contains("shop/main"),
            "{err}"
        );
    }

    #[test]
    fn the_selector_bound_needs_its_labels_in_match_labels() {
        let g = [bounded("shop/main", None, &[("tier", "backend")])];
        let ok = BTreeMap::from([
            ("tier".to_string(), "backend".to_string()),
            ("app".to_string(), "api".to_string()),
        ]);
        any_admits(&g, Duration::from_secs(60), &ok).unwrap();
        let err = any_admits(&g, Duration::from_secs(60), &BTreeMap::new()).unwrap_err();
        assert!(
            err.starts_with("selector: must require tier=backend"),
            "{err}"
        );
    }

    #[test]
    fn any_granting_trust_whose_bounds_admit_is_enough() {
        let g = [
            bounded("shop/short", Some("10m"), &[]),
            bounded("shop/long", Some("2h"), &[]),
        ];
        any_admits(&g, Duration::from_secs(3600), &BTreeMap::new()).unwrap();
        assert_eq!(ttl_cap(&g), Some(Duration::from_secs(7200)));
        let g = [
            bounded("shop/short", Some("10m"), &[]),
            bounded("shop/free", None, &[]),
        ];
        assert_eq!(ttl_cap(&g), None);
    }
}
