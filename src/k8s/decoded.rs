//! Decoding what the API server sends one object at a time: [`Decoded<K>`] reads one object of
//! a list or a watch event so that an object the operator cannot represent never fails the
//! list it came in.
//!
//! Anyone who may write an object can store values that are valid for the API server and out
//! of range for the operator's types: a time of year 9999 (valid RFC 3339, past what
//! Kubernetes' own time type, and so `jiff`, represents), a number past `i64`. Decoded as part
//! of a list, one such object fails the whole list, and a watch that cannot list stops for
//! good: one tenant's object would blind every cache of that kind. Here each object is first
//! captured as raw JSON (one copy, freed once decoded), then decoded alone:
//!
//! - it decodes: [`Decoded::Object`], at once trimmed to what its kind's caches keep
//!   ([`Keep`]), so no more than one object's dropped fields are held at a time;
//! - it decodes once its times are brought into range (a time past the last representable
//!   instant, late on 9999-12-30, becomes that instant; a leap second `…:60` becomes `…:59`):
//!   [`Decoded::Clamped`], kept, and reported;
//! - it still does not: [`Decoded::Refused`], with its name, namespace, uid and version (read
//!   on their own) and the reason; the caller drops it from its cache and reports it.
//!
//! Labels and annotations are never clamped: they are strings to every reader.

use std::borrow::Cow;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::de::{DeserializeOwned, Deserializer};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use super::trim::Keep;

/// One object as read from the API server.
#[derive(Clone, Debug)]
pub enum Decoded<K> {
    /// The object, as sent.
    Object(K),
    /// The object, with the times named in `clamped` brought into range.
    Clamped {
        object: K,
        /// The values that were out of range, as sent (at most a few).
        clamped: Vec<String>,
    },
    /// An object that cannot be represented: what identifies it, and why (boxed: rare).
    Refused(Box<Refused>),
}

/// An object that was not decoded: its identity (as far as it could be read) and the reason.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Refused {
    /// Name, namespace, uid and resourceVersion, read on their own.
    pub metadata: ObjectMeta,
    /// The decoding error, shortened.
    pub reason: String,
}

/// The longest reason kept: a decoding error quotes the value it failed on, and that value is
/// a tenant's.
const MAX_REASON: usize = 300;
/// Values listed in [`Decoded::Clamped::clamped`], at most.
const MAX_CLAMPED_LISTED: usize = 4;

impl<K> Decoded<K> {
    /// The object, when it could be decoded (clamped or not).
    pub fn into_object(self) -> Result<K, Box<Refused>> {
        match self {
            Decoded::Object(object) | Decoded::Clamped { object, .. } => Ok(object),
            Decoded::Refused(refused) => Err(refused),
        }
    }
}

impl<K: DeserializeOwned + Keep> Decoded<K> {
    /// Decodes one object from its JSON text, keeping of it what the caches keep ([`Keep`]).
    pub fn from_json(text: &str) -> Self {
        let first = match serde_json::from_str::<K>(text) {
            Ok(mut object) => {
                object.keep();
                return Decoded::Object(object);
            }
            Err(error) => error,
        };
        let refused = |reason: &dyn std::fmt::Display| {
            Decoded::Refused(Box::new(Refused {
                metadata: identity(text),
                reason: reason.to_string().chars().take(MAX_REASON).collect(),
            }))
        };
        let Ok(mut value) = serde_json::from_str::<Value>(text) else {
            return refused(&first);
        };
        let mut clamped = Vec::new();
        clamp_times(&mut value, &mut clamped);
        if clamped.is_empty() {
            return refused(&first);
        }
        match serde_json::from_value::<K>(value) {
            Ok(mut object) => {
                object.keep();
                clamped.truncate(MAX_CLAMPED_LISTED);
                Decoded::Clamped { object, clamped }
            }
            Err(_) => refused(&first),
        }
    }
}

impl<'de, K: DeserializeOwned + Keep> Deserialize<'de> for Decoded<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Only the JSON syntax can fail the list; the object's contents fail only itself.
        let raw = Box::<RawValue>::deserialize(d)?;
        Ok(Self::from_json(raw.get()))
    }
}

