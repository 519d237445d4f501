//! A watch of objects read one at a time ([`Decoded`]) as a watch of the objects the operator
//! can represent, each one clamped or refused reported to the replica's
//! [`Refusals`](super::refusals::Refusals); and the same for the items of a list.

use std::sync::Arc;

use futures::{Stream, StreamExt, future};
use kube::Resource;
use kube::runtime::watcher;

use super::Readiness;
use super::refusals::Refusals;
use crate::k8s::decoded::Decoded;
use crate::k8s::stub::Stub;

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
