//! A CITrust's bounds and whether a window is within them: what a token granted by the trust
//! may open, renew and close. Pure functions of the bounds and the window, unit-tested.
//!
//! The caller of a refused request hears the field and its own request ([`OutOfBounds`]);
//! which trust refused and its bound's values go to the operator's log only.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::resources::CITrust;

/// The bounds of a trust, read: what [`admits`] checks a window against.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Limits {
    /// Longest ttl; `None`: the server's own limit only.
    pub max_ttl: Option<Duration>,
    /// Labels the window's selector must require.
    pub match_labels: BTreeMap<String, String>,
    /// Whether the window may protect DaemonSet pods.
    pub daemon_sets: bool,
}

impl Limits {
    /// The limits `trust` sets; why it grants nothing when its stored bounds cannot be read.
    pub fn of(trust: &CITrust) -> Result<Limits, String> {
        let bounds = trust.spec.bounds.clone().unwrap_or_default();
        Ok(Limits {
            max_ttl: bounds.max_ttl()?,
            match_labels: bounds.match_labels,
            daemon_sets: bounds.daemon_sets,
        })
    }
}

/// A trust that matched and grants the verb asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Granted {
    /// `namespace/name` of the CITrust.
    pub trust: String,
    /// Its bounds.
    pub limits: Limits,
}

/// What the bounds look at in a window, asked for (an open) or stored (a renew).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Asked {
    /// Its ttl.
    pub ttl: Duration,
    /// Its selector's `matchLabels`.
    pub match_labels: BTreeMap<String, String>,
    /// Whether it protects DaemonSet pods.
    pub daemon_sets: bool,
}

/// A window that no granting trust's bounds admit. The caller is told [`Self::detail`]: the
/// field and its own request, never the trust's name or its bound's values (what a namespace
/// allows is its owners' business, and a token may be a stolen one probing it); [`Self::why`]
/// names both, for the operator's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutOfBounds {
    /// The field refused (`ttl`, `selector`, `protect.daemonSets`): the metric's label.
    pub field: &'static str,
    /// For the caller.
    pub detail: String,
    /// For the log: the trust and its bound.
    pub why: String,
}

/// Whether a window `asked` is within `limits`; the refusal (naming the field) when not.
pub fn admits(limits: &Limits, asked: &Asked) -> Result<(), OutOfBounds> {
    let fmt = crate::resources::duration::format;
    if let Some(max) = limits.max_ttl
        && asked.ttl > max
    {
        return Err(OutOfBounds {
            field: "ttl",
            detail: format!(
                "ttl: {} is longer than the CI trusts granting this token allow",
                fmt(asked.ttl)
            ),
            why: format!(
                "ttl: {} is above bounds.maxTtl {}",
                fmt(asked.ttl),
                fmt(max)
            ),
        });
    }
    for (key, value) in &limits.match_labels {
        if asked.match_labels.get(key) != Some(value) {
            return Err(OutOfBounds {
                field: "selector",
                detail: "selector: the window's selector is outside what the CI trusts granting \
                         this token allow (their bounds.matchLabels)"
                    .into(),
                why: format!("selector: does not require {key}={value} (bounds.matchLabels)"),
            });
        }
    }
    if asked.daemon_sets && !limits.daemon_sets {
        return Err(OutOfBounds {
            field: "protect.daemonSets",
            detail: "protect.daemonSets: the CI trusts granting this token do not let its \
                     windows protect DaemonSet pods"
                .into(),
            why: "protect.daemonSets: bounds.daemonSets is false".into(),
        });
    }
    Ok(())
}

/// Whether any of `granted` admits the window; the first refusal, its `why` naming its trust,
/// when none does.
pub fn any_admits(granted: &[Granted], asked: &Asked) -> Result<(), OutOfBounds> {
    let mut first = None;
    for g in granted {
        match admits(&g.limits, asked) {
            Ok(()) => return Ok(()),
            Err(refused) => {
                first.get_or_insert_with(|| OutOfBounds {
                    why: format!("{} (CITrust {})", refused.why, g.trust),
                    ..refused
                });
            }
        }
    }
    match first {
        Some(refused) => Err(refused),
        None => Ok(()),
    }
}

