//! The drain watcher's view of the cluster: reflector stores of nodes, pods, ReplicaSets,
//! Deployments and PDBs (and namespaces when `--drain-namespace-selector` is set), and the
//! triggers their changes send to the watcher loop.
//!
//! Nodes and pods are the operator's shared caches ([`Caches`]): one watch each serves the
//! window controller and this watcher; a pod's change triggers its node only. The watches this
//! watcher adds are narrow:
//! - ReplicaSets: metadata only (only their owner references are read);
//! - Deployments and PDBs: full, without managed fields.
//!
//! With `--namespaces` naming exactly one namespace every namespaced watch is limited to it.

use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Namespace, Node};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use tokio::sync::mpsc::UnboundedSender;
use tokio::task::JoinHandle;
use tracing::warn;

use crate::runtime::{Caches, NodeTrigger};

use crate::resources::PodDigest;

/// Reflector stores the decisions read from.
#[derive(Clone)]
pub struct Stores {
    pub nodes: Store<Node>,
    pub pods: Store<PodDigest>,
    pub replica_sets: Store<PartialObjectMeta<ReplicaSet>>,
    pub deployments: Store<Deployment>,
    pub pdbs: Store<PodDisruptionBudget>,
    /// Namespaces matching `--drain-namespace-selector`, when it is set.
    pub namespaces: Option<Store<PartialObjectMeta<Namespace>>>,
}

impl Stores {
    /// Starts the watches of workloads and PDBs (pods and nodes come from the operator's
    /// shared `caches`, which send their own triggers); changes are sent to `triggers`.
    /// `scope` limits namespaced watches to one namespace. The returned tasks run until
    /// aborted.
    pub fn start(
        client: &Client,
        caches: &Caches,
        scope: Option<&str>,
        namespace_selector: Option<&str>,
        triggers: &UnboundedSender<NodeTrigger>,
    ) -> (Stores, Vec<JoinHandle<()>>) {
        fn api<K>(client: &Client, scope: Option<&str>) -> Api<K>
        where
            K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
            K::DynamicType: Default,
        {
            match scope {
                Some(ns) => Api::namespaced(client.clone(), ns),
                None => Api::all(client.clone()),
            }
        }
        let plain = || watcher::Config::default();
        let mut tasks = Vec::new();

        let (replica_sets, writer) = reflector::store();
        let stream = watcher(api::<PartialObjectMeta<ReplicaSet>>(client, scope), plain())
            .default_backoff()
            .modify(|rs: &mut PartialObjectMeta<ReplicaSet>| rs.metadata.managed_fields = None)
            .reflect(writer);
        tasks.push(drive("replicasets", stream, triggers.clone(), all));

        let (deployments, writer) = reflector::store();
        let stream = watcher(api::<Deployment>(client, scope), plain())
            .default_backoff()
            .modify(|d: &mut Deployment| d.metadata.managed_fields = None)
            .reflect(writer);
        tasks.push(drive("deployments", stream, triggers.clone(), all));

        let (pdbs, writer) = reflector::store();
        let stream = watcher(api::<PodDisruptionBudget>(client, scope), plain())
            .default_backoff()
            .modify(|p: &mut PodDisruptionBudget| p.metadata.managed_fields = None)
            .reflect(writer);
        tasks.push(drive("pdbs", stream, triggers.clone(), all));

        let namespaces = namespace_selector.map(|selector| {
            let (store, writer) = reflector::store();
            let stream = watcher(
                Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
                plain().labels(selector),
            )
            .default_backoff()
            .reflect(writer);
            tasks.push(drive("namespaces", stream, triggers.clone(), all));
            store
        });

        let stores = Stores {
            nodes: caches.nodes.clone(),
            pods: caches.pods.clone(),
            replica_sets,
            deployments,
            pdbs,
            namespaces,
        };
        (stores, tasks)
    }

    /// Waits until every store (and the shared `caches`) has its initial list.
    pub async fn wait_until_ready(&self, caches: &Caches) -> anyhow::Result<()> {
        anyhow::ensure!(
            caches.wait_until_ready().await,
            "the pod or node watch stopped"
        );
        self.replica_sets.wait_until_ready().await?;
        self.deployments.wait_until_ready().await?;
        self.pdbs.wait_until_ready().await?;
        if let Some(namespaces) = &self.namespaces {
            namespaces.wait_until_ready().await?;
        }
        Ok(())
    }
}

fn all<K>(event: &watcher::Event<K>) -> Option<NodeTrigger> {
    match event {
        watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone => {
            Some(NodeTrigger::All)
        }
        watcher::Event::Init | watcher::Event::InitApply(_) => None,
    }
}

/// Drives one watch, sending the trigger each event maps to.
fn drive<K, S>(
    name: &'static str,
    stream: S,
    triggers: UnboundedSender<NodeTrigger>,
    to_trigger: impl Fn(&watcher::Event<K>) -> Option<NodeTrigger> + Send + 'static,
) -> JoinHandle<()>
where
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    K: Send + 'static,
{
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(event) => {
                    if let Some(trigger) = to_trigger(&event)
                        && triggers.send(trigger).is_err()
                    {
                        return;
                    }
                }
                Err(error) => warn!(watch = name, %error, "watch failed; retrying"),
            }
        }
    })
}
