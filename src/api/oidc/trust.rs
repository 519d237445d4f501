//! Which `CITrust` objects a verified id-token matches, and what they let it do: pure
//! functions of the trusts, the claims and the request, unit-tested.
//!
//! A trust matches when its `issuer` equals the token's `iss`, its `subject` pattern matches
//! `sub` ([`subject_matches`]) and every claim it names has exactly its value. Several may
//! match; the request is allowed when any matching trust grants the verb and its bounds admit
//! the window ([`super::bounds`]).
//!
//! A trust is written by whoever may edit its namespace, so matching costs what the subject's
//! length costs, whatever the pattern ([`glob`] is linear), and a refusal tells the caller only
//! what its own token lacks ([`Refused`]): each trust's reason goes to the operator's log and
//! the trust's Events, never to the caller.

use std::borrow::Borrow;

use kube::ResourceExt;

use super::bounds::{Granted, Limits};
use super::token::Claims;
use crate::api::verb::Verb;
use crate::resources::citrust::MAX_SUBJECT_STARS;
use crate::resources::{CITrust, Grant};

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
/// another repository, or a fork, by accident; and it holds at most [`MAX_SUBJECT_STARS`] `*`.
/// The CRD's validation says the same.
pub fn check_pattern(pattern: &str) -> Result<(), String> {
    let mut parts = pattern.splitn(3, ':');
    let (kind, repo) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if kind.is_empty() || repo.is_empty() || kind.contains('*') || repo.contains('*') {
        return Err(format!(
            "subject: {pattern:?}: its first two ':'-separated parts (kind and repository) \
             must be literal"
        ));
    }
    let stars = pattern.matches('*').count();
    if stars > MAX_SUBJECT_STARS {
        return Err(format!(
            "subject: holds {stars} '*', at most {MAX_SUBJECT_STARS} are allowed"
        ));
    }
    Ok(())
}

/// Whether `sub` matches `pattern`: exact, where each `*` stands for one or more characters
/// other than `:` and `/` (so `refs/heads/*` matches `refs/heads/main` but not
/// `refs/heads/a/b`, and `*` never spans two parts of the subject). A pattern that
/// [`check_pattern`] refuses matches nothing.
pub fn subject_matches(pattern: &str, sub: &str) -> bool {
    check_pattern(pattern).is_ok() && glob(pattern, sub)
}

/// The separators a `*` never crosses.
fn is_separator(c: char) -> bool {
    c == ':' || c == '/'
}

/// [`subject_matches`] without the check of the pattern, in time linear in the lengths of
/// `pattern` and `sub` whatever the number of `*`: since no `*` crosses a separator, both are
/// cut at their separators, which must be the same, and each part is matched on its own
/// ([`part_matches`]).
///
/// Hand-written rather than a regex or glob crate: the one rule is this narrow on purpose, and
/// a general matcher would accept patterns (`**`, classes) that widen it.
pub fn glob(pattern: &str, sub: &str) -> bool {
    let seps = |s: &str| s.chars().filter(|c| is_separator(*c)).collect::<Vec<_>>();
    if seps(pattern) != seps(sub) {
        return false;
    }
    pattern
        .split(is_separator)
        .zip(sub.split(is_separator))
        .all(|(p, s)| part_matches(p, s))
}

/// Whether the part `text` (no separator in it) matches the part `pattern`, where each `*`
/// stands for one or more characters. The literal pieces between the `*` are placed from the
/// left, each as early as it fits (the earliest place leaves the most room for what follows,
/// so it is the only one to try), with as many characters before it as `*` precede it; the
/// last piece must end the text. Each piece is searched once, from where the previous ended:
/// linear, no backtracking.
fn part_matches(pattern: &str, text: &str) -> bool {
    let mut pieces = pattern.split('*');
    let first = pieces.next().unwrap_or("");
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let pieces: Vec<&str> = pieces.collect();
    let Some((last, middle)) = pieces.split_last() else {
        // No `*`: the whole part is literal.
        return rest.is_empty();
    };
    let Some(before_last) = rest.strip_suffix(last) else {
        return false;
    };
    rest = before_last;
    // `*` not yet given their characters (consecutive `*` each take one or more).
    let mut stars = 1;
    for piece in middle {
        if piece.is_empty() {
            stars += 1;
            continue;
        }
        let Some(from) = skip_chars(rest, stars) else {
            return false;
        };
        match rest[from..].find(piece) {
            Some(at) => rest = &rest[from + at + piece.len()..],
            None => return false,
        }
        stars = 1;
    }
    rest.chars().count() >= stars
}

