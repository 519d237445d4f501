//! Writes not seen back yet: what keeps a namespace's pass from making the same write twice
//! while the caches catch up with its own writes (the idea of the ReplicaSet controller's
//! expectations).
//!
//! A pass compares what the namespace's field manager holds on each object, as cached, with what
//! it wants. Right after a write the cache may still hold the object before it: the write's echo
//! comes through the watch a moment later. A pass in between (woken by the echo of another of
//! its writes, or by a new window) would plan the same write again. So a pass ends only once the
//! caches show what it wrote — each object at the resourceVersion its write left it at or later,
//! a deleted PDB gone — and the controller never runs two passes over one namespace at once:
//! the next one plans from caches that hold every earlier write. Only for [`SEEN_BACK_WITHIN`]:
//! a watch that stalls must not stall the namespace.
//!
//! resourceVersions are compared as numbers, as the API server writes them (etcd revisions);
//! one that is not a number is never waited for.

use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::model::{Target, World, Write};

/// How long a pass waits at most for the caches to show its writes.
pub const SEEN_BACK_WITHIN: Duration = Duration::from_secs(5);

/// A write that succeeded, with the resourceVersion it left the object at (none for a
/// deletion, or the release of an object that was gone).
pub type Made = (Write, Option<String>);

/// The cached object a write went to.
fn cached<'a>(world: &'a World, write: &Write) -> Option<&'a ObjectMeta> {
    let target = match write {
        Write::Annotate { target, .. } => *target,
        Write::ApplyPdb { .. } | Write::DeletePdb { .. } => Target::Pdb,
    };
    let mut metas: Box<dyn Iterator<Item = &ObjectMeta>> = match target {
        Target::Pod => Box::new(world.pods.iter().map(|p| &p.metadata)),
        Target::Node => Box::new(world.nodes.iter().map(|n| &n.metadata)),
        Target::NodeClaim => Box::new(world.node_claims.iter().flatten().map(|c| &c.metadata)),
        Target::Pdb => Box::new(world.pdbs.iter().map(|p| &p.metadata)),
    };
    match write {
        Write::Annotate { uid, .. } | Write::DeletePdb { uid, .. } => {
            metas.find(|m| m.uid.as_ref() == Some(uid))
        }
        Write::ApplyPdb { name, .. } => metas.find(|m| m.name.as_ref() == Some(name)),
    }
}

/// Whether the cached `world` shows every write of `made`.
pub fn seen_back(world: &World, made: &[Made]) -> bool {
    let number = |v: Option<&String>| v.and_then(|v| v.parse::<u64>().ok());
    made.iter()
        .all(|(write, version)| match cached(world, write) {
            None => true,
            Some(_) if matches!(write, Write::DeletePdb { .. }) => false,
            Some(meta) => number(version.as_ref()).is_none_or(|written| {
                number(meta.resource_version.as_ref()).is_none_or(|cached| cached >= written)
            }),
        })
}

/// Waits until the caches (`world`, read afresh each time) show the writes `made`, at most
/// [`SEEN_BACK_WITHIN`].
pub async fn wait(world: impl Fn() -> World, made: &[Made]) {
    let deadline = Instant::now() + SEEN_BACK_WITHIN;
    while !made.is_empty() && !seen_back(&world(), made) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::PodDigest;
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

    fn annotate(version: Option<&str>) -> Made {
        let write = Write::Annotate {
            target: Target::Pod,
            name: "api-1".into(),
            uid: "p1".into(),
            manager: "disruption-guard/shop".into(),
            annotations: [("karpenter.sh/do-not-disrupt".into(), "true".into())].into(),
        };
        (write, version.map(str::to_string))
    }

    #[test]
    fn a_write_is_seen_back_once_the_cache_shows_its_version_or_the_object_is_gone() {
        let made = [annotate(Some("120"))];
        assert!(!seen_back(&world("100"), &made));
        assert!(seen_back(&world("120"), &made));
        assert!(seen_back(&world("121"), &made));
        assert!(seen_back(&World::default(), &made), "the pod is gone");
    }

    #[test]
    fn only_numeric_versions_are_waited_for() {
        assert!(seen_back(&world("100"), &[annotate(Some("opaque"))]));
        assert!(seen_back(&world("opaque"), &[annotate(Some("120"))]));
        // A write that left no version (a release of an object that was gone).
        assert!(seen_back(&world("100"), &[annotate(None)]));
    }

    #[test]
    fn a_deleted_pdb_is_seen_back_once_it_left_the_cache() {
        let pdb = serde_json::from_value(json!({
            "metadata": {"name": "api-dg", "namespace": "shop", "uid": "u", "resourceVersion": "7"}
        }))
        .unwrap();
        let delete = Write::DeletePdb {
            name: "api-dg".into(),
            uid: "u".into(),
            resource_version: "7".into(),
        };
        let made = [(delete, None)];
        let mut w = World::default();
        assert!(seen_back(&w, &made));
        w.pdbs.push(Arc::new(pdb));
        assert!(!seen_back(&w, &made));
    }
}
