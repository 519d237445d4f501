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
    /// Makes one write of namespace `namespace`'s protection. Returns the resourceVersion an
    /// apply left the object at (none for a delete, or a release of an object that is gone).
    pub async fn write(&self, namespace: &str, write: &Write) -> Result<Option<String>, Error> {
        let started = std::time::Instant::now();
        let result = match self.write_once(namespace, write).await {
            // A release of an object that is gone has nothing left to release.
            Err(e) if write.releases() && is_code(&e, 404) => Ok(None),
            other => other,
        };
        let (ok, ms) = (result.is_ok(), started.elapsed().as_millis() as u64);
        debug!(namespace, write = %write.describe(), ok, ms, "wrote");
        let what = write.describe();
        result.map_err(|source| Error::Write { what, source })
    }

    async fn write_once(&self, ns: &str, write: &Write) -> Result<Option<String>, kube::Error> {
        let version = |o: DynamicObject| o.metadata.resource_version;
        let target = match write {
            Write::Annotate { target, .. } => *target,
            Write::ApplyPdb { .. } | Write::DeletePdb { .. } => Target::Pdb,
        };
        let Some((api, ar)) = self.api(ns, target) else {
            return Ok(None);
        };
        match write {
            Write::Annotate {
                name,
                uid,
                manager,
                annotations,
                ..
            } => {
                let params = write::apply(manager);
                let body = |a: &BTreeMap<String, String>| {
                    let mut metadata = json!({"name": name, "uid": uid});
                    if !a.is_empty() {
                        metadata["annotations"] = json!(a);
                    }
                    if matches!(target, Target::Pod | Target::Pdb) {
                        metadata["namespace"] = json!(ns);
                    }
                    Patch::Apply(
                        json!({"apiVersion": ar.api_version, "kind": ar.kind, "metadata": metadata}),
                    )
                };
                match api.patch(name, &params, &body(annotations)).await {
                    Err(e) if is_conflict(&e) && !annotations.is_empty() => {
                        let meta = api.get_metadata(name).await?.metadata;
                        let kept = without_conflicts(annotations.clone(), &meta, manager);
                        api.patch(name, &params, &body(&kept)).await
                    }
                    other => other,
                }
                .map(version)
            }
            Write::ApplyPdb { name, workload } => {
                let params = write::apply(&namespace_field_manager(ns));
                let body = Patch::Apply(pdb_body(ns, name, workload));
                api.patch(name, &params, &body).await.map(version)
            }
            Write::DeletePdb {
                name,
                uid,
                resource_version,
            } => {
                let preconditions = Preconditions {
                    uid: Some(uid.clone()),
                    resource_version: Some(resource_version.clone()),
                };
                let dp = DeleteParams {
                    preconditions: Some(preconditions),
                    ..DeleteParams::background()
                };
                api.delete(name, &dp).await.map(|_| None)
            }
        }
    }

    /// The API of `target`'s kind (pods and PDBs in `namespace`), and the kind; none for
    /// NodeClaims without their CRD.
    fn api(&self, namespace: &str, target: Target) -> Option<(Api<DynamicObject>, ApiResource)> {
        let client = self.client.clone();
        let ar = match target {
            Target::Pod => ApiResource::erase::<Pod>(&()),
            Target::Node => ApiResource::erase::<Node>(&()),
            Target::NodeClaim => self.node_claims.clone()?,
            Target::Pdb => ApiResource::erase::<PodDisruptionBudget>(&()),
        };
        let api = match target {
            Target::Pod | Target::Pdb => Api::namespaced_with(client, namespace, &ar),
            Target::Node | Target::NodeClaim => Api::all_with(client, &ar),
        };
        Some((api, ar))
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
