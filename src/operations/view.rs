//! How a `TestWindow` becomes its [`WindowView`], the one JSON form of a window the API and the
//! client share, and what the view says of the window's end and of a selection of no pod.

use kube::ResourceExt;

use super::types::*;
use crate::resources::TestWindow;
use crate::resources::window_status::{self, Phase};

impl WindowView {
    /// The view of a `TestWindow` object.
    pub fn from_window(tw: &TestWindow) -> WindowView {
        let status = tw.status.clone().unwrap_or_default();
        let ready = status.is_ready();
        let ts = |t: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| {
            t.as_ref().map(|t| t.0.to_string())
        };
        WindowView {
            name: tw.name_any(),
            namespace: tw.namespace().unwrap_or_default(),
            phase: status.phase.as_str().to_string(),
            ready,
            closed: tw.spec.closed,
            selector: SelectorObject::from(&tw.spec.selector),
            ttl: go_duration(&tw.spec.ttl),
            reason: tw.spec.reason.clone(),
            ci: tw.spec.ci.as_ref().map(CiMeta::from),
            daemon_sets: tw.spec.protect.daemon_sets,
            opened_by: tw.spec.opened_by.clone(),
            created_at: ts(&tw.metadata.creation_timestamp),
            opened_at: ts(&status.opened_at),
            expires_at: ts(&status.expires_at),
            ended_at: ts(&status.ended_at),
            protected: ProtectedView {
                workloads: status.protected.workloads,
                pods: status.protected.pods,
                nodes: status.protected.nodes,
                pdbs: status.protected.pdbs.clone(),
                reused_pdbs: status.protected.reused_pdbs.clone(),
            },
            report: ReportView {
                clean: status.report.is_clean(),
                evictions_blocked: status.report.evictions_blocked,
                pods_disrupted: status.report.pods_disrupted,
                disrupted_pods: status.report.disrupted_pods.clone(),
                rollouts: status.report.rollouts,
                nodes_disrupted: status.report.nodes_disrupted.clone(),
                held_node_seconds: status.report.held_node_seconds.total(),
                peak_protected: PeakView {
                    workloads: status.report.peak_protected.workloads,
                    pods: status.report.peak_protected.pods,
                    nodes: status.report.peak_protected.nodes,
                },
            },
            conditions: status
                .conditions
                .iter()
                .map(|c| ConditionView {
                    type_: c.type_.clone(),
                    status: c.status.clone(),
                    reason: c.reason.clone(),
                    message: c.message.clone(),
                    last_transition_time: c.last_transition_time.0.to_string(),
                })
                .collect(),
        }
    }

    /// Whether the window is Ready over no pod of its namespace (`Ready` True with reason
    /// `NoPodsSelected`): open, but protecting nothing.
    pub fn selects_no_pod(&self) -> bool {
        let ready = self
            .conditions
            .iter()
            .find(|c| c.type_ == window_status::READY);
        window_status::selects_no_pod(
            ready.map(|c| c.status.as_str()),
            ready.map(|c| c.reason.as_str()),
        )
    }

    /// Whether the window has ended and the controller has released its protection (it
    /// records the end first, with `Ready` False for reason `Releasing`, and releases after).
    pub fn is_finished(&self) -> bool {
        let ready = self
            .conditions
            .iter()
            .find(|c| c.type_ == window_status::READY);
        Phase::from_name(&self.phase).is_some_and(|phase| {
            window_status::is_released(phase, ready.map(|c| c.reason.as_str()))
        })
    }
}

/// A duration in Go syntax, as `kubectl` shows it (`30m0s` → `30m`).
pub fn go_duration(d: &kube::core::Duration) -> String {
    let std: std::time::Duration = (*d).into();
    crate::resources::duration::format(std)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::OpenedBy;
    use serde_json::json;

    #[test]
    fn opened_by_reads_on_the_wire_as_the_window_stores_it() {
        let limits = crate::operations::ttl::TtlLimits {
            default: std::time::Duration::from_secs(1800),
            max: std::time::Duration::from_secs(7200),
        };
        let req = crate::operations::types::OpenRequest::default();
        let mut tw =
            crate::operations::open::build_window("shop", &req, Some("k"), &limits).unwrap();
        let by = json!({
            "name": "oidc:https://token.actions.githubusercontent.com#repo:org/shop:ref:refs/heads/main",
            "issuer": "https://token.actions.githubusercontent.com",
            "subject": "repo:org/shop:ref:refs/heads/main",
            "repository": "org/shop",
            "ref": "refs/heads/main",
            "run": "42/1",
            "trust": "shop/github",
        });
        tw.spec.opened_by = Some(serde_json::from_value::<OpenedBy>(by.clone()).unwrap());
        let view = serde_json::to_value(WindowView::from_window(&tw)).unwrap();
        assert_eq!(view["openedBy"], by);
        tw.spec.opened_by = Some(OpenedBy {
            name: "static:ci".into(),
            ..Default::default()
        });
        let view = serde_json::to_value(WindowView::from_window(&tw)).unwrap();
        assert_eq!(
            view["openedBy"],
            json!({"name": "static:ci"}),
            "absent claims stay absent"
        );
        let back: WindowView = serde_json::from_value(view).unwrap();
        assert_eq!(back.opened_by.unwrap().name, "static:ci");
    }
}