/// The byte offset just after the first `n` characters of `text`, if it has that many.
fn skip_chars(text: &str, n: usize) -> Option<usize> {
    match text.char_indices().nth(n) {
        Some((at, _)) => Some(at),
        None => (text.chars().count() == n).then_some(text.len()),
    }
}

/// Why `trust` does not match `claims`, or `None` when it does.
pub fn mismatch(trust: &CITrust, claims: &Claims) -> Option<String> {
    let spec = &trust.spec;
    if spec.issuer != claims.iss {
        return Some(format!("issuer is {:?}", spec.issuer));
    }
    if let Err(why) = check_pattern(&spec.subject) {
        return Some(why);
    }
    if !glob(&spec.subject, &claims.sub) {
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

/// Why a request with a verified id-token is refused. The caller is told only [`Self::detail`]:
/// its own token's `iss` and `sub`, and what it asked; whether the namespace has trusts at all,
/// their names, patterns and pinned claims stay with the operator ([`Self::trusts`], for the
/// log and each trust's Events, and [`Self::why`], for the log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// For the caller.
    pub detail: String,
    /// For the log: the refusal in one sentence, policy included.
    pub why: String,
    /// The near misses, by name, and why: each trust of the token's issuer in the namespace
    /// whose subject pattern the token's `sub` matches (or whose pattern is invalid), but that
    /// did not grant. A trust whose subject names someone else is not told about the token.
    pub trusts: Vec<(String, String)>,
}

/// The trusts of namespace `ns` that match `claims` and grant `verb`; a [`Refused`] when none
/// does. `forbidden`: cluster admins forbade CI trust in the namespace.
pub fn decide<T: Borrow<CITrust>>(
    trusts: &[T],
    ns: &str,
    forbidden: bool,
    claims: &Claims,
    verb: Verb,
) -> Result<Vec<Granted>, Refused> {
    let grant = grant_for(verb);
    if ns.is_empty() {
        let text =
            "namespace: a CI token may act in one namespace at a time (CITrust is namespaced)";
        return Err(Refused {
            detail: text.into(),
            why: text.into(),
            trusts: Vec::new(),
        });
    }
    let refuse = |why: String, trusts| Refused {
        detail: format!(
            "namespace: no CITrust in namespace {ns} lets this token (iss {:?}, sub {:?}) {} \
             windows; ask the namespace's owners (the reasons are in the Events of its \
             CITrusts)",
            claims.iss,
            short(&claims.sub),
            grant.as_str()
        ),
        why,
        trusts,
    };
    if forbidden {
        return Err(refuse(
            format!(
                "CI trust is forbidden in namespace {ns} (label {}=false)",
                crate::resources::citrust::CI_TRUST_LABEL
            ),
            Vec::new(),
        ));
    }
    let mut reasons = Vec::new();
    let mut granted = Vec::new();
    for trust in trusts
        .iter()
        .map(Borrow::borrow)
        .filter(|t| t.namespace().as_deref() == Some(ns) && t.spec.issuer == claims.iss)
    {
        let name = trust.name_any();
        let why = match mismatch(trust, claims) {
            Some(why) => why,
            None if !trust.spec.grants.contains(&grant) => format!(
                "grants {}, not {}",
                grants_text(&trust.spec.grants),
                grant.as_str()
            ),
            None => match Limits::of(trust) {
                Ok(limits) => {
                    granted.push(Granted {
                        trust: format!("{ns}/{name}"),
                        limits,
                    });
                    continue;
                }
                Err(why) => format!("{why}; this CITrust grants nothing until it is fixed"),
            },
        };
        let near =
            check_pattern(&trust.spec.subject).is_err() || glob(&trust.spec.subject, &claims.sub);
        reasons.push((name, why, near));
    }
    if !granted.is_empty() {
        return Ok(granted);
    }
    let why = if reasons.is_empty() {
        format!(
            "no CITrust in namespace {ns} trusts issuer {:?}",
            claims.iss
        )
    } else {
        let each: Vec<String> = reasons
            .iter()
            .map(|(n, w, _)| format!("{n}: {w}"))
            .collect();
        format!(
            "no CITrust in namespace {ns} lets sub {:?} {} windows ({})",
            short(&claims.sub),
            grant.as_str(),
            each.join("; ")
        )
    };
    let near = reasons
        .into_iter()
        .filter(|(_, _, near)| *near)
        .map(|(n, w, _)| (n, w))
        .collect();
    Err(refuse(why, near))
}

/// `text` cut to 200 characters, for messages that quote a token's claims.
pub fn short(text: &str) -> String {
    if text.chars().count() <= 200 {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(200).collect();
    cut.push('…');
    cut
}

fn grants_text(grants: &[Grant]) -> String {
    grants
        .iter()
        .map(|g| g.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::CITrustSpec;
    use serde_json::json;
    use std::collections::BTreeMap;

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

    /// One trust named `main` in `shop` for the main branch of acme/shop, and that branch's claims.
    fn main_branch_of_shop(grants: &[Grant]) -> ([CITrust; 1], Claims) {
        const MAIN: &str = "repo:acme/shop:ref:refs/heads/main";
        (
            [trust("main", "shop", MAIN, grants)],
            claims(MAIN, json!({})),
        )
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
        let (trusts, c) = main_branch_of_shop(ALL);
        let granted = decide(&trusts, "shop", false, &c, Verb::Create).unwrap();
        assert_eq!(granted[0].trust, "shop/main");
        let err = decide(&trusts, "other", false, &c, Verb::Create).unwrap_err();
        assert!(
            err.why
                .contains("no CITrust in namespace other trusts issuer"),
            "{err:?}"
        );
    }

    #[test]
    fn a_namespace_labelled_against_ci_trust_grants_nothing() {
        let (trusts, c) = main_branch_of_shop(ALL);
        let err = decide(&trusts, "shop", true, &c, Verb::Get).unwrap_err();
        assert!(err.why.contains("ci-trust=false"), "{err:?}");
    }

    #[test]
    fn a_read_only_trust_refuses_an_open_naming_what_it_grants() {
        let (mut trusts, c) = main_branch_of_shop(&[Grant::Read]);
        trusts[0].metadata.name = Some("ro".into());
        decide(&trusts, "shop", false, &c, Verb::List).unwrap();
        let err = decide(&trusts, "shop", false, &c, Verb::Create).unwrap_err();
        assert!(err.why.contains("ro: grants read, not open"), "{err:?}");
        assert_eq!(err.trusts, [("ro".into(), "grants read, not open".into())]);
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
            err.why
                .contains("claim event_name is \"pull_request_target\""),
            "{err:?}"
        );
        let missing = claims(sub, json!({"event_name": "push"}));
        let err = decide(&trusts, "shop", false, &missing, Verb::Create).unwrap_err();
        assert!(
            err.why.contains("repository_owner_id is missing"),
            "{err:?}"
        );
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
        assert!(err.why.contains("ro: grants read, not close"), "{err:?}");
        assert!(err.why.contains("main: sub does not match"), "{err:?}");
    }

    #[test]
    fn the_every_namespace_list_is_never_granted() {
        let (trusts, c) = main_branch_of_shop(ALL);
        assert!(decide(&trusts, "", false, &c, Verb::List).is_err());
    }

    #[test]
    fn twenty_four_stars_against_a_long_subject_are_answered_at_once() {
        // Each `*` once tried every split: this pair never returned.
        let branch = "a".repeat(100);
        let sub = format!("repo:mallory/x:ref:refs/heads/{branch}");
        assert!(sub.len() >= 120);
        let pattern = format!("repo:mallory/x:ref:refs/heads/{}z", "*".repeat(24));
        let start = std::time::Instant::now();
        assert!(!glob(&pattern, &sub));
        let interleaved = format!("repo:mallory/x:ref:refs/heads/{}z", "*a".repeat(24));
        assert!(!glob(&interleaved, &sub));
        let took = start.elapsed();
        assert!(took < std::time::Duration::from_millis(10), "{took:?}");
        // The CRD and the operator refuse so many stars anyway.
        assert!(check_pattern(&pattern).is_err());
        assert!(!subject_matches(
            &pattern,
            &format!("repo:mallory/x:ref:refs/heads/{branch}z")
        ));
    }

    #[test]
    fn each_star_takes_one_or_more_characters_and_pieces_are_placed_from_the_left() {
        let cases = [
            ("a*a", "aa", false),
            ("a*a", "aba", true),
            ("a**a", "aba", false),
            ("a**a", "abba", true),
            ("*", "", false),
            ("*", "x", true),
            ("*b*", "abc", true),
            ("*b*", "bc", false),
            ("*ab*ab", "xabyab", true),
            ("*ab*ab", "xabab", false),
            ("*ab*ab", "xababyab", true),
            ("ab*ba", "aba", false),
            ("ab*ba", "abxba", true),
            ("é*é", "ééé", true),
            ("é*é", "éé", false),
            ("v*-*-*", "v1-2-3", true),
            ("v*-*-*", "v1-2-", false),
        ];
        for (pattern, text, want) in cases {
            assert_eq!(part_matches(pattern, text), want, "{pattern:?} ~ {text:?}");
        }
    }

    #[test]
    fn a_star_is_linear_in_the_subject_whatever_the_pattern() {
        // A thousand-character part against eight interleaved stars: one pass each.
        let text = "ab".repeat(500);
        let pattern = format!("{}c", "*ab".repeat(8));
        let start = std::time::Instant::now();
        for _ in 0..100 {
            assert!(!part_matches(&pattern, &text));
        }
        assert!(start.elapsed() < std::time::Duration::from_millis(200));
    }

    #[test]
    fn a_trust_whose_stored_max_ttl_is_not_a_duration_grants_nothing_alone() {
        let sub = "repo:acme/shop:ref:refs/heads/main";
        let mut bad = trust("bad", "shop", sub, ALL);
        for text in ["99999999999999999999999h", "soon", "-1h"] {
            bad.spec.bounds = Some(crate::resources::Bounds {
                max_ttl: Some(text.into()),
                ..Default::default()
            });
            let c = claims(sub, json!({}));
            let err =
                decide(std::slice::from_ref(&bad), "shop", false, &c, Verb::Create).unwrap_err();
            assert_eq!(err.trusts.len(), 1, "{text}");
            assert!(err.trusts[0].1.starts_with("bounds.maxTtl: "), "{err:?}");
            // Another trust of the namespace still grants.
            let good = trust("good", "shop", sub, ALL);
            let granted = decide(&[bad.clone(), good], "shop", false, &c, Verb::Create).unwrap();
            assert_eq!(granted.len(), 1);
            assert_eq!(granted[0].trust, "shop/good");
        }
    }

    #[test]
    fn the_caller_is_told_its_own_token_never_the_namespace_policy() {
        let mut t = trust(
            "shop-main",
            "shop",
            "repo:acme/shop:ref:refs/heads/main",
            ALL,
        );
        t.spec.claims = BTreeMap::from([("repository_owner_id".into(), "1234".into())]);
        let c = claims("repo:acme/shop:ref:refs/heads/dev", json!({}));
        let no_trust = decide::<CITrust>(&[], "shop", false, &c, Verb::Create).unwrap_err();
        let mismatch =
            decide(std::slice::from_ref(&t), "shop", false, &c, Verb::Create).unwrap_err();
        let forbidden =
            decide(std::slice::from_ref(&t), "shop", true, &c, Verb::Create).unwrap_err();
        // The same answer whether the namespace has trusts, has none, or forbids them.
        assert_eq!(no_trust.detail, mismatch.detail);
        assert_eq!(no_trust.detail, forbidden.detail);
        for secret in [
            "shop-main",
            "refs/heads/main",
            "1234",
            "repository_owner_id",
            "ci-trust",
        ] {
            assert!(
                !mismatch.detail.contains(secret),
                "{secret}: {}",
                mismatch.detail
            );
        }
        assert!(
            mismatch
                .detail
                .contains("repo:acme/shop:ref:refs/heads/dev")
        );
        assert!(mismatch.detail.starts_with("namespace: "));
        // The operator keeps the reasons in its log; a trust naming another subject gets no
        // Event about this token.
        assert!(
            mismatch.why.contains("shop-main: sub does not match"),
            "{mismatch:?}"
        );
        assert!(mismatch.trusts.is_empty(), "{mismatch:?}");
        assert!(forbidden.why.contains("ci-trust=false"));
    }
}