/// Never sent: the operator writes with its own types. Present because kube's `Api` asks for
/// it on writes; a refused object serializes as its metadata alone.
impl<K: Serialize> Serialize for Decoded<K> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Decoded::Object(object) | Decoded::Clamped { object, .. } => object.serialize(s),
            Decoded::Refused(refused) => {
                #[derive(Serialize)]
                struct Meta<'a> {
                    metadata: &'a ObjectMeta,
                }
                Meta {
                    metadata: &refused.metadata,
                }
                .serialize(s)
            }
        }
    }
}

impl<K: Resource> Resource for Decoded<K> {
    type DynamicType = K::DynamicType;
    type Scope = K::Scope;

    fn kind(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::version(dt)
    }
    fn api_version(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::api_version(dt)
    }
    fn plural(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::plural(dt)
    }
    fn metadata_api() -> bool {
        K::metadata_api()
    }
    fn meta(&self) -> &ObjectMeta {
        match self {
            Decoded::Object(object) | Decoded::Clamped { object, .. } => object.meta(),
            Decoded::Refused(refused) => &refused.metadata,
        }
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        match self {
            Decoded::Object(object) | Decoded::Clamped { object, .. } => object.meta_mut(),
            Decoded::Refused(refused) => &mut refused.metadata,
        }
    }
}

/// The name, namespace, uid and resourceVersion of an object that did not decode, each read
/// on its own (a field that is not a string is left out).
fn identity(text: &str) -> ObjectMeta {
    #[derive(Deserialize)]
    struct Outer {
        #[serde(default)]
        metadata: Option<Value>,
    }
    let field = |meta: &Value, key: &str| {
        meta.get(key)
            .and_then(Value::as_str)
            .map(|s| s.chars().take(253).collect::<String>())
    };
    let meta = serde_json::from_str::<Outer>(text)
        .ok()
        .and_then(|o| o.metadata)
        .unwrap_or(Value::Null);
    ObjectMeta {
        name: field(&meta, "name"),
        namespace: field(&meta, "namespace"),
        uid: field(&meta, "uid"),
        resource_version: field(&meta, "resourceVersion"),
        ..ObjectMeta::default()
    }
}

/// Brings every RFC 3339 time in `value` that `jiff` cannot represent into range, in place,
/// noting each value it changed in `clamped`. Labels and annotations are left alone.
fn clamp_times(value: &mut Value, clamped: &mut Vec<String>) {
    match value {
        Value::String(text) => {
            if let Some(fixed) = clamp_time(text) {
                clamped.push(std::mem::replace(text, fixed));
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| clamp_times(v, clamped)),
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                if key != "labels" && key != "annotations" {
                    clamp_times(v, clamped);
                }
            }
        }
        _ => {}
    }
}

