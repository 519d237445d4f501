//! What the operator does with an object it read but could not represent
//! ([`crate::k8s::decoded`]): every watch and list reads objects one at a time, keeps those it
//! can (times clamped into range), drops the others from its cache, and reports each, so one
//! tenant's object costs only itself.
//!
//! A report is a log line, a count in `disruption_guard_objects_refused_total{cache, outcome}`
//! (`outcome` is `clamped` or `dropped`) and a Warning Event on the object
//! (`ObjectRefused`/`ObjectClamped`), once per version of the object: a re-list that reads the
//! same version again counts it again but does not write another Event.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock};

use futures::{Stream, StreamExt, future};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;
use kube::runtime::events::EventType;
use kube::runtime::watcher;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tracing::warn;

use super::Readiness;
use super::events::{Events, Note};
use crate::k8s::decoded::Decoded;
use crate::k8s::stub::Stub;

/// Versions remembered as reported, at most; past that the memory is cleared (an Event may
/// then be written once more).
const REMEMBERED: usize = 4096;

/// The labels of `disruption_guard_objects_refused_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Labels {
    /// The cache (watch) that read the object: `deployments`, `testwindows`, …
    cache: &'static str,
    /// `clamped` (kept, a time brought into range) or `dropped` (left out of the cache).
    outcome: &'static str,
}

/// `disruption_guard_objects_refused_total`, registered by the wiring.
#[derive(Clone, Default)]
pub struct RefusalMetrics(Family<Labels, Counter>);

impl RefusalMetrics {
    /// Registers the counter.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "objects_refused",
            "Objects read from the API server that the operator could not represent: clamped (a time brought into range, kept) or dropped (left out of its cache)",
            self.0.clone(),
        );
    }
}

/// Reports objects that were clamped or dropped; shared by every watch of a replica (held by
/// its [`Readiness`], which every watch is handed).
#[derive(Default)]
pub struct Refusals {
    counted: Family<Labels, Counter>,
    events: OnceLock<Events>,
    reported: Mutex<HashSet<(String, String)>>,
}

impl std::fmt::Debug for Refusals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Refusals").finish_non_exhaustive()
    }
}

impl Refusals {
    /// Reports counted in `metrics`.
    pub fn counting(metrics: &RefusalMetrics) -> Self {
        Self {
            counted: metrics.0.clone(),
            ..Self::default()
        }
    }

    /// From now on, reports also write Events with `events`.
    pub fn publish_with(&self, events: Events) {
        let _ = self.events.set(events);
    }

    /// How many objects `cache` has reported with `outcome` (`clamped` or `dropped`).
    pub fn count(&self, cache: &'static str, outcome: &'static str) -> u64 {
        self.counted.get_or_create(&Labels { cache, outcome }).get()
    }

    /// Reports `decoded` (read by the watch or list `cache`) if it was clamped or refused.
    pub fn note<K: Resource>(
        &self,
        cache: &'static str,
        dt: &K::DynamicType,
        decoded: &Decoded<K>,
    ) {
        let (outcome, reason, action, meta, note) = match decoded {
            Decoded::Object(_) => return,
            Decoded::Clamped { object, clamped } => (
                "clamped",
                "ObjectClamped",
                "Clamp",
                object.meta(),
                format!(
                    "times out of the range the operator represents were read as the nearest it can: {}",
                    clamped.join(", ")
                ),
            ),
            Decoded::Refused(refused) => (
                "dropped",
                "ObjectRefused",
                "Refuse",
                &refused.metadata,
                format!(
                    "the operator cannot read this object and leaves it out: {}",
                    refused.reason
                ),
            ),
        };
        self.counted.get_or_create(&Labels { cache, outcome }).inc();
        warn!(
            cache, outcome,
            namespace = meta.namespace.as_deref().unwrap_or_default(),
            name = meta.name.as_deref().unwrap_or_default(),
            %note,
            "an object read from the API server is out of range"
        );
        let (Some(events), Some(uid), Some(name)) = (self.events.get(), &meta.uid, &meta.name)
        else {
            return;
        };
        let version = meta.resource_version.clone().unwrap_or_default();
        {
            let mut reported = self.reported.lock().expect("refusals lock");
            if reported.len() >= REMEMBERED {
                reported.clear();
            }
            if !reported.insert((uid.clone(), version)) {
                return;
            }
        }
        let regarding = ObjectReference {
            api_version: Some(K::api_version(dt).into_owned()),
            kind: Some(K::kind(dt).into_owned()),
            name: Some(name.clone()),
            namespace: meta.namespace.clone(),
            uid: Some(uid.clone()),
            ..ObjectReference::default()
        };
        events.publish(
            &regarding,
            Note {
                type_: EventType::Warning,
                reason,
                action,
                note,
                secondary: None,
            },
        );
    }
}

