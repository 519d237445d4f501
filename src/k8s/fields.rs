//! Reading `metadata.managedFields`: which annotations a field manager owns, which of the
//! guard's managers have written to an object, and trimming foreign entries from cached objects.
//!
//! Server-side apply records, per field manager, the fields it set. The window controller
//! writes with one manager per namespace (`disruption-guard/<namespace>`), so these entries are
//! the authoritative record of what each namespace's windows added, and survive any restart of
//! the operator.

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::resources::names::FIELD_MANAGER;

/// Annotation keys that `manager` owns on the object.
pub fn owned_annotations(meta: &ObjectMeta, manager: &str) -> BTreeSet<String> {
    meta.managed_fields
        .iter()
        .flatten()
        .filter(|m| m.manager.as_deref() == Some(manager))
        .filter_map(|m| m.fields_v1.as_ref())
        .filter_map(|f| f.0.get("f:metadata")?.get("f:annotations")?.as_object())
        .flat_map(|a| a.keys())
        .filter_map(|k| k.strip_prefix("f:"))
        .map(str::to_string)
        .collect()
}

/// Whether a manager other than `manager` owns the annotation `key`.
pub fn others_own_annotation(meta: &ObjectMeta, manager: &str, key: &str) -> bool {
    let field = format!("f:{key}");
    meta.managed_fields
        .iter()
        .flatten()
        .filter(|m| m.manager.as_deref() != Some(manager))
        .filter_map(|m| m.fields_v1.as_ref())
        .any(|f| {
            f.0.get("f:metadata")
                .and_then(|m| m.get("f:annotations"))
                .is_some_and(|a| a.get(&field).is_some())
        })
}

/// Whether `manager` has any entry on the object.
pub fn has_manager(meta: &ObjectMeta, manager: &str) -> bool {
    meta.managed_fields
        .iter()
        .flatten()
        .any(|m| m.manager.as_deref() == Some(manager))
}

/// What follows `disruption-guard/` in each of the guard's field managers on the object: a
/// namespace, or the UID of a window of an earlier version.
pub fn guard_managers(meta: &ObjectMeta) -> BTreeSet<String> {
    let prefix = format!("{FIELD_MANAGER}/");
    meta.managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.as_deref()?.strip_prefix(&prefix))
        .filter(|suffix| !suffix.is_empty())
        .map(str::to_string)
        .collect()
}

/// Whether `manager` holds at least one field of the object (an entry with a non-empty field
/// set; the API server keeps no entry for a manager that holds nothing, but a hand-made or
/// older object might).
pub fn holds_fields(meta: &ObjectMeta, manager: &str) -> bool {
    meta.managed_fields
        .iter()
        .flatten()
        .filter(|m| m.manager.as_deref() == Some(manager))
        .filter_map(|m| m.fields_v1.as_ref())
        .any(|f| f.0.as_object().is_some_and(|o| !o.is_empty()))
}

/// Whether `manager` holds the label `key`.
pub fn holds_label(meta: &ObjectMeta, manager: &str, key: &str) -> bool {
    let field = format!("f:{key}");
    meta.managed_fields
        .iter()
        .flatten()
        .filter(|m| m.manager.as_deref() == Some(manager))
        .filter_map(|m| m.fields_v1.as_ref())
        .any(|f| {
            f.0.get("f:metadata")
                .and_then(|m| m.get("f:labels"))
                .is_some_and(|l| l.get(&field).is_some())
        })
}

/// Drops every managedFields entry that is not the guard's, so caches of pods and nodes stay
/// small; the guard's entries are all the controller reads.
pub fn keep_own_entries(meta: &mut ObjectMeta) {
    if let Some(entries) = meta.managed_fields.as_mut() {
        entries.retain(|m| {
            m.manager
                .as_deref()
                .is_some_and(|name| name.starts_with(FIELD_MANAGER))
        });
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
    use serde_json::json;

    /// A managedFields entry of `manager` owning annotation `keys`.
    pub fn entry(manager: &str, keys: &[&str]) -> ManagedFieldsEntry {
        let annotations: serde_json::Map<_, _> =
            keys.iter().map(|k| (format!("f:{k}"), json!({}))).collect();
        ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some("Apply".into()),
            fields_type: Some("FieldsV1".into()),
            fields_v1: Some(FieldsV1(
                json!({"f:metadata": {"f:annotations": annotations}}),
            )),
            ..Default::default()
        }
    }

    /// A managedFields entry of `manager` holding exactly `fields` (a FieldsV1 tree).
    pub fn entry_with(manager: &str, fields: serde_json::Value) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some("Apply".into()),
            fields_type: Some("FieldsV1".into()),
            fields_v1: Some(FieldsV1(fields)),
            ..Default::default()
        }
    }

    #[test]
    fn only_managers_with_fields_hold_and_labels_are_read_per_manager() {
        let label = json!({"f:metadata": {"f:labels": {"f:app.kubernetes.io/managed-by": {}}}});
        let meta = ObjectMeta {
            managed_fields: Some(vec![
                entry_with(
                    "disruption-guard/a",
                    json!({"f:spec": {"f:maxUnavailable": {}}}),
                ),
                entry_with("disruption-guard/b", json!({})),
                entry_with("disruption-guard", label),
            ]),
            ..Default::default()
        };
        assert!(holds_fields(&meta, "disruption-guard/a"));
        assert!(!holds_fields(&meta, "disruption-guard/b"));
        assert!(!holds_fields(&meta, "disruption-guard/c"));
        let key = "app.kubernetes.io/managed-by";
        assert!(holds_label(&meta, "disruption-guard", key));
        assert!(!holds_label(&meta, "disruption-guard/a", key));
        assert!(!holds_label(&meta, "disruption-guard", "other"));
    }

    #[test]
    fn owned_annotations_reads_only_the_named_manager() {
        let meta = ObjectMeta {
            managed_fields: Some(vec![
                entry("disruption-guard/a", &["karpenter.sh/do-not-disrupt"]),
                entry("kubectl-annotate", &["x"]),
            ]),
            ..Default::default()
        };
        assert_eq!(
            owned_annotations(&meta, "disruption-guard/a"),
            BTreeSet::from(["karpenter.sh/do-not-disrupt".to_string()])
        );
        assert!(owned_annotations(&meta, "disruption-guard/b").is_empty());
    }

    #[test]
    fn guard_managers_lists_every_namespace_or_window_manager_but_not_the_base_one() {
        let meta = ObjectMeta {
            managed_fields: Some(vec![
                entry("disruption-guard/a", &[]),
                entry("disruption-guard", &[]),
                entry("disruption-guard/b", &[]),
                entry("kubectl", &[]),
            ]),
            ..Default::default()
        };
        assert_eq!(
            guard_managers(&meta),
            BTreeSet::from(["a".to_string(), "b".to_string()])
        );
    }

    #[test]
    fn keep_own_entries_drops_foreign_managers() {
        let mut meta = ObjectMeta {
            managed_fields: Some(vec![
                entry("disruption-guard/a", &[]),
                entry("kubelet", &[]),
            ]),
            ..Default::default()
        };
        keep_own_entries(&mut meta);
        assert_eq!(meta.managed_fields.unwrap().len(), 1);
    }
}
