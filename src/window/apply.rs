//! The thin I/O layer: turns planned [`Write`]s into API calls.
//!
//! Every annotation write is a server-side apply with the window's own field manager
//! (`disruption-guard/<uid>`) that names the object's UID, so it can never create an object
//! that went away meanwhile (the API server answers 409 "uid mismatch"). A release is the same
//! apply with no annotations: the API server then removes exactly the fields that manager
//! owned and nothing a person or another window holds. Applies never force: a value someone
//! else owns is left to them (the planner already skips those).
//!
//! Letting go of a guard PDB is decided from what was read ([`super::pdbs::let_go`]) and
//! preconditioned on it: a release carries the resourceVersion read, a delete the UID and
//! resourceVersion. When the PDB changed meanwhile (409), it is read again and the decision
//! made again, a few times, so two windows ending together cannot both just release it.

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use kube::{Api, Client};
use serde_json::{Value, json};
use tracing::debug;

use super::error::Error;
use super::model::Workload;
use super::pdbs::let_go;
use super::plan::{Target, WindowFacts, Write};
use crate::k8s::fields::holds_label;
use crate::resources::names::{
    FIELD_MANAGER, MANAGED_BY_KEY, MANAGED_BY_VALUE, WORKLOAD_LABEL, window_field_manager,
};
use crate::runtime::write::{self, is_code, is_conflict, retry_conflicts};

/// Where writes go.
#[derive(Clone)]
pub struct Writer {
    pub client: Client,
    /// Karpenter's NodeClaim resource, when installed.
    pub node_claims: Option<ApiResource>,
}

impl Writer {
    /// Makes one write for `window`, with `manager` (normally the window's field manager);
    /// each is timed in the debug log. Returns the resourceVersion an apply left the object
    /// at (none for a release of a PDB, a delete, or an object that is gone).
    pub async fn write(
        &self,
        window: &WindowFacts,
        manager: &str,
        write: &Write,
    ) -> Result<Option<String>, Error> {
        let started = std::time::Instant::now();
        let result = self.write_once(window, manager, write).await;
        debug!(
            window = %window.name,
            write = %write.describe(),
            ok = result.is_ok(),
            ms = started.elapsed().as_millis() as u64,
            "wrote"
        );
        result
    }

    async fn write_once(
        &self,
        window: &WindowFacts,
        manager: &str,
        write: &Write,
    ) -> Result<Option<String>, Error> {
        let params = write::apply(manager);
        let wrap = |source| Error::Write {
            what: write.describe(),
            source,
        };
        match write {
            Write::Annotate {
                target,
                name,
                uid,
                annotations,
            } => {
                let body = annotation_body(window, *target, name, uid, annotations);
                // A release of an object that is gone has nothing left to release.
                match self.annotate(window, *target, name, &params, &body).await {
                    Err(e) if annotations.is_empty() && is_code(&e, 404) => Ok(None),
                    other => other.map_err(wrap),
                }
            }
            Write::ApplyPdb { name, workload } => self
                .apply_pdb(window, &params, name, workload)
                .await
                .map_err(wrap),
            Write::ReleasePdb { name, .. } | Write::DeletePdb { name, .. } => self
                .let_go_pdb(window, &params, name, write.clone())
                .await
                .map(|()| None),
        }
    }

