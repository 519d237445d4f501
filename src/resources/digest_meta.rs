//! Reading an object's `metadata` for a cache without ever building what the cache drops.
//!
//! Every write to an object leaves a `managedFields` entry whose `fieldsV1` is a tree of every
//! field the writer set — for a pod that kwok or the kubelet updates, several entries of dozens
//! of nested maps. Deserialized as `serde_json::Value`s only to be trimmed away, they are most of
//! the allocations of a listed pod, and the holes they leave behind among the kept fields stay
//! resident. Here an entry's `fieldsV1` is read only for what the guard looks up (the annotation
//! keys its manager owns), and entries of other managers are dropped as they are read. Of the
//! annotations only those the operator reads are kept; the others' values are skipped unread.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    FieldsV1, ManagedFieldsEntry, ObjectMeta, OwnerReference, Time,
};
use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::{Map, Value};

use crate::resources::names::{FIELD_MANAGER, read_by_the_guard};

/// The metadata fields a cached object keeps.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    generation: Option<i64>,
    creation_timestamp: Option<Time>,
    deletion_timestamp: Option<Time>,
    labels: Option<BTreeMap<String, String>>,
    annotations: Option<ReadAnnotations>,
    owner_references: Option<Vec<OwnerReference>>,
    finalizers: Option<Vec<String>>,
    managed_fields: Option<Vec<Entry>>,
}

/// The annotations the operator reads ([`read_by_the_guard`]); the values of the others are
/// skipped as they are read, never allocated.
struct ReadAnnotations(BTreeMap<String, String>);

impl<'de> Deserialize<'de> for ReadAnnotations {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Keep;
        impl<'de> Visitor<'de> for Keep {
            type Value = BTreeMap<String, String>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map of annotations")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut kept = BTreeMap::new();
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    if read_by_the_guard(&key) {
                        kept.insert(key.into_owned(), map.next_value::<String>()?);
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(kept)
            }
        }
        d.deserialize_map(Keep).map(ReadAnnotations)
    }
}

/// A managedFields entry with only the annotation keys of its `fieldsV1`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Entry {
    manager: Option<String>,
    operation: Option<String>,
    api_version: Option<String>,
    time: Option<Time>,
    fields_type: Option<String>,
    subresource: Option<String>,
    #[serde(rename = "fieldsV1")]
    fields_v1: Option<AnnotationKeys>,
}

/// The keys under `f:metadata.f:annotations` of a `fieldsV1` tree (with their `f:` prefix).
struct AnnotationKeys(Vec<String>);

impl<'de> Deserialize<'de> for AnnotationKeys {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        /// Walks `path` down the maps and collects the keys of the map at its end.
        struct Walk<'p>(&'p [&'p str]);
        impl<'de> Visitor<'de> for Walk<'_> {
            type Value = Vec<String>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a fieldsV1 map")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Vec<String>, A::Error> {
                let mut keys = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    match self.0 {
                        [] => {
                            map.next_value::<IgnoredAny>()?;
                            keys.push(key);
                        }
                        [next, rest @ ..] if key == *next => {
                            keys = map.next_value_seed(Seed(rest))?;
                        }
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(keys)
            }
        }
        struct Seed<'p>(&'p [&'p str]);
        impl<'de> serde::de::DeserializeSeed<'de> for Seed<'_> {
            type Value = Vec<String>;
            fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<String>, D::Error> {
                d.deserialize_map(Walk(self.0))
            }
        }
        d.deserialize_map(Walk(&["f:metadata", "f:annotations"]))
            .map(AnnotationKeys)
    }
}

impl Entry {
    fn into_entry(self) -> ManagedFieldsEntry {
        let fields_v1 = self.fields_v1.filter(|k| !k.0.is_empty()).map(|keys| {
            let annotations: Map<String, Value> = keys
                .0
                .into_iter()
                .map(|k| (k, Value::Object(Map::new())))
                .collect();
            FieldsV1(serde_json::json!({"f:metadata": {"f:annotations": annotations}}))
        });
        ManagedFieldsEntry {
            api_version: self.api_version,
            fields_type: self.fields_type,
            fields_v1,
            manager: self.manager,
            operation: self.operation,
            subresource: self.subresource,
            time: self.time,
        }
    }
}