/// The time `text` stands for, brought into range, when it has the shape of an RFC 3339 time
/// (`YYYY-MM-DDTHH:MM:SS…`) that `jiff` refuses; `None` for anything else.
pub fn clamp_time(text: &str) -> Option<String> {
    let b = text.as_bytes();
    let digits = |range: std::ops::Range<usize>| range.into_iter().all(|i| b[i].is_ascii_digit());
    let shaped = b.len() >= 20
        && b.len() <= 40
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && matches!(b[10], b'T' | b't')
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19);
    if !shaped || text.parse::<Timestamp>().is_ok() {
        return None;
    }
    if &text[17..19] == "60" {
        let fixed = format!("{}59{}", &text[..17], &text[19..]);
        if fixed.parse::<Timestamp>().is_ok() {
            return Some(fixed);
        }
    }
    // Four-digit years from 0000 are all representable but the last hours of 9999.
    (&text[..4] == "9999").then(|| Timestamp::MAX.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::Deployment;
    use kube::core::ObjectList;

    fn deployment(name: &str, time: &str) -> String {
        format!(
            r#"{{"apiVersion":"apps/v1","kind":"Deployment","metadata":{{"name":"{name}","namespace":"a",
            "uid":"u-{name}","resourceVersion":"7","creationTimestamp":"2026-01-01T00:00:00Z",
            "annotations":{{"disruption-guard.io/note":"{time}"}},
            "managedFields":[{{"manager":"disruption-guard/w","operation":"Apply","time":"{time}"}}]}},
            "spec":{{"replicas":1,"selector":{{"matchLabels":{{"app":"{name}"}}}},"template":{{}}}}}}"#
        )
    }

    fn list(items: &[String]) -> String {
        format!(
            r#"{{"apiVersion":"v1","kind":"List","metadata":{{"resourceVersion":"9"}},"items":[{}]}}"#,
            items.join(",")
        )
    }

    #[test]
    fn a_time_past_the_last_representable_instant_fails_a_plain_list_but_only_clamps_its_object() {
        let items = [
            deployment("good", "2026-01-01T00:00:00Z"),
            deployment("edge", "9999-12-31T23:59:59Z"),
        ];
        let text = list(&items);
        assert!(serde_json::from_str::<ObjectList<Deployment>>(&text).is_err());
        let decoded: ObjectList<Decoded<Deployment>> = serde_json::from_str(&text).unwrap();
        assert!(matches!(decoded.items[0], Decoded::Object(_)));
        let Decoded::Clamped { object, clamped } = &decoded.items[1] else {
            panic!("not clamped: {:?}", decoded.items[1]);
        };
        assert_eq!(clamped, &["9999-12-31T23:59:59Z"]);
        let entry = &object.metadata.managed_fields.as_ref().unwrap()[0];
        assert_eq!(entry.time.as_ref().unwrap().0, Timestamp::MAX);
        // The annotation, a plain string to every reader, is kept as sent.
        assert_eq!(
            object.metadata.annotations.as_ref().unwrap()["disruption-guard.io/note"],
            "9999-12-31T23:59:59Z"
        );
    }

    #[test]
    fn the_end_of_year_9999_and_leap_seconds_are_clamped_and_early_years_are_kept() {
        assert_eq!(clamp_time("0000-01-01T00:00:00Z"), None);
        assert_eq!(clamp_time("0001-01-01T00:00:00Z"), None);
        assert_eq!(
            clamp_time("9999-12-31T23:59:59.999999999+00:00"),
            Some(Timestamp::MAX.to_string())
        );
        let leap = clamp_time("2016-12-31T23:59:60Z");
        assert!(
            leap.is_none() || leap.as_deref() == Some("2016-12-31T23:59:59Z"),
            "{leap:?}"
        );
        assert_eq!(clamp_time("not a time"), None);
        assert_eq!(clamp_time("2026-13-01T00:00:00Z"), None);
    }

    #[test]
    fn an_object_that_cannot_be_represented_is_refused_alone_with_its_identity() {
        let bad = deployment("bad", "2026-01-01T00:00:00Z")
            .replace(r#""replicas":1"#, r#""replicas":99999999999999999999999"#);
        let items = [deployment("good", "2026-01-01T00:00:00Z"), bad];
        let decoded: ObjectList<Decoded<Deployment>> = serde_json::from_str(&list(&items)).unwrap();
        assert!(matches!(decoded.items[0], Decoded::Object(_)));
        let Decoded::Refused(refused) = &decoded.items[1] else {
            panic!("not refused: {:?}", decoded.items[1]);
        };
        assert_eq!(refused.metadata.name.as_deref(), Some("bad"));
        assert_eq!(refused.metadata.namespace.as_deref(), Some("a"));
        assert_eq!(refused.metadata.uid.as_deref(), Some("u-bad"));
        assert_eq!(refused.metadata.resource_version.as_deref(), Some("7"));
        assert!(refused.reason.len() <= MAX_REASON);
        assert_eq!(decoded.items[1].meta().name.as_deref(), Some("bad"));
    }

    #[test]
    fn a_watch_event_carries_its_object_decoded_alone() {
        let line = format!(
            r#"{{"type":"MODIFIED","object":{}}}"#,
            deployment("edge", "9999-12-31T23:59:59Z")
        );
        let event: kube::core::WatchEvent<Decoded<Deployment>> =
            serde_json::from_str(&line).unwrap();
        assert!(matches!(
            event,
            kube::core::WatchEvent::Modified(Decoded::Clamped { .. })
        ));
    }

    #[test]
    fn a_reason_quoting_a_long_value_is_shortened() {
        let long = "x".repeat(100_000);
        let bad = deployment("bad", "2026-01-01T00:00:00Z")
            .replace(r#""replicas":1"#, &format!(r#""replicas":"{long}""#));
        let Decoded::<Deployment>::Refused(refused) = Decoded::from_json(&bad) else {
            panic!("decoded");
        };
        assert!(refused.reason.chars().count() <= MAX_REASON);
    }
}
