//! Label selectors evaluated in memory, exactly as the API server evaluates them for
//! `metav1.LabelSelector` (matchLabels AND every matchExpression): the one matcher of the
//! window controller (a window's pods, the PDBs over them) and the drain watcher (the PDB
//! that blocks a pod's eviction).
//!
//! Written here rather than through `kube::core::Selector`, which gives the same answers on
//! every selector the API server validates (the tests compare both on every case): it is built
//! from a `LabelSelector` by value, so each match would clone the selector's keys and values,
//! and this runs for every pod change against every window of its namespace. Evaluated in
//! place it allocates nothing. The two differ on a `NotIn` without values, which only a
//! `TestWindow` can carry (its schema checks the operators, not the values): kube refuses the
//! selector, this one reads it as excluding no value.
//!
//! [`contradiction`] tells a selector that can select nothing (the eviction webhook's
//! registration refuses one at start-up).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Whether `selector` selects an object with `labels`. An empty selector selects everything.
/// An expression with an unknown operator selects nothing (the CRD schema refuses those).
pub fn matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let labels_ok = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    labels_ok
        && selector.match_expressions.iter().flatten().all(|e| {
            let values = e.values.as_deref().unwrap_or_default();
            let value = labels.get(&e.key);
            match e.operator.as_str() {
                "In" => value.is_some_and(|v| values.contains(v)),
                "NotIn" => value.is_none_or(|v| !values.contains(v)),
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                _ => false,
            }
        })
}

/// Whether an optional selector (a PodDisruptionBudget's `spec.selector`) selects `labels`:
/// policy/v1 treats a missing selector as selecting nothing and `{}` as selecting everything.
pub fn optional_matches(
    selector: Option<&LabelSelector>,
    labels: &BTreeMap<String, String>,
) -> bool {
    selector.is_some_and(|s| matches(s, labels))
}

