//! The window report: what happened to the selection while the window was open. A pure
//! function of the previous report and tracking (kept in the status) and the pods, nodes and
//! workloads seen now.
//!
//! - **evictionsBlocked**: the Eviction API keeps no record of the requests it refuses, and PDB
//!   status only says how many disruptions are allowed. Karpenter, Cluster Autoscaler and
//!   `kubectl drain` only evict from nodes they have marked first (taint
//!   `karpenter.sh/disrupted`, taint `ToBeDeletedByClusterAutoscaler`, cordon, deletion). So a
//!   protected pod seen alive on such a node is counted as one blocked eviction (once per pod).
//! - **podsDisrupted**: a tracked pod (by UID) that got a `DisruptionTarget` condition, whose
//!   containers restarted, or that went away when its ReplicaSet still wanted it. A pod removed
//!   because its Deployment rolled out (its ReplicaSet is no longer the newest, or is scaled to
//!   zero) is a replacement, not a disruption.
//! - **rollouts**: changes of a protected Deployment's `restartedAt` that a `disruption-guard`
//!   field manager wrote (the drain watcher's rollouts); a person's `kubectl rollout restart`
//!   is not counted.
//! - **nodesDisrupted**: nodes hosting a selected pod that showed one of the marks above.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;

use super::plan::{World, is_live, workload_of};
use crate::k8s::references::controller_of;
use crate::k8s::signals::{self, Raised, Signal};
use crate::resources::names::{DEPLOYMENT_REVISION, FIELD_MANAGER, RESTARTED_AT};
use crate::resources::pod_digest::DISRUPTION_TARGET;
use crate::resources::{PodDigest, TrackedPod, Tracking, WindowReport};
use crate::rollout::records;

/// The object of `all` named `name`.
fn named<'a, K: Resource>(all: &'a [Arc<K>], name: &str) -> Option<&'a K> {
    let found = all.iter().find(|o| o.meta().name.as_deref() == Some(name));
    found.map(|o| &**o)
}

/// The first of `signals` that the node named `node` carries: it is being disrupted.
pub(super) fn node_disruption(world: &World, node: &str, signals: &[Signal]) -> Option<Raised> {
    signals::disruption(named(&world.nodes, node)?, signals)
}

fn restarts(pod: &PodDigest) -> i32 {
    let statuses = pod.status.container_statuses.iter().flatten();
    statuses.map(|c| c.restart_count).sum()
}

fn disruption_target(pod: &PodDigest) -> bool {
    let mut conditions = pod.status.conditions.iter().flatten();
    conditions.any(|c| c.type_ == DISRUPTION_TARGET && c.status == "True")
}

fn revision(rs: &ReplicaSet) -> i64 {
    let annotations = rs.metadata.annotations.as_ref();
    let revision = annotations.and_then(|a| a.get(DEPLOYMENT_REVISION));
    revision.and_then(|r| r.parse().ok()).unwrap_or(0)
}

/// Whether a pod of `rs` that went away was replaced by a rollout rather than disrupted.
fn rolled_out(rs_name: &str, replica_sets: &[Arc<ReplicaSet>]) -> bool {
    let Some(rs) = named(replica_sets, rs_name) else {
        return true;
    };
    if rs.spec.as_ref().and_then(|s| s.replicas) == Some(0) {
        return true;
    }
    controller_of(&rs.metadata).is_some_and(|owner| {
        replica_sets.iter().any(|other| {
            let mut owners = other.metadata.owner_references.iter().flatten();
            owners.any(|o| o.uid == owner.uid) && revision(other) > revision(rs)
        })
    })
}

/// Whether the guard (any `disruption-guard` field manager) wrote a Deployment's
/// `restartedAt`.
fn restarted_by_guard(meta: &ObjectMeta) -> bool {
    let key = format!("f:{RESTARTED_AT}");
    meta.managed_fields.iter().flatten().any(|m| {
        m.manager
            .as_deref()
            .is_some_and(|n| n.starts_with(FIELD_MANAGER))
            && m.fields_v1.as_ref().is_some_and(|f| {
                f.0.pointer("/f:spec/f:template/f:metadata/f:annotations")
                    .and_then(|a| a.get(&key))
                    .is_some()
            })
    })
}

