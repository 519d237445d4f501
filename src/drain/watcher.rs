//! The drain watcher loop: on every trigger, look at the disrupted nodes it concerns, decide for
//! each pod on them from the stores, report skips, and roll out.
//!
//! The rollout is `Watcher::act`: it hands a rollout decision to the shared rollout write
//! ([`crate::rollout::restart`]), which re-checks it against fresh reads (with this watcher's
//! own decision, PDB included) and patches the Deployment; then Events on the Deployment and
//! the node say so. Only the Lease holder patches Deployments: leadership (`Watcher::may_act`)
//! is checked right before the fresh reads and the patch, and before the records of ended
//! disruptions are removed.
//!
//! A plain loop rather than kube's `Controller<Node>`: the triggers are not only node events but
//! pod and PDB changes that [`crate::runtime::caches`] maps to the node they concern, read from
//! the stores the window controller and the webhook share; one decision spans nodes (the
//! [`Ledger`] keeps a Deployment from being rolled out twice while its pod moves from node to
//! node, and must forget a node by uid when it is deleted); and ending the disruption records is
//! a cluster-wide pass after each batch. A burst of triggers is coalesced into one pass.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::mpsc::UnboundedReceiver;
use tracing::{debug, info, warn};

use super::decide::{self, Decision, Facts, NodeRef, RolloutPlan, SkipReason};
use super::ledger::Ledger;
use super::stores::DrainStores;
use super::{DrainArgs, DrainMetrics, Error};
use crate::k8s::signals::{self, Raised};
use crate::rollout::restart::{Cause, Check, Fresh, Outcome, Rollouts};
use crate::runtime::events::Note;
use crate::runtime::{NodeTrigger, Runtime, lookup};

/// Action of the drain watcher's Events.
const ACTION: &str = "RolloutOnDrain";

/// The loop's state; owned by one task.
pub struct Watcher {
    pub runtime: Runtime,
    pub args: DrainArgs,
    pub metrics: Arc<DrainMetrics>,
    pub stores: DrainStores,
    /// Writes rollouts and Events, with the runtime's client, as this replica.
    pub rollouts: Rollouts,
    ledger: Ledger,
    /// When the watcher first saw each node's current disruption (by node uid).
    first_seen: HashMap<String, Timestamp>,
}

impl Watcher {
    /// A watcher over `stores`.
    pub fn new(
        runtime: Runtime,
        args: DrainArgs,
        metrics: Arc<DrainMetrics>,
        stores: DrainStores,
    ) -> Self {
        let rollouts = Rollouts::new(&runtime);
        Self {
            runtime,
            args,
            metrics,
            stores,
            rollouts,
            ledger: Ledger::default(),
            first_seen: HashMap::new(),
        }
    }

