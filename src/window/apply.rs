//! The thin I/O layer: turns planned [`Write`]s into API calls.
//!
//! Every annotation write is a server-side apply with the write's field manager (the
//! namespace's, `disruption-guard/<namespace>`) that names the object's UID, so it can never
//! create an object that went away meanwhile (the API server answers 409 "uid mismatch"). A
//! release is the same apply with no annotations: the API server then removes exactly the
//! fields that manager owned and nothing a person or another namespace holds. Applies never
//! force: a value someone else owns is left to them (the planner skips those it sees; one a
//! person shares, which the caches cannot show, is found on the conflict and left too).
//!
//! A guard PDB is applied with the namespace's manager, and deleted with UID and resourceVersion
//! preconditions: a PDB that changed since it was read (409) is left to the next pass, which
//! decides again from what it then sees.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use kube::{Api, Client};
use serde_json::{Value, json};
use tracing::debug;

use super::error::Error;
use super::model::Workload;
use super::plan::{Target, Write, without_conflicts};
use crate::resources::names::{
    MANAGED_BY_KEY, MANAGED_BY_VALUE, WORKLOAD_LABEL, namespace_field_manager,
};
use crate::runtime::write::{self, is_code, is_conflict};

/// Where writes go.
#[derive(Clone)]
pub struct Writer {
    pub client: Client,
    /// Karpenter's NodeClaim resource, when installed.
    pub node_claims: Option<ApiResource>,
}

impl Writer {
    /// Makes one write of namespace `namespace`'s protection; each is timed in the debug log.
    /// Returns the resourceVersion an apply left the object at (none for a release of a PDB, a
    /// delete, or an object that is gone).
    pub async fn write(&self, namespace: &str, write: &Write) -> Result<Option<String>, Error> {
        let started = std::time::Instant::now();
        let result = self.write_once(namespace, write).await;
        debug!(
            namespace,
            write = %write.describe(),
            ok = result.is_ok(),
            ms = started.elapsed().as_millis() as u64,
            "wrote"
        );
        result.map_err(|source| Error::Write {
            what: write.describe(),
            source,
        })
    }