/// Updates the report and tracking with what is seen now (`selected`: the live selection); a
/// node counts as disrupted when it carries one of `signals` (`--drain-signals`, as the drain
/// watcher reads them).
pub fn update(
    report: &WindowReport,
    tracking: &Tracking,
    selected: &[&Arc<PodDigest>],
    world: &World,
    signals: &[Signal],
) -> (WindowReport, Tracking) {
    let mut tally = Tally {
        report: report.clone(),
        world,
        signals,
    };
    let mut next = Tracking {
        pods: tally.follow(&tracking.pods),
        restarted_at: tracking.restarted_at.clone(),
        held: Default::default(),
    };
    tally.track_new(selected, &tracking.pods, &mut next.pods);
    tally.count_rollouts(selected, &mut next.restarted_at);
    let mut report = tally.report;
    for names in [&mut report.disrupted_pods, &mut report.nodes_disrupted] {
        names.sort();
        names.dedup();
    }
    (report, next)
}

/// The report being updated, with the world it is updated from.
struct Tally<'a> {
    /// Its lists of names are sorted and made unique once the update is done.
    report: WindowReport,
    world: &'a World,
    signals: &'a [Signal],
}

impl Tally<'_> {
    /// Whether `pod` is on a node being disrupted; names the node.
    fn disrupted_node<'p>(&self, pod: &'p PodDigest) -> Option<&'p str> {
        let name = pod.node_name()?;
        node_disruption(self.world, name, self.signals).map(|_| name)
    }

    fn disrupt(&mut self, name: &str) {
        self.report.pods_disrupted += 1;
        self.report.disrupted_pods.push(name.to_string());
    }

    /// Follows the pods tracked so far: counts those disrupted (and drops them) and the blocked
    /// evictions of those still alive; returns the ones to keep tracking.
    fn follow(&mut self, tracked: &[TrackedPod]) -> Vec<TrackedPod> {
        let mut kept = Vec::new();
        for tracked in tracked {
            let uid = Some(tracked.uid.as_str());
            let pod = self
                .world
                .pods
                .iter()
                .find(|p| p.metadata.uid.as_deref() == uid);
            let Some(pod) = pod.filter(|p| p.metadata.deletion_timestamp.is_none()) else {
                let replaced = tracked
                    .replica_set
                    .as_deref()
                    .is_some_and(|rs| rolled_out(rs, &self.world.replica_sets));
                if pod.is_some_and(|p| disruption_target(p)) || !replaced {
                    self.disrupt(&tracked.name);
                }
                continue;
            };
            if disruption_target(pod) {
                self.disrupt(&tracked.name);
                continue;
            }
            let mut t = tracked.clone();
            let now_restarts = restarts(pod);
            if now_restarts > t.restarts {
                self.disrupt(&t.name);
            }
            t.restarts = now_restarts;
            if !t.blocked && self.disrupted_node(pod).is_some() && is_live(pod) {
                self.report.evictions_blocked += 1;
                t.blocked = true;
            }
            kept.push(t);
        }
        kept
    }

    /// Starts tracking the selected pods not tracked yet (`before`: the tracking this update
    /// started from), and notes the disrupted nodes of the selection.
    fn track_new(
        &mut self,
        selected: &[&Arc<PodDigest>],
        before: &[TrackedPod],
        next: &mut Vec<TrackedPod>,
    ) {
        for pod in selected {
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            let node = self.disrupted_node(pod);
            self.report.nodes_disrupted.extend(node.map(str::to_string));
            if next.iter().chain(before).any(|t| t.uid == uid) {
                continue;
            }
            let blocked = node.is_some();
            self.report.evictions_blocked += u32::from(blocked);
            let owner = controller_of(&pod.metadata).filter(|o| o.kind == "ReplicaSet");
            next.push(TrackedPod {
                name: pod.metadata.name.clone().unwrap_or_default(),
                uid,
                restarts: restarts(pod),
                replica_set: owner.map(|o| o.name.clone()),
                blocked,
            });
        }
    }

    /// Counts the guard's rollouts of the selection's Deployments since the last update
    /// (`restarted_at`: each Deployment's `restartedAt` then, updated to now).
    fn count_rollouts(
        &mut self,
        selected: &[&Arc<PodDigest>],
        restarted_at: &mut BTreeMap<String, String>,
    ) {
        let deployments: BTreeSet<String> = selected
            .iter()
            .filter_map(|p| workload_of(p, self.world).ok().flatten())
            .filter(|w| w.kind == "Deployment")
            .map(|w| w.name)
            .collect();
        for name in deployments {
            let Some(dep) = named(&self.world.deployments, &name) else {
                continue;
            };
            let value = records::restarted(dep).unwrap_or_default().to_string();
            let before = restarted_at.insert(name, value.clone());
            if before.is_some_and(|b| b != value) && restarted_by_guard(&dep.metadata) {
                self.report.rollouts += 1;
            }
        }
    }
}
