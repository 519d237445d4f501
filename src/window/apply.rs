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
use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, Preconditions};
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
                let Some((api, ar)) = self.api(namespace, *target) else {
                    return Ok(None);
                };
                let params = write::apply(manager);
                let body = |a: &BTreeMap<String, String>| {
                    let ns = (*target == Target::Pod).then_some(namespace);
                    annotation_body(&ar, ns, name, uid, a)
                };
                match api
                    .patch(name, &params, &Patch::Apply(body(annotations)))
                    .await
                {
                    Err(e) if is_conflict(&e) && !annotations.is_empty() => {
                        let meta = api.get_metadata(name).await?.metadata;
                        let kept = without_conflicts(annotations.clone(), &meta, manager);
                        api.patch(name, &params, &Patch::Apply(body(&kept))).await
                    }
                    other => other,
                }
                .map(|o| o.metadata.resource_version)
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

    /// The API of `target`'s kind (pods in `namespace`), and the kind; none for NodeClaims
    /// without their CRD.
    fn api(&self, namespace: &str, target: Target) -> Option<(Api<DynamicObject>, ApiResource)> {
        let client = self.client.clone();
        let ar = match target {
            Target::Pod => ApiResource::erase::<Pod>(&()),
            Target::Node => ApiResource::erase::<Node>(&()),
            Target::NodeClaim => self.node_claims.clone()?,
        };
        let api = match target {
            Target::Pod => Api::namespaced_with(client, namespace, &ar),
            _ => Api::all_with(client, &ar),
        };
        Some((api, ar))
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
    ar: &ApiResource,
    namespace: Option<&str>,
    name: &str,
    uid: &str,
    annotations: &BTreeMap<String, String>,
) -> Value {
    let mut metadata = json!({"name": name, "uid": uid});
    if !annotations.is_empty() {
        metadata["annotations"] = json!(annotations);
    }
    if let Some(namespace) = namespace {
        metadata["namespace"] = json!(namespace);
    }
    json!({"apiVersion": ar.api_version, "kind": ar.kind, "metadata": metadata})
}