    async fn write_once(
        &self,
        namespace: &str,
        write: &Write,
    ) -> Result<Option<String>, kube::Error> {
        let gone = |e: &kube::Error| write.releases() && is_code(e, 404);
        let result = match write {
            Write::Annotate {
                target,
                name,
                uid,
                manager,
                annotations,
            } => {
                let params = write::apply(manager);
                let body = annotation_body(namespace, *target, name, uid, annotations);
                match self
                    .annotate(namespace, *target, name, &params, &body)
                    .await
                {
                    // Another manager shares a key whose value the namespace now wants changed:
                    // read the object and apply without such keys (theirs stay as they are).
                    Err(e) if is_conflict(&e) && !annotations.is_empty() => {
                        let meta = self.read_meta(namespace, *target, name).await?;
                        let kept = without_conflicts(annotations.clone(), &meta, manager);
                        let body = annotation_body(namespace, *target, name, uid, &kept);
                        self.annotate(namespace, *target, name, &params, &body)
                            .await
                    }
                    other => other,
                }
            }
            Write::ApplyPdb { name, workload } => {
                let params = write::apply(&namespace_field_manager(namespace));
                let body = pdb_body(namespace, name, workload);
                self.pdbs(namespace)
                    .patch(name, &params, &Patch::Apply(&body))
                    .await
                    .map(|o| o.metadata.resource_version)
            }
            Write::ReleasePdb { name, uid, manager } => {
                let body = json!({
                    "apiVersion": "policy/v1",
                    "kind": "PodDisruptionBudget",
                    "metadata": {"name": name, "namespace": namespace, "uid": uid},
                });
                self.pdbs(namespace)
                    .patch(name, &write::apply(manager), &Patch::Apply(&body))
                    .await
                    .map(|_| None)
            }
            Write::DeletePdb {
                name,
                uid,
                resource_version,
            } => {
                let dp = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: Some(uid.clone()),
                        resource_version: Some(resource_version.clone()),
                    }),
                    ..DeleteParams::background()
                };
                self.pdbs(namespace).delete(name, &dp).await.map(|_| None)
            }
        };
        // A release of an object that is gone has nothing left to release.
        match result {
            Err(e) if gone(&e) => Ok(None),
            other => other,
        }
    }

    /// Applies `body` (see [`annotation_body`]) to the pod, node or NodeClaim `name`.
    async fn annotate(
        &self,
        namespace: &str,
        target: Target,
        name: &str,
        params: &PatchParams,
        body: &Value,
    ) -> Result<Option<String>, kube::Error> {
        let patch = Patch::Apply(body);
        match target {
            Target::Pod => Api::<Pod>::namespaced(self.client.clone(), namespace)
                .patch(name, params, &patch)
                .await
                .map(|o| o.metadata.resource_version),
            Target::Node => Api::<Node>::all(self.client.clone())
                .patch(name, params, &patch)
                .await
                .map(|o| o.metadata.resource_version),
            Target::NodeClaim => match &self.node_claims {
                Some(ar) => Api::<DynamicObject>::all_with(self.client.clone(), ar)
                    .patch(name, params, &patch)
                    .await
                    .map(|o| o.metadata.resource_version),
                None => Ok(None),
            },
        }
    }

    /// The metadata of the pod, node or NodeClaim `name`, with every manager's entries.
    async fn read_meta(
        &self,
        namespace: &str,
        target: Target,
        name: &str,
    ) -> Result<ObjectMeta, kube::Error> {
        let client = self.client.clone();
        match (target, &self.node_claims) {
            (Target::Pod, _) => Api::<Pod>::namespaced(client, namespace)
                .get_metadata(name)
                .await
                .map(|o| o.metadata),
            (Target::Node, _) => Api::<Node>::all(client)
                .get_metadata(name)
                .await
                .map(|o| o.metadata),
            (Target::NodeClaim, Some(ar)) => Api::<DynamicObject>::all_with(client, ar)
                .get_metadata(name)
                .await
                .map(|o| o.metadata),
            (Target::NodeClaim, None) => Ok(ObjectMeta::default()),
        }
    }

    fn pdbs(&self, namespace: &str) -> Api<PodDisruptionBudget> {
        Api::namespaced(self.client.clone(), namespace)
    }
}

/// The guard PDB `name` over `workload`: `maxUnavailable: 0` over its selector, labelled as the
/// guard's (and with the workload it covers).
fn pdb_body(namespace: &str, name: &str, workload: &Workload) -> Value {
    let mut labels = json!({MANAGED_BY_KEY: MANAGED_BY_VALUE});
    if let Some(v) = workload.label_value() {
        labels[WORKLOAD_LABEL] = json!(v);
    }
    json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"maxUnavailable": 0, "selector": workload.selector},
    })
}

/// The apply body that sets `annotations` on `target` `name` (uid-preconditioned, so it never
/// re-creates an object that went away); empty annotations release the manager's ones.
fn annotation_body(
    namespace: &str,
    target: Target,
    name: &str,
    uid: &str,
    annotations: &BTreeMap<String, String>,
) -> Value {
    let (api_version, kind) = match target {
        Target::Pod => ("v1", "Pod"),
        Target::Node => ("v1", "Node"),
        Target::NodeClaim => ("karpenter.sh/v1", "NodeClaim"),
    };
    let mut metadata = json!({"name": name, "uid": uid});
    if !annotations.is_empty() {
        metadata["annotations"] = json!(annotations);
    }
    if target == Target::Pod {
        metadata["namespace"] = json!(namespace);
    }
    json!({"apiVersion": api_version, "kind": kind, "metadata": metadata})
}
