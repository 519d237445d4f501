//! Writes not seen back yet: what keeps a window from writing the same thing twice while the
//! caches catch up with its own writes (the idea of the ReplicaSet controller's expectations).
//!
//! A window's plan compares what its field manager holds on each object, as cached, with what
//! it wants. Right after a write the cache may still hold the object before it: the write's
//! echo comes through the watch a moment later. A reconcile in between (woken by the echo of
//! another of its writes) would plan the same write again, and under load a burst of openings
//! made each write two or three times. So each apply that succeeded is remembered with the
//! resourceVersion it left the object at; while the cached object is older than that, the
//! write is held back and the window waits for it to be seen back (`Ready` waits for it
//! anyway). Only for [`SEEN_BACK_WITHIN`]: a watch that stalls must not stall a window.
//!
//! resourceVersions are compared as numbers, as the API server writes them (etcd revisions);
//! one that is not a number is never held back.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::model::{World, Write};

/// How long a write that succeeded is held back while the cache does not show it.
pub const SEEN_BACK_WITHIN: Duration = Duration::from_secs(5);

/// The object a write goes to: `Pod/<uid>`, `Node/<uid>`, `NodeClaim/<uid>`, `PDB/<name>`
/// (the window's namespace); `None` for the writes that carry their own precondition.
pub fn object_of(write: &Write) -> Option<String> {
    match write {
        Write::Annotate { target, uid, .. } => Some(format!("{target:?}/{uid}")),
        Write::ApplyPdb { name, .. } => Some(format!("PDB/{name}")),
        Write::ReleasePdb { .. } | Write::DeletePdb { .. } => None,
    }
}

/// One window's writes that succeeded: the object, the resourceVersion it was left at, when.
pub type Written = HashMap<String, (u64, Instant)>;

/// Records the writes that succeeded (`results`, in the order of `writes`).
pub fn record(written: &mut Written, writes: &[Write], versions: &[Option<String>], at: Instant) {
    for (write, version) in writes.iter().zip(versions) {
        let version = version.as_deref().and_then(|v| v.parse().ok());
        if let (Some(object), Some(v)) = (object_of(write), version) {
            written.insert(object, (v, at));
        }
    }
}

/// The cached object's resourceVersion, as a number.
fn cached_version(world: &World, object: &str) -> Option<u64> {
    let (kind, id) = object.split_once('/')?;
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

/// Takes out of `writes` those whose last success the cache does not show yet (within
/// [`SEEN_BACK_WITHIN`] of it), and says what is awaited instead; forgets the writes the cache
/// shows, or that are too old to hold back.
pub fn hold_back(
    written: &mut Written,
    writes: &mut Vec<Write>,
    waiting: &mut Vec<String>,
    world: &World,
    now: Instant,
) {
    written.retain(|object, (version, at)| {
        now.duration_since(*at) < SEEN_BACK_WITHIN
            && cached_version(world, object).is_some_and(|cached| cached < *version)
    });
    writes.retain(|write| {
        let held = object_of(write).is_some_and(|o| written.contains_key(&o));
        if held {
            waiting.push(format!("{} not seen back yet", write.describe()));
        }
        !held
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

    fn annotate() -> Write {
        Write::Annotate {
            target: Target::Pod,
            name: "api-1".into(),
            uid: "p1".into(),
            annotations: [("karpenter.sh/do-not-disrupt".into(), "true".into())].into(),
        }
    }

    /// What a reconcile planning `annotate()` again against `world` writes, and waits for.
    fn replan(written: &mut Written, world: &World, now: Instant) -> (usize, Vec<String>) {
        let (mut writes, mut waiting) = (vec![annotate()], vec![]);
        hold_back(written, &mut writes, &mut waiting, world, now);
        (writes.len(), waiting)
    }

    #[test]
    fn a_write_is_not_made_again_until_the_cache_shows_it_and_then_the_cache_decides() {
        let t0 = Instant::now();
        let mut written = Written::new();
        record(&mut written, &[annotate()], &[Some("120".into())], t0);
        let (writes, waiting) = replan(&mut written, &world("100"), t0);
        assert_eq!(writes, 0);
        assert_eq!(waiting, ["annotations of Pod api-1 not seen back yet"]);
        // The echo arrived: a write the plan still wants (someone removed it) is made.
        assert_eq!(replan(&mut written, &world("120"), t0).0, 1);
        assert!(written.is_empty());
    }

    #[test]
    fn a_write_is_held_back_only_for_a_while_and_only_with_numeric_versions() {
        let t0 = Instant::now();
        let mut written = Written::new();
        record(&mut written, &[annotate()], &[Some("120".into())], t0);
        let later = t0 + SEEN_BACK_WITHIN;
        assert_eq!(replan(&mut written, &world("100"), later).0, 1);

        let mut written = Written::new();
        record(&mut written, &[annotate()], &[Some("opaque".into())], t0);
        assert_eq!(replan(&mut written, &world("100"), t0).0, 1);
        // A write that failed (no version) is not held back either.
        record(&mut written, &[annotate()], &[None], t0);
        assert_eq!(replan(&mut written, &world("100"), t0).0, 1);
    }

    #[test]
    fn releases_of_a_pdb_carry_their_own_precondition_and_are_never_held() {
        let release = Write::ReleasePdb {
            name: "api-dg".into(),
            uid: "u".into(),
            resource_version: "7".into(),
        };
        assert_eq!(object_of(&release), None);
    }
}