/// The first label key on which `selector` contradicts itself, so that it selects no object
/// whatever its labels: a key required to be absent and present, or whose required values
/// (`matchLabels`, `In`) are all ruled out (`In` sets that do not meet, `NotIn`). `None` when
/// some set of labels satisfies it. Expressions with an unknown operator are not considered.
pub fn contradiction(selector: &LabelSelector) -> Option<String> {
    /// What the requirements on one key say together.
    #[derive(Default)]
    struct Key {
        present: bool,
        absent: bool,
        /// The values the key may have, when some requirement lists them.
        allowed: Option<BTreeSet<String>>,
        excluded: BTreeSet<String>,
    }
    let mut keys: BTreeMap<&str, Key> = BTreeMap::new();
    fn allow(key: &mut Key, values: BTreeSet<String>) {
        key.present = true;
        key.allowed = Some(match key.allowed.take() {
            Some(before) => before.intersection(&values).cloned().collect(),
            None => values,
        });
    }
    for (k, v) in selector.match_labels.iter().flatten() {
        allow(keys.entry(k).or_default(), BTreeSet::from([v.clone()]));
    }
    for e in selector.match_expressions.iter().flatten() {
        let key = keys.entry(&e.key).or_default();
        let values = e.values.iter().flatten().cloned();
        match e.operator.as_str() {
            "In" => allow(key, values.collect()),
            "NotIn" => key.excluded.extend(values),
            "Exists" => key.present = true,
            "DoesNotExist" => key.absent = true,
            _ => {}
        }
    }
    keys.into_iter()
        .find(|(_, k)| {
            (k.present && k.absent)
                || k.allowed
                    .as_ref()
                    .is_some_and(|allowed| allowed.is_subset(&k.excluded))
        })
        .map(|(key, _)| key.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        }
    }

    #[test]
    fn an_empty_selector_selects_everything() {
        assert!(matches(&LabelSelector::default(), &labels(&[])));
        assert!(matches(&LabelSelector::default(), &labels(&[("a", "b")])));
    }

    #[test]
    fn match_labels_need_every_pair() {
        let s = LabelSelector {
            match_labels: Some(labels(&[("app", "api"), ("tier", "be")])),
            ..Default::default()
        };
        assert!(matches(
            &s,
            &labels(&[("app", "api"), ("tier", "be"), ("x", "y")])
        ));
        assert!(!matches(&s, &labels(&[("app", "api")])));
    }

    /// One expression of each operator.
    fn every_operator() -> LabelSelector {
        LabelSelector {
            match_expressions: Some(vec![
                expr("app", "In", &["api", "web"]),
                expr("canary", "DoesNotExist", &[]),
                expr("tier", "NotIn", &["db"]),
                expr("team", "Exists", &[]),
            ]),
            ..Default::default()
        }
    }

    #[test]
    fn expressions_follow_the_api_server_semantics() {
        let s = every_operator();
        assert!(matches(&s, &labels(&[("app", "web"), ("team", "a")])));
        assert!(!matches(&s, &labels(&[("app", "web")])));
        assert!(!matches(&s, &labels(&[("app", "db"), ("team", "a")])));
        assert!(!matches(
            &s,
            &labels(&[("app", "api"), ("team", "a"), ("canary", "1")])
        ));
        assert!(!matches(
            &s,
            &labels(&[("app", "api"), ("team", "a"), ("tier", "db")])
        ));
    }

    #[test]
    fn an_unknown_operator_selects_nothing() {
        let s = LabelSelector {
            match_expressions: Some(vec![expr("app", "Like", &["a"])]),
            ..Default::default()
        };
        assert!(!matches(&s, &labels(&[("app", "a")])));
    }

    /// kube's `Selector` (what the doc comment names as the alternative) answers the same on
    /// every case above.
    #[test]
    fn kube_selector_gives_the_same_answers() {
        use kube::core::{Selector, SelectorExt};
        let selectors = [
            LabelSelector::default(),
            LabelSelector {
                match_labels: Some(labels(&[("app", "api"), ("tier", "be")])),
                ..Default::default()
            },
            every_operator(),
        ];
        let cases = [
            labels(&[]),
            labels(&[("app", "api"), ("tier", "be"), ("x", "y")]),
            labels(&[("app", "web"), ("team", "a")]),
            labels(&[("app", "db"), ("team", "a")]),
            labels(&[("app", "api"), ("team", "a"), ("canary", "1")]),
            labels(&[("app", "api"), ("team", "a"), ("tier", "db")]),
        ];
        for s in &selectors {
            let theirs = Selector::try_from(s.clone()).unwrap();
            for l in &cases {
                assert_eq!(matches(s, l), theirs.matches(l), "{s:?} on {l:?}");
            }
        }
    }

    /// A `NotIn` without values (a `TestWindow`'s schema lets it through) excludes no value;
    /// kube's `Selector` refuses it, and with it the whole selector.
    #[test]
    fn a_not_in_without_values_excludes_no_value() {
        let s = LabelSelector {
            match_expressions: Some(vec![expr("tier", "NotIn", &[])]),
            ..Default::default()
        };
        assert!(matches(&s, &labels(&[("tier", "db")])));
        assert!(matches(&s, &labels(&[])));
        assert!(kube::core::Selector::try_from(s).is_err());
    }

    #[test]
    fn a_missing_pdb_selector_selects_nothing() {
        assert!(!optional_matches(None, &labels(&[("a", "b")])));
        assert!(optional_matches(
            Some(&LabelSelector::default()),
            &labels(&[])
        ));
    }

    #[test]
    fn a_selector_some_labels_satisfy_has_no_contradiction() {
        for s in [LabelSelector::default(), every_operator()] {
            assert_eq!(contradiction(&s), None, "{s:?}");
        }
        let s = LabelSelector {
            match_labels: Some(labels(&[("kubernetes.io/metadata.name", "shop")])),
            match_expressions: Some(vec![
                expr("kubernetes.io/metadata.name", "In", &["shop", "payments"]),
                expr("kubernetes.io/metadata.name", "NotIn", &["ci"]),
                expr("opt-out", "NotIn", &["false"]),
                expr("opt-out", "Exists", &[]),
            ]),
        };
        assert_eq!(contradiction(&s), None);
        assert!(matches(
            &s,
            &labels(&[("kubernetes.io/metadata.name", "shop"), ("opt-out", "true")])
        ));
    }

    #[test]
    fn a_key_no_value_can_satisfy_is_the_contradiction() {
        let name = "kubernetes.io/metadata.name";
        let cases = [
            // A value the opt-out rules out.
            (
                labels(&[("opt-out", "false")]),
                vec![expr("opt-out", "NotIn", &["false"])],
            ),
            // Sets that do not meet (a selector and --namespaces).
            (
                labels(&[(name, "shop")]),
                vec![expr(name, "In", &["payments"])],
            ),
            (
                labels(&[]),
                vec![expr(name, "In", &["a"]), expr(name, "In", &["b"])],
            ),
            // Present and absent.
            (
                labels(&[]),
                vec![
                    expr("team", "Exists", &[]),
                    expr("team", "DoesNotExist", &[]),
                ],
            ),
            (
                labels(&[("team", "a")]),
                vec![expr("team", "DoesNotExist", &[])],
            ),
        ];
        for (match_labels, expressions) in cases {
            let s = LabelSelector {
                match_labels: Some(match_labels),
                match_expressions: Some(expressions),
            };
            let key = contradiction(&s).unwrap_or_else(|| panic!("{s:?}"));
            assert!(["opt-out", name, "team"].contains(&key.as_str()), "{key}");
            // And indeed nothing is selected by the labels each part asks for.
            for l in [
                labels(&[("opt-out", "false"), (name, "shop"), ("team", "a")]),
                labels(&[(name, "payments")]),
                labels(&[(name, "a")]),
                labels(&[]),
            ] {
                assert!(!matches(&s, &l), "{s:?} on {l:?}");
            }
        }
    }
}