    /// Handles triggers until shutdown; also looks at every disrupted node each `resync`.
    pub async fn run(mut self, mut triggers: UnboundedReceiver<NodeTrigger>, resync: Duration) {
        let mut tick = tokio::time::interval(resync);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let first = tokio::select! {
                _ = self.runtime.shutdown.cancelled() => return,
                _ = tick.tick() => NodeTrigger::All,
                trigger = triggers.recv() => match trigger {
                    Some(trigger) => trigger,
                    None => return,
                },
            };
            // Coalesce a burst of triggers into one pass.
            let mut batch = vec![first];
            while let Ok(more) = triggers.try_recv() {
                batch.push(more);
            }
            let mut all = false;
            let mut node_gone = false;
            let mut nodes = BTreeSet::new();
            for trigger in batch {
                match trigger {
                    NodeTrigger::All => all = true,
                    NodeTrigger::Node(name) => {
                        nodes.insert(name);
                    }
                    NodeTrigger::NodeGone(uid) => {
                        self.ledger.forget_node(&uid);
                        self.first_seen.remove(&uid);
                        node_gone = true;
                    }
                }
            }
            if all {
                nodes.extend(
                    self.stores
                        .nodes
                        .state()
                        .iter()
                        .filter_map(|n| n.metadata.name.clone()),
                );
            }
            let mut ended = all || node_gone;
            for name in nodes {
                if let Some(node) = self.stores.nodes.get(&ObjectRef::new(&name)) {
                    ended |= self.pass(&node).await;
                }
            }
            if ended {
                self.end_records().await;
            }
        }
    }

    /// Ends the records of disruptions that are over (on every resync, and when a node's
    /// disruption ends): a later drain of the node rolls out afresh, and the interception
    /// holds its pod again. Nothing when this replica may not act.
    async fn end_records(&self) {
        if !self.may_act() {
            return;
        }
        let signals = &self.args.signals;
        // Every namespace of `--namespaces`: the interception writes hold records beyond
        // `--drain-namespace-selector`.
        let in_scope = |ns: &str| self.runtime.in_scope(ns);
        let (deployments, nodes) = (&self.stores.deployments, &self.stores.nodes);
        match self
            .rollouts
            .end_records(deployments, nodes, signals, in_scope)
            .await
        {
            Ok(0) => {}
            Ok(cleared) => info!(deployments = cleared, "disruption records ended"),
            Err(error) => warn!(
                error = %error, source = ?std::error::Error::source(&error),
                "ending disruption records failed; retrying on the next resync"
            ),
        }
    }

    /// One pass over a node: nothing unless it is being disrupted; else a decision per pod,
    /// timed as the drain watcher's reconcile (an error when a rollout in it failed). True when
    /// the node's disruption just ended.
    async fn pass(&mut self, node: &Node) -> bool {
        let uid = node.metadata.uid.clone().unwrap_or_default();
        let drain = &self.args;
        let Some(raised) = signals::disruption(node, &drain.signals) else {
            // The disruption is over (or never began): a later one is a new episode.
            if self.first_seen.remove(&uid).is_some() {
                self.ledger.forget_node(&uid);
                return true;
            }
            return false;
        };
        let started = Instant::now();
        let mut failed = false;
        let first = *self
            .first_seen
            .entry(uid.clone())
            .or_insert_with(Timestamp::now);
        let since = signals::since(&raised, first);
        let node_ref = NodeRef {
            name: node.metadata.name.clone().unwrap_or_default(),
            uid,
        };
        let pods: Vec<_> = self
            .stores
            .pods
            .on_node(&node_ref.name)
            .into_iter()
            .filter(|p| {
                p.metadata
                    .namespace
                    .as_deref()
                    .is_some_and(|ns| self.in_scope(ns))
            })
            .collect();
        for pod in pods {
            let decision = self.decide_from_stores(&node_ref, &pod.to_pod());
            let counted = super::metrics::decision_label(&decision);
            match decision {
                Decision::Ignore | Decision::AlreadyRolledOut => {}
                Decision::Skip { reason, subject } => {
                    let subject_uid = subject.uid.clone().unwrap_or_default();
                    if self.ledger.note_skip(&subject_uid, &node_ref.uid, reason) {
                        info!(
                            kind = ?subject.kind, name = ?subject.name, node = %node_ref.name,
                            reason = reason.as_str(), "not rolling out"
                        );
                        self.metrics.skip(reason.as_str());
                        self.report_skip(&subject, reason, &node_ref.name);
                    }
                }
                Decision::RollOut(plan) => failed |= !self.act(&plan, &raised, since).await,
            }
            self.metrics.decided(counted);
        }
        self.metrics.passes.observe(!failed, started.elapsed());
        let result = if failed { "error" } else { "success" };
        self.metrics.controller.reconciled(result);
        false
    }

    /// The only step that writes: re-check, patch, record, report. False when it failed (it is
    /// retried on the next pass).
    async fn act(&mut self, plan: &RolloutPlan, raised: &Raised, since: Timestamp) -> bool {
        let metrics = &self.metrics;
        // The stores decided to roll out, so this process's record does not stand in the way;
        // the fresh re-check reads the Deployment's marker.
        match self.roll_out(plan).await {
            Ok(None) => {}
            Ok(Some(Decision::RollOut(done))) => {
                let latency = Timestamp::now()
                    .duration_since(since)
                    .as_secs_f64()
                    .max(0.0);
                metrics.rollout("rolled_out");
                metrics.signal_to_rollout.observe(latency);
                self.ledger
                    .note_rollout(&done.deployment_uid, &done.node.uid);
                info!(
                    namespace = %done.namespace, deployment = %done.deployment, pod = %done.pod,
                    pdb = %done.pdb, node = %done.node.name, signal = %raised.signal,
                    latency_seconds = latency, "rolled out for a node being disrupted"
                );
                self.report_rollout(&done, raised);
            }
            Ok(Some(Decision::AlreadyRolledOut)) => {
                self.ledger
                    .note_rollout(&plan.deployment_uid, &plan.node.uid);
            }
            Ok(Some(other)) => {
                metrics.rollout("changed");
                debug!(deployment = %plan.deployment, decision = ?other, "re-check decided otherwise");
            }
            Err(error) => {
                metrics.rollout(error.category());
                warn!(
                    deployment = %plan.deployment, node = %plan.node.name,
                    error = %error, source = ?std::error::Error::source(&error),
                    "rollout failed; retrying on the next pass"
                );
                return false;
            }
        }
        true
    }

    /// Whether this replica may write: it holds the leader Lease (or runs without election).
    fn may_act(&self) -> bool {
        self.runtime.leader.is_leader()
    }

    /// Re-decides `plan` from fresh reads and, if it still holds, rolls the Deployment out.
    /// Returns the fresh decision (`RollOut` means the patch was made), or `None` when this
    /// replica may not act.
    async fn roll_out(&self, plan: &RolloutPlan) -> Result<Option<Decision>, Error> {
        if !self.may_act() {
            return Ok(None);
        }
        let max_replicas = self.args.max_replicas;
        let recheck = |fresh: &Fresh| {
            let pdbs: Vec<&PodDisruptionBudget> = fresh.pdb.iter().collect();
            let decision = decide::decide(&Facts {
                node: &plan.node,
                pod: &fresh.pod,
                owner: decide::owner(
                    &fresh.pod,
                    Some(&fresh.replica_set.metadata),
                    Some(&fresh.deployment),
                ),
                pdbs: &pdbs,
                // Fresh reads: the Deployment's own marker says whether it was rolled out.
                rolled_out_before: false,
                max_replicas,
            });
            match decision {
                Decision::RollOut(_) => Check::Go(decision),
                other => Check::Stop(other),
            }
        };
        let outcome = self
            .rollouts
            .roll_out(&plan.target(), Some(&plan.pdb), &self.args.signals, recheck)
            .await?;
        Ok(Some(match outcome {
            Outcome::MovedOn => Decision::Ignore,
            Outcome::AlreadyRolledOut => Decision::AlreadyRolledOut,
            Outcome::Declined(decision) | Outcome::RolledOut(decision) => decision,
        }))
    }

    /// Events on the Deployment and the node after a rollout.
    fn report_rollout(&self, plan: &RolloutPlan, raised: &Raised) {
        let why = format!(
            "node {} is being disrupted ({}) and PodDisruptionBudget {} allows no disruption \
             of pod {}",
            plan.node.name, raised.signal, plan.pdb, plan.pod
        );
        let cause = Cause {
            reason: "RolledOutForDrain",
            action: ACTION,
            why,
        };
        self.rollouts.report(&plan.target(), &cause);
    }

    /// The Event for a skip: a Warning when the drain stays blocked by something a person
    /// should look at.
    fn report_skip(&self, subject: &ObjectReference, reason: SkipReason, node: &str) {
        let type_ = if reason.warns() {
            EventType::Warning
        } else {
            EventType::Normal
        };
        let note = format!(
            "Not rolled out although node {node} is being disrupted and a \
             PodDisruptionBudget blocks the eviction: {} ({})",
            reason.explain(),
            reason.as_str()
        );
        let note = Note {
            type_,
            reason: "DrainRolloutSkipped",
            action: ACTION,
            note,
            secondary: None,
        };
        self.rollouts.events().publish(subject, note);
    }

    fn decide_from_stores(&self, node: &NodeRef, pod: &Pod) -> Decision {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let (rs, deployment) =
            lookup::owner_chain(&self.stores.replica_sets, &self.stores.deployments, pod);
        let pdbs: Vec<Arc<PodDisruptionBudget>> = self
            .stores
            .pdbs
            .state_filter(|p| p.metadata.namespace.as_deref() == Some(&ns));
        let pdbs: Vec<&PodDisruptionBudget> = pdbs.iter().map(|p| p.as_ref()).collect();
        let rolled_out_before = deployment.as_ref().is_some_and(|d| {
            let uid = d.metadata.uid.as_deref().unwrap_or_default();
            self.ledger.rolled_out(uid, &node.uid) && !decide::superseded(d, node)
        });
        decide::decide(&Facts {
            node,
            pod,
            owner: decide::owner(
                pod,
                rs.as_ref().map(|rs| &rs.metadata),
                deployment.as_deref(),
            ),
            pdbs: &pdbs,
            rolled_out_before,
            max_replicas: self.args.max_replicas,
        })
    }

    /// `--namespaces` and `--drain-namespace-selector` both admit the namespace.
    fn in_scope(&self, ns: &str) -> bool {
        self.runtime.in_scope(ns)
            && self
                .stores
                .namespaces
                .as_ref()
                .is_none_or(|store| store.get(&ObjectRef::new(ns)).is_some())
    }
}
