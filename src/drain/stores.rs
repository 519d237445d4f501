//! The drain watcher's view of the cluster: the operator's shared caches ([`Caches`]: nodes,
//! pods, ReplicaSets, Deployments and PDBs, one watch each for the whole operator, whose
//! changes already arrive as [`NodeTrigger`]s), plus the namespaces matching
//! `--drain-namespace-selector` when it is set — the one watch only this watcher needs.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Namespace, Node};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use kube::{Api, Client};
use tokio::sync::mpsc::UnboundedSender;
use tokio::task::JoinHandle;

use crate::k8s::decoded::Decoded;
use crate::runtime::caches::reflect;
use crate::runtime::{Caches, NodeTrigger, Pods, Readiness};

/// Reflector stores the decisions read from.
#[derive(Clone)]
pub struct DrainStores {
    pub nodes: Store<Node>,
    /// Pods, among them every pod of a node being disrupted.
    pub pods: Pods,
    pub replica_sets: Store<ReplicaSet>,
    pub deployments: Store<Deployment>,
    pub pdbs: Store<PodDisruptionBudget>,
    /// Namespaces matching `--drain-namespace-selector`, when it is set.
    pub namespaces: Option<Store<PartialObjectMeta<Namespace>>>,
}

impl DrainStores {
    /// The shared `caches`, and a watch of the namespaces matching `namespace_selector` when
    /// it is set (its changes are sent to `triggers`; the task runs until aborted).
    pub fn start(
        client: &Client,
        ready: &Arc<Readiness>,
        caches: &Caches,
        namespace_selector: Option<&str>,
        triggers: &UnboundedSender<NodeTrigger>,
    ) -> (DrainStores, Option<JoinHandle<()>>) {
        let mut task = None;
        let namespaces = namespace_selector.map(|selector| {
            let (store, writer) = reflector::store();
            let triggers = triggers.clone();
            // Any change asks the watcher to look at every node again.
            task = Some(reflect(
                "drain-namespaces",
                Api::<Decoded<PartialObjectMeta<Namespace>>>::all(client.clone()),
                watcher::Config::default().labels(selector),
                writer,
                ready.clone(),
                move |event| {
                    if matches!(
                        event,
                        watcher::Event::Apply(_)
                            | watcher::Event::Delete(_)
                            | watcher::Event::InitDone
                    ) {
                        let _ = triggers.send(NodeTrigger::All);
                    }
                },
            ));
            store
        });
        let stores = DrainStores {
            nodes: caches.nodes.clone(),
            pods: caches.pods.clone(),
            replica_sets: caches.replica_sets.clone(),
            deployments: caches.deployments.clone(),
            pdbs: caches.pdbs.clone(),
            namespaces,
        };
        (stores, task)
    }

    /// Waits until every store (the shared `caches` too) has its initial list.
    pub async fn wait_until_ready(&self, caches: &Caches) -> anyhow::Result<()> {
        anyhow::ensure!(caches.wait_until_ready().await, "a shared watch stopped");
        if let Some(namespaces) = &self.namespaces {
            namespaces.wait_until_ready().await?;
        }
        Ok(())
    }
}
