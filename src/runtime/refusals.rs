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
use std::sync::{Mutex, OnceLock};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;
use kube::runtime::events::EventType;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tracing::warn;

use super::note::Note;
use crate::k8s::decoded::Decoded;

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

/// Every cache (watch or list) that reads objects one at a time, by the name it reports under.
pub const CACHES: [&str; 12] = [
    "nodes",
    "pods",
    "replicasets",
    "deployments",
    "statefulsets",
    "poddisruptionbudgets",
    "testwindows",
    "nodeclaims",
    "citrusts",
    "namespaces",
    "namespaces-without-ci-trust",
    "drain-namespaces",
];

impl RefusalMetrics {
    /// Registers the counter, with a zero series for every cache and outcome.
    pub fn register(&self, registry: &mut Registry) {
        for cache in CACHES {
            for outcome in ["clamped", "dropped"] {
                let _ = self.0.get_or_create(&Labels { cache, outcome });
            }
        }
        registry.register(
            "objects_refused",
            "Objects read from the API server that the operator could not represent: clamped (a time brought into range, kept) or dropped (left out of its cache)",
            self.0.clone(),
        );
    }
}

/// Where a report's Warning Event goes: the runtime's Event writer
/// ([`super::events::Events`]).
pub trait Warn: Send + Sync {
    /// Publishes `note` about `regarding`; returns at once.
    fn warn(&self, regarding: ObjectReference, note: Note);
}

/// Reports objects that were clamped or dropped; shared by every watch of a replica (held by
/// its [`super::Readiness`], which every watch is handed).
#[derive(Default)]
pub struct Refusals {
    counted: Family<Labels, Counter>,
    events: OnceLock<Box<dyn Warn>>,
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
    pub fn publish_with(&self, events: impl Warn + 'static) {
        let _ = self.events.set(Box::new(events));
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
        let note = Note {
            type_: EventType::Warning,
            reason,
            action,
            note,
            secondary: None,
        };
        events.warn(regarding, note);
    }
}
