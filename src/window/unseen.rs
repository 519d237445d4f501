//! Writes not seen back yet: what keeps a namespace's pass from making the same write twice
//! while the caches catch up with its own writes (the idea of the ReplicaSet controller's
//! expectations).
//!
//! A pass compares what the namespace's field manager holds on each object, as cached, with what
//! it wants. Right after a write the cache may still hold the object before it: the write's echo
//! comes through the watch a moment later. A pass in between (woken by the echo of another of
//! its writes, or by a new window) would plan the same write again. So each apply that succeeded
//! is remembered with what it wrote and the resourceVersion it left the object at; while the
//! cached object is older than that, the same write is known made and is not made again. Only
//! for [`SEEN_BACK_WITHIN`]: a watch that stalls must not stall the namespace.
//!
//! resourceVersions are compared as numbers, as the API server writes them (etcd revisions);
//! one that is not a number is never held back.

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::model::{World, Write};

/// How long a write that succeeded is held back while the cache does not show it.
pub const SEEN_BACK_WITHIN: Duration = Duration::from_secs(5);

/// The object a write goes to: `Pod/<uid>`, `Node/<uid>`, `NodeClaim/<uid>` (with the manager
/// writing), `PDB/<name>` (the namespace's); `None` for the writes that carry their own
/// precondition.
pub fn object_of(write: &Write) -> Option<String> {
    match write {
        Write::Annotate {
            target,
            uid,
            manager,
            ..
        } => Some(format!("{target:?}/{uid}/{manager}")),
        Write::ApplyPdb { name, .. } => Some(format!("PDB/{name}")),
        Write::ReleasePdb { .. } | Write::DeletePdb { .. } => None,
    }
}

/// What a write sets, as a number.
fn digest(write: &Write) -> u64 {
    let mut h = DefaultHasher::new();
    format!("{write:?}").hash(&mut h);
    h.finish()
}

/// A namespace's writes that succeeded, by object: what was written, the resourceVersion it
/// left the object at, when.
pub type Written = HashMap<String, (u64, u64, Instant)>;

/// Records the writes that succeeded (`versions`, in the order of `writes`; `None` for one
/// that failed or left no version).
pub fn record(written: &mut Written, writes: &[Write], versions: &[Option<String>], at: Instant) {
    for (write, version) in writes.iter().zip(versions) {
        let version = version.as_deref().and_then(|v| v.parse().ok());
        if let (Some(object), Some(v)) = (object_of(write), version) {
            written.insert(object, (digest(write), v, at));
        }
    }
}

/// The cached object's resourceVersion, as a number.
fn cached_version(world: &World, object: &str) -> Option<u64> {
    let (kind, rest) = object.split_once('/')?;
    let id = rest.split('/').next()?;
    let uid = |meta: &&ObjectMeta| meta.uid.as_deref() == Some(id);
    let meta = match kind {
        "Pod" => world.pods.iter().map(|p| &p.metadata).find(uid),
        "Node" => world.nodes.iter().map(|n| &n.metadata).find(uid),
        "NodeClaim" => world
            .node_claims
            .iter()
            .flatten()
            .map(|c| &c.metadata)
            .find(uid),
        _ => world
            .pdbs
            .iter()
            .map(|p| &p.metadata)
            .find(|m| m.name.as_deref() == Some(id)),
    };
    meta?.resource_version.as_deref()?.parse().ok()
}

/// Takes out of `writes` those made already: the same write succeeded within
/// [`SEEN_BACK_WITHIN`] and the cache does not show it yet. Forgets the writes the cache shows,
/// or that are too old to hold back.
pub fn hold_back(written: &mut Written, writes: &mut Vec<Write>, world: &World, now: Instant) {
    written.retain(|object, (_, version, at)| {
        now.duration_since(*at) < SEEN_BACK_WITHIN
            && cached_version(world, object).is_some_and(|cached| cached < *version)
    });
    writes.retain(|write| {
        let made = object_of(write)
            .and_then(|o| written.get(&o))
            .is_some_and(|(d, _, _)| *d == digest(write));
        !made
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::PodDigest;
    use crate::window::model::Target;
    use serde_json::json;
    use std::sync::Arc;

    fn world(version: &str) -> World {
        let pod: PodDigest = serde_json::from_value(json!({
            "metadata": {"name": "api-1", "namespace": "shop", "uid": "p1", "resourceVersion": version}
        }))
        .unwrap();
        World {
            pods: vec![Arc::new(pod)],
            ..Default::default()
        }
    }

    fn annotate(value: &str) -> Write {
        Write::Annotate {
            target: Target::Pod,
            name: "api-1".into(),
            uid: "p1".into(),
            manager: "disruption-guard/shop".into(),
            annotations: [("karpenter.sh/do-not-disrupt".into(), value.into())].into(),
        }
    }

    /// How many of `annotate(value)` a pass planning it again against `world` makes.
    fn replan(written: &mut Written, world: &World, value: &str, now: Instant) -> usize {
        let mut writes = vec![annotate(value)];
        hold_back(written, &mut writes, world, now);
        writes.len()
    }

    #[test]
    fn a_write_is_not_made_again_until_the_cache_shows_it_and_then_the_cache_decides() {
        let t0 = Instant::now();
        let mut written = Written::new();
        record(&mut written, &[annotate("true")], &[Some("120".into())], t0);
        assert_eq!(replan(&mut written, &world("100"), "true", t0), 0);
        // Another value is another write: made at once.
        assert_eq!(replan(&mut written, &world("100"), "2h", t0), 1);
        // The echo arrived: a write the plan still wants (someone removed it) is made.
        assert_eq!(replan(&mut written, &world("120"), "true", t0), 1);
        assert!(written.is_empty());
    }

    #[test]
    fn a_write_is_held_back_only_for_a_while_and_only_with_numeric_versions() {
        let t0 = Instant::now();
        let mut written = Written::new();
        record(&mut written, &[annotate("true")], &[Some("120".into())], t0);
        let later = t0 + SEEN_BACK_WITHIN;
        assert_eq!(replan(&mut written, &world("100"), "true", later), 1);

        let mut written = Written::new();
        record(
            &mut written,
            &[annotate("true")],
            &[Some("opaque".into())],
            t0,
        );
        assert_eq!(replan(&mut written, &world("100"), "true", t0), 1);
        // A write that failed (no version) is not held back either.
        record(&mut written, &[annotate("true")], &[None], t0);
        assert_eq!(replan(&mut written, &world("100"), "true", t0), 1);
    }

    #[test]
    fn deletions_of_a_pdb_carry_their_own_precondition_and_are_never_held() {
        let delete = Write::DeletePdb {
            name: "api-dg".into(),
            uid: "u".into(),
            resource_version: "7".into(),
        };
        assert_eq!(object_of(&delete), None);
    }
}
