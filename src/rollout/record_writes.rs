//! The records of one disruption on a Deployment: [`Rollouts::record_hold`] dates the first
//! held eviction on it (the interception's timeout counts from there, on every replica and
//! after restarts), and [`Rollouts::end_records`] removes both records — that one and the
//! rollout's — once their node is no longer disrupted, so the next drain of that node is
//! handled afresh. Each write follows a fresh read, as the rollout's does.

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::Patch;
use kube::runtime::reflector::Store;
use tracing::debug;

use super::records;
use super::restart::{Error, Rollouts};
use super::target::{NodeRef, Target};
use crate::k8s::signals::Signal;
use crate::resources::names::FIELD_MANAGER;
use crate::runtime::write::{self, retry_conflicts};

impl Rollouts {
    /// Records on the Deployment that an eviction of its pod on `target`'s node has been held
    /// back since `since`, unless it records a hold for that node already (a fresh read; a
    /// conflict reads again). True when this call wrote it.
    pub async fn record_hold(&self, target: &Target, since: Timestamp) -> Result<bool, Error> {
        let api = &Api::<Deployment>::namespaced(self.client.clone(), &target.namespace);
        retry_conflicts(Error::is_conflict, |_| async move {
            let deployment =
                api.get_opt(&target.deployment)
                    .await
                    .map_err(|source| Error::Recheck {
                        what: "the Deployment",
                        source,
                    })?;
            let Some(deployment) = deployment
                .filter(|d| d.metadata.uid.as_deref() == Some(target.deployment_uid.as_str()))
            else {
                return Ok(false);
            };
            if records::held_since(&deployment, &target.node).is_some() {
                return Ok(false);
            }
            let patch = records::hold_patch(&deployment, &target.node, since);
            self.merge(api, &target.deployment, &patch)
                .await
                .map(|()| true)
        })
        .await
    }

    /// Removes the records of every cached Deployment whose node is no longer disrupted
    /// ([`records::ended_records`]), each after a fresh read of the Deployment and its node.
    /// Returns how many Deployments it cleared, or the last failure (the others are still
    /// cleared; a failed one is retried by the next call).
    pub async fn end_records(
        &self,
        deployments: &Store<Deployment>,
        nodes: &Store<Node>,
        enabled: &[Signal],
        in_scope: impl Fn(&str) -> bool,
    ) -> Result<usize, Error> {
        let cached = |name: &str| nodes.get(&kube::runtime::reflector::ObjectRef::new(name));
        let candidates: Vec<_> = deployments
            .state()
            .into_iter()
            .filter(|d| d.metadata.namespace.as_deref().is_some_and(&in_scope))
            .filter(|d| {
                // The cache's nodes decide which Deployments to read fresh.
                let held: Vec<_> = node_names(d)
                    .into_iter()
                    .map(|n| (n.clone(), cached(&n)))
                    .collect();
                let lookup = |name: &str| {
                    held.iter()
                        .find(|(n, _)| n == name)
                        .and_then(|(_, node)| node.as_deref())
                };
                !records::ended_records(d, lookup, enabled).is_empty()
            })
            .collect();
        let (mut cleared, mut failed) = (0, None);
        for cached in candidates {
            let ns = cached.metadata.namespace.clone().unwrap_or_default();
            let name = cached.metadata.name.clone().unwrap_or_default();
            match self.end_records_of(&ns, &name, enabled).await {
                Ok(true) => cleared += 1,
                Ok(false) => {}
                Err(error) => failed = Some(error),
            }
        }
        failed.map_or(Ok(cleared), Err)
    }

    /// One Deployment of [`Rollouts::end_records`], from fresh reads.
    async fn end_records_of(
        &self,
        ns: &str,
        name: &str,
        enabled: &[Signal],
    ) -> Result<bool, Error> {
        let read = |what| move |source| Error::Recheck { what, source };
        let api = Api::<Deployment>::namespaced(self.client.clone(), ns);
        let Some(deployment) = api.get_opt(name).await.map_err(read("the Deployment"))? else {
            return Ok(false);
        };
        let mut fresh_nodes = vec![];
        for node in node_names(&deployment) {
            let fresh = Api::<Node>::all(self.client.clone())
                .get_opt(&node)
                .await
                .map_err(read("the node"))?;
            fresh_nodes.push((node, fresh));
        }
        let lookup = |name: &str| {
            fresh_nodes
                .iter()
                .find(|(n, _)| n == name)
                .and_then(|(_, node)| node.as_ref())
        };
        let ended = records::ended_records(&deployment, lookup, enabled);
        if ended.is_empty() {
            return Ok(false);
        }
        let patch = records::end_patch(&deployment, &ended);
        self.merge(&api, name, &patch).await?;
        debug!(namespace = %ns, deployment = %name, records = ?ended, "disruption records ended");
        Ok(true)
    }

    /// A JSON merge patch of a Deployment's metadata as the guard's field manager.
    async fn merge(
        &self,
        api: &Api<Deployment>,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<(), Error> {
        api.patch(name, &write::patch(FIELD_MANAGER), &Patch::Merge(patch))
            .await
            .map(|_| ())
            .map_err(Error::from_write)
    }
}

/// The names of the nodes a Deployment's records name.
fn node_names(deployment: &Deployment) -> Vec<String> {
    records::recorded_nodes(deployment)
        .into_iter()
        .map(|n: NodeRef| n.name)
        .collect()
}
