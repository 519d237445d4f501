//! The `TestWindow` custom resource (`disruption-guard.io/v1alpha1`): a span of time during
//! which the selected pods of one namespace are protected from voluntary disruption.
//!
//! The API server is the only state: the HTTP API creates and patches these objects, the
//! window controller reads them and writes `status` ([`super::window_status`]).

// `printcolumn(...)` repeats `type_ = ...` by design; clippy reads that as duplicated attributes.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::core::Duration;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::window_status::TestWindowStatus;

/// Desired state of a test window.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "disruption-guard.io",
    version = "v1alpha1",
    kind = "TestWindow",
    plural = "testwindows",
    shortname = "tw",
    namespaced,
    status = "TestWindowStatus",
    derive = "PartialEq",
    doc = "A span of time during which the selected pods are protected from voluntary disruption.",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    // A future date would print as "<invalid>" with type date (kubectl shows dates as ages).
    printcolumn(name = "Expires", type_ = "string", json_path = ".status.expiresAt"),
    printcolumn(name = "Pods", type_ = "integer", json_path = ".status.protected.pods"),
    printcolumn(
        name = "Nodes",
        type_ = "integer",
        json_path = ".status.protected.nodes"
    ),
    printcolumn(name = "Reason", type_ = "string", json_path = ".spec.reason"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.openedBy) == has(oldSelf.openedBy) && (!has(self.openedBy) || self.openedBy == oldSelf.openedBy)").message("spec.openedBy is written once, when the window is created, and cannot be added, changed or removed"))]
pub struct TestWindowSpec {
    /// Pods of this namespace to protect; an empty selector selects every pod. Pods a DaemonSet
    /// runs are left out unless `protect.daemonSets` is true.
    #[serde(default)]
    #[x_kube(validation = Rule::new("!has(self.matchExpressions) || self.matchExpressions.all(e, e.operator in ['In', 'NotIn', 'Exists', 'DoesNotExist'])").message("selector operators are In, NotIn, Exists and DoesNotExist"))]
    #[x_kube(validation = Rule::new("!has(self.matchExpressions) || self.matchExpressions.all(e, (e.operator in ['In', 'NotIn']) == (has(e.values) && size(e.values) > 0))").message("In and NotIn need values; Exists and DoesNotExist take none"))]
    #[x_kube(validation = Rule::new("!has(self.matchLabels) || self.matchLabels.all(k, size(k) > 0 && size(k) <= 317 && size(self.matchLabels[k]) <= 63)").message("matchLabels keys and values must be valid label keys and values"))]
    pub selector: LabelSelector,

    /// How long the window stays open, counted from when it opened (Go duration: `30m`, `1h`).
    #[x_kube(validation = Rule::new("duration(self) > duration('0s') && duration(self) <= duration('168h')").message("ttl must be a duration between 1s and 168h"))]
    #[serde(deserialize_with = "super::duration::deserialize_ttl")]
    pub ttl: Duration,

    /// Moment the window ends when it was renewed: overrides `openedAt + ttl` when later. The
    /// operator caps it at `openedAt + --max-ttl`; the API server refuses a time outside
    /// 1970–2999, which no window can reach (a CRD rule cannot read `openedAt`, kept in the
    /// status, or the current time, so the bound is fixed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= timestamp('1970-01-01T00:00:00Z') && self < timestamp('3000-01-01T00:00:00Z')").message("expiresAt must be a time from 1970 to 2999 (a window lasts at most its --max-ttl anyway)"))]
    pub expires_at: Option<Time>,

    /// Set by a close: the window releases its protection and keeps its report.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub closed: bool,

    /// Free-form reason shown in `kubectl get tw`, Events and reports.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 256))]
    pub reason: String,

    /// What to protect; everything is on by default.
    #[serde(default)]
    pub protect: Protect,

    /// Where the window comes from (CI provider, repository, run); shown in reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ci: Option<CiInfo>,

    /// Who opened the window, as the HTTP API authenticated them (written by the API; unlike
    /// `ci`, never taken from the request body). Immutable (a CEL transition rule on `spec`);
    /// the chart's admission policy lets only the operator's ServiceAccount create a window
    /// that has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opened_by: Option<OpenedBy>,
}

/// The authenticated opener of a window: a Kubernetes user, a static token, or a CI id-token
/// (then its issuer, subject and, for GitHub and GitLab, the repository, ref and run).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema, ToSchema)]
#[serde(rename_all = "camelCase")]
// The HTTP API shows it as stored (a window's `openedBy`), named `OpenedByView` in its document.
#[schema(as = OpenedByView)]
pub struct OpenedBy {
    /// The identity's name: `system:serviceaccount:ns:sa`, `static:<name>`, `oidc:<iss>#<sub>`.
    pub name: String,
    /// The id-token's `iss`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// The id-token's `sub`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// The repository or project (GitHub `repository`, GitLab `project_path`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    /// The git ref the job ran for (`ref`).
    #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
    pub git_ref: Option<String>,
    /// The run (GitHub `run_id`/`run_attempt`, GitLab `pipeline_id`/`job_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
    /// The CITrust that granted the open, `namespace/name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust: Option<String>,
}

impl OpenedBy {
    /// One line for Events and logs: the name, then what the CI claims add.
    pub fn summary(&self) -> String {
        let mut text = self.name.clone();
        let extra: Vec<String> = [
            ("repository", &self.repository),
            ("ref", &self.git_ref),
            ("run", &self.run),
            ("trust", &self.trust),
        ]
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k} {v}")))
        .collect();
        if !extra.is_empty() {
            text.push_str(&format!(" ({})", extra.join(", ")));
        }
        text
    }
}

/// Which kinds of protection a window applies.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Protect {
    /// A PodDisruptionBudget (`maxUnavailable: 0`) per protected workload.
    #[serde(default = "yes")]
    pub pod_disruption_budgets: bool,
    /// `karpenter.sh/do-not-disrupt` and `safe-to-evict: "false"` on each selected pod.
    #[serde(default = "yes")]
    pub do_not_disrupt: bool,
    /// `do-not-disrupt` and `scale-down-disabled` on each node hosting a protected pod.
    #[serde(default = "yes")]
    pub nodes: bool,
    /// Write the pod annotation as the Go duration ending at `expiresAt` (Karpenter 1.12+), so
    /// Karpenter stops honouring it on time even if the operator is down at expiry.
    #[serde(default)]
    pub karpenter_duration: bool,
    /// Also protect pods that a DaemonSet runs, and so the nodes they run on. Off by default:
    /// a DaemonSet runs a pod on every node, so a selector that matches its pods (an empty one
    /// does) would keep every node of the cluster from being consolidated.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub daemon_sets: bool,
}

fn yes() -> bool {
    true
}

impl Default for Protect {
    fn default() -> Self {
        Self {
            pod_disruption_budgets: true,
            do_not_disrupt: true,
            nodes: true,
            karpenter_duration: false,
            daemon_sets: false,
        }
    }
}

/// Free-form description of the CI run that opened a window.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CiInfo {
    /// CI system, e.g. `github`, `gitlab`, `argocd`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Repository the run belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    /// The CI system's id for the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// Link to the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}