/// The longest ttl any of `granted` allows (`None`: unbounded): a window opened without a
/// ttl gets the server's default capped by it.
pub fn ttl_cap(granted: &[Granted]) -> Option<Duration> {
    let mut cap = Some(Duration::ZERO);
    for g in granted {
        match (g.limits.max_ttl, cap) {
            (None, _) => return None,
            (Some(max), Some(c)) => cap = Some(c.max(max)),
            (Some(_), None) => {}
        }
    }
    cap.filter(|_| !granted.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounded(trust: &str, max: Option<&str>, labels: &[(&str, &str)]) -> Granted {
        Granted {
            trust: trust.into(),
            limits: Limits {
                max_ttl: max.map(|m| crate::resources::duration::parse(m).unwrap()),
                match_labels: labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                daemon_sets: false,
            },
        }
    }

    fn asked(secs: u64, labels: &BTreeMap<String, String>) -> Asked {
        Asked {
            ttl: Duration::from_secs(secs),
            match_labels: labels.clone(),
            daemon_sets: false,
        }
    }

    #[test]
    fn a_ttl_above_the_bound_is_refused_naming_the_trust() {
        let g = [bounded("shop/main", Some("1h"), &[])];
        any_admits(&g, &asked(3600, &BTreeMap::new())).unwrap();
        let err = any_admits(&g, &asked(3601, &BTreeMap::new())).unwrap_err();
        assert!(
            err.why.starts_with("ttl: ") && err.why.contains("shop/main"),
            "{err:?}"
        );
        assert_eq!(err.field, "ttl");
        // The caller hears its own ttl, not the bound nor the trust.
        assert_eq!(
            err.detail,
            "ttl: 1h1s is longer than the CI trusts granting this token allow"
        );
    }

    #[test]
    fn the_selector_bound_needs_its_labels_in_match_labels() {
        let g = [bounded("shop/main", None, &[("tier", "backend")])];
        let ok = BTreeMap::from([
            ("tier".to_string(), "backend".to_string()),
            ("app".to_string(), "api".to_string()),
        ]);
        any_admits(&g, &asked(60, &ok)).unwrap();
        let err = any_admits(&g, &asked(60, &BTreeMap::new())).unwrap_err();
        assert!(
            err.why
                .starts_with("selector: does not require tier=backend"),
            "{err:?}"
        );
        assert!(err.detail.starts_with("selector: "), "{err:?}");
        for secret in ["tier", "backend", "shop/main"] {
            assert!(!err.detail.contains(secret), "{secret}: {err:?}");
        }
    }

    #[test]
    fn any_granting_trust_whose_bounds_admit_is_enough() {
        let g = [
            bounded("shop/short", Some("10m"), &[]),
            bounded("shop/long", Some("2h"), &[]),
        ];
        any_admits(&g, &asked(3600, &BTreeMap::new())).unwrap();
        assert_eq!(ttl_cap(&g), Some(Duration::from_secs(7200)));
        let g = [
            bounded("shop/short", Some("10m"), &[]),
            bounded("shop/free", None, &[]),
        ];
        assert_eq!(ttl_cap(&g), None);
    }

    #[test]
    fn daemon_set_pods_need_the_trust_to_allow_them() {
        let mut g = bounded("shop/main", None, &[]);
        let mut ask = asked(60, &BTreeMap::new());
        any_admits(std::slice::from_ref(&g), &ask).unwrap();
        ask.daemon_sets = true;
        let err = any_admits(std::slice::from_ref(&g), &ask).unwrap_err();
        assert!(err.detail.starts_with("protect.daemonSets: "), "{err:?}");
        g.limits.daemon_sets = true;
        any_admits(std::slice::from_ref(&g), &ask).unwrap();
    }
}