/// A watch of decoded objects as a watch of the objects the operator can represent: each one
/// clamped or refused is reported; a refused one is left out of a list and, when a change made
/// it unreadable, reported to the store as deleted, so no cache keeps a version the API server
/// no longer holds.
pub fn readable<K, S>(
    cache: &'static str,
    dt: K::DynamicType,
    ready: Arc<Readiness>,
    events: S,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + use<K, S>
where
    K: Stub + Send + 'static,
    K::DynamicType: Clone,
    S: Stream<Item = Result<watcher::Event<Decoded<K>>, watcher::Error>> + Send,
{
    events.filter_map(move |event| {
        let event = event.map(|event| readable_event(cache, &dt, &ready.refusals, event));
        future::ready(event.transpose())
    })
}

/// The items of a list read one at a time ([`Decoded`]) that the operator can represent; the
/// others are reported to `refusals` as read by `cache` and left out.
pub fn readable_items<K: Resource>(
    cache: &'static str,
    dt: &K::DynamicType,
    refusals: &Refusals,
    items: Vec<Decoded<K>>,
) -> Vec<K> {
    items
        .into_iter()
        .filter_map(|decoded| {
            refusals.note(cache, dt, &decoded);
            decoded.into_object().ok()
        })
        .collect()
}

/// One event of [`readable`]; `None` when nothing is left of it.
fn readable_event<K: Stub>(
    cache: &'static str,
    dt: &K::DynamicType,
    refusals: &Refusals,
    event: watcher::Event<Decoded<K>>,
) -> Option<watcher::Event<K>> {
    let object = |decoded: Decoded<K>| {
        refusals.note(cache, dt, &decoded);
        decoded.into_object()
    };
    Some(match event {
        watcher::Event::Apply(d) => match object(d) {
            Ok(k) => watcher::Event::Apply(k),
            Err(refused) => watcher::Event::Delete(K::stub(refused.metadata, dt)),
        },
        watcher::Event::InitApply(d) => watcher::Event::InitApply(object(d).ok()?),
        watcher::Event::Delete(d) => watcher::Event::Delete(match d.into_object() {
            Ok(k) => k,
            Err(refused) => K::stub(refused.metadata, dt),
        }),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitDone => watcher::Event::InitDone,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::decoded::Refused;
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn refused(name: &str) -> Decoded<Deployment> {
        Decoded::Refused(Box::new(Refused {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("a".into()),
                uid: Some("u".into()),
                ..ObjectMeta::default()
            },
            reason: "number out of range".into(),
        }))
    }

    fn named(name: &str) -> Deployment {
        Deployment {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("a".into()),
                ..ObjectMeta::default()
            },
            ..Deployment::default()
        }
    }

    #[test]
    fn a_refused_object_is_left_out_of_a_list_and_deleted_by_a_change_and_counted() {
        let refusals = Refusals::default();
        let listed = readable_event(
            "deployments",
            &(),
            &refusals,
            watcher::Event::InitApply(refused("bad")),
        );
        assert!(listed.is_none());
        let changed = readable_event(
            "deployments",
            &(),
            &refusals,
            watcher::Event::Apply(refused("bad")),
        );
        let Some(watcher::Event::Delete(stub)) = changed else {
            panic!("not a delete: {changed:?}");
        };
        assert_eq!(stub.metadata.name.as_deref(), Some("bad"));
        assert_eq!(refusals.count("deployments", "dropped"), 2);
        let good = readable_event(
            "deployments",
            &(),
            &refusals,
            watcher::Event::Apply(Decoded::Object(named("good"))),
        );
        assert!(
            matches!(good, Some(watcher::Event::Apply(d)) if d.metadata.name.as_deref() == Some("good"))
        );
        assert_eq!(refusals.count("deployments", "dropped"), 2);
    }

    #[test]
    fn a_clamped_object_is_kept_and_counted() {
        let refusals = Refusals::default();
        let clamped = Decoded::Clamped {
            object: named("edge"),
            clamped: vec!["9999-12-31T23:59:59Z".into()],
        };
        let kept = readable_event(
            "deployments",
            &(),
            &refusals,
            watcher::Event::InitApply(clamped),
        );
        assert!(matches!(kept, Some(watcher::Event::InitApply(_))));
        assert_eq!(refusals.count("deployments", "clamped"), 1);
    }
}
