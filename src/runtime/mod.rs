//! The runtime every component runs on: the client to the API server (its requests counted,
//! [`requests`]), the shared caches, leader status, readiness, shutdown, the identity the
//! operator writes Events and holds the Lease under, how every write is made (field managers,
//! conflict retry, API answer codes: [`write`]), the one HTTP server the API and the webhook
//! share ([`http_server`], within the limits of [`limited_server`]), and the reconcile-duration
//! histogram every controller records into ([`reconciles`]) with controller-runtime's series
//! beside it ([`controller_runtime`]). The wiring registers the metric families defined here.
//!
//! Layering: the runtime depends only on [`crate::resources`] and [`crate::k8s`]; the rollout
//! ([`crate::rollout`]) and the components (`window`, `drain`, `api`, `intercept`) depend on it;
//! `operator` wires them together. Nothing here imports the rollout, a component or the wiring.

use std::sync::Arc;

use kube::Client;
use kube::runtime::events::Reporter;
use tokio_util::sync::CancellationToken;

pub mod address_slots;
pub mod caches;
pub mod connection;
pub mod contact;
pub mod controller_runtime;
pub mod events;
pub mod fresh_cache;
pub mod held;
pub mod http_server;
pub mod keyed_limit;
pub mod labels;
pub mod leader;
pub mod limited_server;
pub mod lookup;
pub mod memory;
pub mod note;
pub mod open_files;
pub mod pod_scopes;
pub mod readable;
pub mod readiness;
pub mod reconciles;
pub mod reflect;
pub mod refusals;
pub mod requests;
pub mod shutdown;
pub mod write;

pub use caches::{Caches, NodeTrigger};
pub use leader::Leadership;
pub use pod_scopes::{Pods, Scope};
pub use readiness::Readiness;
pub use reconciles::{ReconcileMetrics, Reconciles};
pub use requests::RequestMetrics;

/// What every component shares; cheap to clone.
#[derive(Clone)]
pub struct Runtime {
    /// Client for the cluster the operator runs against (one connection, see [`connection`]).
    pub client: Client,
    /// The namespaces the operator acts in (`--namespaces`); every namespace when empty.
    pub namespaces: Arc<[String]>,
    /// Whether this replica may write (leader election).
    pub leader: Leadership,
    /// Readiness: true once every watch has synced.
    pub ready: Arc<Readiness>,
    /// Cancelled when the process is asked to stop.
    pub shutdown: CancellationToken,
    /// This replica's name: the Lease holder's identity and the Events' reporting instance.
    pub identity: Arc<str>,
}

impl Runtime {
    /// The one namespace namespaced watches are limited to, when `--namespaces` names exactly
    /// one; otherwise they watch every namespace and decisions filter with [`Self::in_scope`].
    pub fn watch_scope(&self) -> Option<&str> {
        match &*self.namespaces {
            [only] => Some(only.as_str()),
            _ => None,
        }
    }

    /// An Api over the watch scope ([`Self::watch_scope`]): one namespace, or every namespace.
    pub fn api<K>(&self) -> kube::Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        caches::scoped(&self.client, self.watch_scope())
    }

    /// Whether the operator acts in `namespace` (the `--namespaces` scope).
    pub fn in_scope(&self, namespace: &str) -> bool {
        in_scope(&self.namespaces, namespace)
    }

    /// Who the operator's Events name as their reporter.
    pub fn reporter(&self) -> Reporter {
        Reporter {
            controller: crate::resources::names::FIELD_MANAGER.into(),
            instance: Some(self.identity.to_string()),
        }
    }
}

/// Whether `namespaces` (`--namespaces`; every namespace when empty) admits `namespace`.
pub fn in_scope(namespaces: &[String], namespace: &str) -> bool {
    namespaces.is_empty() || namespaces.iter().any(|n| n == namespace)
}

/// The identity of a replica not told its name (`--leader-election-identity`, the pod name in
/// the chart): the host name, else a name made from the process id.
pub fn host_identity() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| format!("disruption-guard-{}", std::process::id()))
}