    /// Applies `body` (see [`annotation_body`]) to the pod, node or NodeClaim `name`.
    async fn annotate(
        &self,
        window: &WindowFacts,
        target: Target,
        name: &str,
        params: &PatchParams,
        body: &Value,
    ) -> Result<Option<String>, kube::Error> {
        let patch = Patch::Apply(body);
        match target {
            Target::Pod => Api::<Pod>::namespaced(self.client.clone(), &window.namespace)
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

    /// Applies the guard PDB `name` over `workload`, owned by `window`; the first time, also
    /// marks it with the shared manager's managed-by label.
    async fn apply_pdb(
        &self,
        window: &WindowFacts,
        params: &PatchParams,
        name: &str,
        workload: &Workload,
    ) -> Result<Option<String>, kube::Error> {
        let mut labels = json!({MANAGED_BY_KEY: MANAGED_BY_VALUE});
        if let Some(v) = workload.label_value() {
            labels[WORKLOAD_LABEL] = json!(v);
        }
        let body = json!({
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {
                "name": name,
                "namespace": window.namespace,
                "labels": labels,
                "ownerReferences": [owner_reference(window)],
            },
            "spec": {"maxUnavailable": 0, "selector": workload.selector},
        });
        let applied = self
            .pdbs(window)
            .patch(name, params, &Patch::Apply(&body))
            .await?;
        if holds_label(&applied.metadata, FIELD_MANAGER, MANAGED_BY_KEY) {
            return Ok(applied.metadata.resource_version);
        }
        // The managed-by label is also held by the shared manager, which no window's
        // release removes: whatever happens to the windows, the PDB stays findable
        // (by the sweep) until it is deleted. One more write, once per PDB.
        let mark = json!({
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {
                "name": name,
                "namespace": window.namespace,
                "uid": applied.metadata.uid,
                "labels": {MANAGED_BY_KEY: MANAGED_BY_VALUE},
            },
        });
        self.pdbs(window)
            .patch(name, &write::apply(FIELD_MANAGER), &Patch::Apply(&mark))
            .await
            .map(|o| o.metadata.resource_version)
    }

    /// Lets go of PDB `name` with `write`; on a conflict (409: the PDB changed since it was
    /// read) reads it again and decides again with [`let_go`], up to
    /// [`CONFLICT_ATTEMPTS`](crate::runtime::write::CONFLICT_ATTEMPTS) writes. The sweep (no
    /// window) does not decide again: its next run does.
    async fn let_go_pdb(
        &self,
        window: &WindowFacts,
        params: &PatchParams,
        name: &str,
        first: Write,
    ) -> Result<(), Error> {
        let decides_again = |e: &Error| {
            !window.uid.is_empty()
                && matches!(e, Error::Write { source, .. } if is_conflict(source))
        };
        let first = &first;
        retry_conflicts(decides_again, |attempt| async move {
            let write = if attempt == 1 {
                first.clone()
            } else {
                debug!(window = %window.name, pdb = name, attempt, "the PDB changed since it was read, deciding again");
                let fresh = self.pdbs(window).get_opt(name).await;
                let fresh = fresh.map_err(|source| Error::Write {
                    what: first.describe(),
                    source,
                })?;
                match fresh.and_then(|pdb| let_go(&pdb, &window.uid)) {
                    Some(next) => next,
                    None => return Ok(()),
                }
            };
            self.let_go_once(window, params, &write)
                .await
                .map_err(|source| Error::Write {
                    what: write.describe(),
                    source,
                })
        })
        .await
    }

    /// One release (an empty apply preconditioned on the resourceVersion read) or delete (UID
    /// and resourceVersion preconditions) of a PDB; a PDB that is gone needs neither.
    async fn let_go_once(
        &self,
        window: &WindowFacts,
        params: &PatchParams,
        write: &Write,
    ) -> Result<(), kube::Error> {
        let result = match write {
            Write::ReleasePdb {
                name,
                uid,
                resource_version,
            } => {
                let mut metadata = json!({"name": name, "namespace": window.namespace, "uid": uid});
                if !resource_version.is_empty() {
                    metadata["resourceVersion"] = json!(resource_version);
                }
                let body = json!({
                    "apiVersion": "policy/v1",
                    "kind": "PodDisruptionBudget",
                    "metadata": metadata,
                });
                self.pdbs(window)
                    .patch(name, params, &Patch::Apply(&body))
                    .await
                    .map(drop)
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
                self.pdbs(window).delete(name, &dp).await.map(drop)
            }
            _ => Ok(()),
        };
        match result {
            Err(e) if is_code(&e, 404) => Ok(()),
            other => other,
        }
    }

    fn pdbs(&self, window: &WindowFacts) -> Api<PodDisruptionBudget> {
        Api::namespaced(self.client.clone(), &window.namespace)
    }
}

/// The apply body that sets `annotations` on `target` `name` (uid-preconditioned, so it never
/// re-creates an object that went away); empty annotations release the manager's ones.
fn annotation_body(
    window: &WindowFacts,
    target: Target,
    name: &str,
    uid: &str,
    annotations: &std::collections::BTreeMap<String, String>,
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
        metadata["namespace"] = json!(window.namespace);
    }
    json!({"apiVersion": api_version, "kind": kind, "metadata": metadata})
}

/// The owner reference from a guard PDB to a window; garbage collection deletes the PDB once
/// every owning window is gone.
pub fn owner_reference(window: &WindowFacts) -> Value {
    json!({
        "apiVersion": "disruption-guard.io/v1alpha1",
        "kind": "TestWindow",
        "name": window.name,
        "uid": window.uid,
    })
}

/// The field manager of a window's writes.
pub fn manager_of(window: &WindowFacts) -> String {
    window_field_manager(&window.uid)
}