/// `deserialize_with` for a cached object's `metadata`: the fields a cache keeps, with only the
/// guard's own managedFields entries (annotation keys only).
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let meta = Meta::deserialize(d)?;
    let own: Vec<ManagedFieldsEntry> = meta
        .managed_fields
        .into_iter()
        .flatten()
        .filter(|e| {
            e.manager
                .as_deref()
                .is_some_and(|m| m.starts_with(FIELD_MANAGER))
        })
        .map(Entry::into_entry)
        .collect();
    Ok(ObjectMeta {
        name: meta.name,
        namespace: meta.namespace,
        uid: meta.uid,
        resource_version: meta.resource_version,
        generation: meta.generation,
        creation_timestamp: meta.creation_timestamp,
        deletion_timestamp: meta.deletion_timestamp,
        labels: meta.labels,
        annotations: meta.annotations.map(|a| a.0).filter(|a| !a.is_empty()),
        owner_references: meta.owner_references,
        finalizers: meta.finalizers,
        managed_fields: (!own.is_empty()).then_some(own),
        ..ObjectMeta::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::fields::{guard_managers, owned_annotations};
    use serde_json::json;

    #[derive(Deserialize)]
    struct Object {
        #[serde(deserialize_with = "deserialize")]
        metadata: ObjectMeta,
    }

    fn read(meta: Value) -> ObjectMeta {
        serde_json::from_value::<Object>(json!({ "metadata": meta }))
            .unwrap()
            .metadata
    }

    #[test]
    fn only_the_guards_entries_are_kept_with_their_annotation_keys() {
        let meta = read(json!({
            "name": "api-1", "namespace": "shop", "uid": "u1", "resourceVersion": "7",
            "labels": {"app": "api"}, "annotations": {"karpenter.sh/do-not-disrupt": "true"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "api-1", "uid": "r1", "controller": true}],
            "managedFields": [
                {"manager": "kwok", "operation": "Update", "subresource": "status", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {".": {}, "f:status": {}}}}}},
                {"manager": "disruption-guard/w1", "operation": "Apply", "fieldsType": "FieldsV1",
                 "time": "2026-01-01T00:00:00Z",
                 "fieldsV1": {"f:metadata": {"f:labels": {"f:x": {}},
                                             "f:annotations": {"f:karpenter.sh/do-not-disrupt": {}, "f:cluster-autoscaler.kubernetes.io/safe-to-evict": {}}}}},
                {"manager": "kubectl-annotate", "operation": "Update",
                 "fieldsV1": {"f:metadata": {"f:annotations": {"f:note": {}}}}}
            ]
        }));
        assert_eq!(meta.name.as_deref(), Some("api-1"));
        assert_eq!(meta.resource_version.as_deref(), Some("7"));
        assert_eq!(meta.labels.as_ref().unwrap()["app"], "api");
        assert_eq!(meta.owner_references.as_ref().unwrap()[0].uid, "r1");
        let entries = meta.managed_fields.as_ref().unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].operation.as_deref(), Some("Apply"));
        assert!(entries[0].time.is_some());
        assert_eq!(
            owned_annotations(&meta, "disruption-guard/w1"),
            [
                "cluster-autoscaler.kubernetes.io/safe-to-evict",
                "karpenter.sh/do-not-disrupt"
            ]
            .into_iter()
            .map(String::from)
            .collect()
        );
        assert_eq!(
            guard_managers(&meta).into_iter().collect::<Vec<_>>(),
            ["w1"]
        );
    }

    #[test]
    fn no_guard_entries_read_as_no_managed_fields() {
        let meta = read(
            json!({"name": "p", "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]}),
        );
        assert!(meta.managed_fields.is_none());
        assert!(read(json!({"name": "p"})).managed_fields.is_none());
    }

    #[test]
    fn a_guard_entry_without_annotations_still_names_its_window() {
        let meta = read(
            json!({"managedFields": [{"manager": "disruption-guard/w2", "fieldsV1": {"f:metadata": {"f:labels": {}}}}]}),
        );
        assert_eq!(
            guard_managers(&meta).into_iter().collect::<Vec<_>>(),
            ["w2"]
        );
        assert!(owned_annotations(&meta, "disruption-guard/w2").is_empty());
    }
}
