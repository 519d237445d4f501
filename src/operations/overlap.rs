//! Whether two label selectors over pods can select a pod in common: the client's
//! `list -l SELECTOR` shows the windows that protect pods `SELECTOR` selects, as `-l` selects
//! pods in every client command. Decided from the selectors alone (no pod is read), so it
//! answers the same through the API and in direct mode, and for pods not created yet.
//!
//! Two selectors overlap when some set of labels satisfies both: for each key, the values both
//! allow (`=`, `in`) minus those either excludes (`!=`, `notin`) must not be empty, and a key
//! one requires (`=`, `in`, `exists`) must not be one the other forbids (`!key`). A key only
//! excluded or required to exist can always take a value nobody named. An expression with an
//! operator the API server does not know selects nothing, as in [`crate::k8s::selector`].

use std::collections::{BTreeMap, BTreeSet};

use super::types::SelectorObject;

/// What two selectors together ask of one label key.
#[derive(Debug, Default)]
struct KeyConstraint {
    /// The values it may take (`None`: any), the intersection of every `=` and `in`.
    allowed: Option<BTreeSet<String>>,
    /// Values it must not take.
    excluded: BTreeSet<String>,
    /// It must be present.
    present: bool,
    /// It must be absent.
    absent: bool,
}

impl KeyConstraint {
    fn allow(&mut self, values: BTreeSet<String>) {
        self.present = true;
        self.allowed = Some(match self.allowed.take() {
            Some(allowed) => allowed.intersection(&values).cloned().collect(),
            None => values,
        });
    }

    fn satisfiable(&self) -> bool {
        if self.absent {
            return !self.present;
        }
        match &self.allowed {
            Some(allowed) => allowed.iter().any(|v| !self.excluded.contains(v)),
            None => true,
        }
    }
}

/// Whether some pod can be selected by both `a` and `b` (an empty selector selects every pod).
pub fn overlap(a: &SelectorObject, b: &SelectorObject) -> bool {
    let mut keys: BTreeMap<&str, KeyConstraint> = BTreeMap::new();
    for selector in [a, b] {
        for (key, value) in &selector.match_labels {
            keys.entry(key)
                .or_default()
                .allow(BTreeSet::from([value.clone()]));
        }
        for e in &selector.match_expressions {
            let key = keys.entry(&e.key).or_default();
            match e.operator.as_str() {
                "In" => key.allow(e.values.iter().cloned().collect()),
                "NotIn" => key.excluded.extend(e.values.iter().cloned()),
                "Exists" => key.present = true,
                "DoesNotExist" => key.absent = true,
                _ => return false,
            }
        }
    }
    keys.values().all(KeyConstraint::satisfiable)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operations::selector::parse_text;

    fn both(a: &str, b: &str) -> bool {
        let (a, b) = (parse_text(a).unwrap(), parse_text(b).unwrap());
        let answer = overlap(&a, &b);
        assert_eq!(answer, overlap(&b, &a), "{a:?} and {b:?}: not symmetric");
        answer
    }

    #[test]
    fn an_empty_selector_overlaps_every_selector() {
        assert!(both("", "app=web"));
        assert!(both("", "!app"));
        assert!(both("", ""));
    }

    #[test]
    fn equal_values_overlap_and_different_ones_do_not() {
        assert!(both("app=web", "app=web"));
        assert!(!both("app=web", "app=db"));
        assert!(both("app=web", "tier=backend"));
        assert!(both("app=web,tier=backend", "tier=backend"));
        assert!(!both("app=web,tier=backend", "tier=frontend"));
    }

    #[test]
    fn sets_overlap_on_a_value_both_allow_that_neither_excludes() {
        assert!(both("app in (web,db)", "app=db"));
        assert!(!both("app in (web,db)", "app=cache"));
        assert!(both("app in (web,db)", "app in (db,cache)"));
        assert!(!both("app in (web,db)", "app notin (web,db)"));
        assert!(both("app in (web,db)", "app!=web"));
        assert!(!both("app=web", "app!=web"));
    }

    #[test]
    fn existence_conflicts_only_with_absence() {
        assert!(both("app", "app=web"));
        assert!(!both("app", "!app"));
        assert!(!both("app=web", "!app"));
        assert!(!both("app in (web)", "!app"));
        // An absent key satisfies `!=` and `notin`.
        assert!(both("!app", "app!=web"));
        assert!(both("!app", "app notin (web)"));
        assert!(both("app!=web", "app notin (db)"));
    }

    #[test]
    fn an_unknown_operator_selects_nothing() {
        let mut odd = parse_text("app").unwrap();
        odd.match_expressions[0].operator = "Gt".into();
        assert!(!overlap(&odd, &SelectorObject::default()));
    }
}
