//! Writing a window's status: server-side apply by the shared field manager, and a fallback
//! for an installed CRD older than the operator.

use std::sync::atomic::{AtomicBool, Ordering};

use kube::ResourceExt;
use kube::api::{Patch, PostParams};
use serde_json::json;
use tracing::{debug, warn};

use super::context::Context;
use super::error::Error;
use crate::resources::names::FIELD_MANAGER;
use crate::resources::{TestWindow, TestWindowStatus};
use crate::runtime::write::{self, retry_conflicts};

/// Set once the operator has warned that the installed CRD lacks status fields.
static OLD_CRD_WARNED: AtomicBool = AtomicBool::new(false);

/// Writes the status by server-side apply. When the installed CRD is older than this
/// operator (a field of the status is not in its schema, e.g. after an upgrade: Helm never
/// upgrades CRDs), apply is refused as a whole; the status is then replaced instead, so the
/// API server prunes the unknown fields and the rest of the status is still written.
pub async fn write_status(
    ctx: &Context,
    window: &TestWindow,
    status: &TestWindowStatus,
) -> Result<(), Error> {
    let api = ctx.windows(window);
    let name = window.name_any();
    debug!(
        window = %name,
        phase = status.phase.as_str(),
        ready = status.is_ready(),
        held = status.tracking.held.len(),
        "writing status"
    );
    let body = json!({
        "apiVersion": "disruption-guard.io/v1alpha1",
        "kind": "TestWindow",
        "status": status,
    });
    let apply = write::apply_forced(FIELD_MANAGER);
    let applied = api.patch_status(&name, &apply, &Patch::Apply(&body)).await;
    match applied {
        Err(kube::Error::Api(s)) if s.message.contains("field not declared in schema") => {
            if !OLD_CRD_WARNED.swap(true, Ordering::Relaxed) {
                warn!(
                    message = %s.message,
                    "the installed TestWindow CRD is older than this operator; status fields it lacks are dropped: run `disruption-guard crd | kubectl apply --server-side -f -`"
                );
            }
            let (api, name) = (&api, &name);
            retry_conflicts(write::is_conflict, |_| async move {
                let mut next = api.get_status(name).await?;
                next.status = Some(status.clone());
                next.metadata.managed_fields = None;
                api.replace_status(name, &PostParams::default(), &next)
                    .await
                    .map(drop)
            })
            .await
            .map_err(Error::Status)
        }
        other => other.map(drop).map_err(Error::Status),
    }
}
