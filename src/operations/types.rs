//! Wire types of the HTTP API: request bodies and the view of a window.
//!
//! They are the API's own contract, separate from the CRD: the OpenAPI document is generated
//! from them, and [`WindowView::from_window`] ([`super::view`]) is the one place a
//! `TestWindow` becomes JSON.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::resources::{CiInfo, OpenedBy};

/// Body of `POST /v1/namespaces/{namespace}/windows`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OpenRequest {
    /// Pods to protect: a label selector string (`app=web,tier in (a,b)`) or an object with
    /// `matchLabels` / `matchExpressions`. Absent or empty selects every pod of the namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<SelectorInput>,
    /// How long the window stays open (Go duration, e.g. `30m`); the server's default when
    /// absent, at most the server's maximum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = "30m", pattern = r"^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$")]
    pub ttl: Option<String>,
    /// Why the window is open; shown in reports (at most 256 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 256)]
    pub reason: Option<String>,
    /// Where the request comes from; shown in reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ci: Option<CiMeta>,
    /// What to protect beyond the defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protect: Option<ProtectInput>,
    /// Name of the window (DNS label); generated when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 63, pattern = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")]
    pub name: Option<String>,
    /// Same as the `Idempotency-Key` header: a retried open with the same key and the same
    /// request returns the same window; the key reused with another request is a 422.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// Fail the open when the window, once Ready, selects no pod: a 422 naming `requirePods`
    /// (type `…/no-pods-selected`, `window` holds its state), and the window is closed again.
    /// Needs `?wait=true` (a 422 without it). Not part of the window: a retry under the same
    /// idempotency key may ask it or not.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub require_pods: bool,
}

/// Protection a window asks for beyond the defaults.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProtectInput {
    /// Also protect pods that a DaemonSet runs, and so the nodes they run on. Off by default:
    /// a DaemonSet runs a pod on every node, so a selector that matches its pods (an empty one
    /// does) would keep every node from being consolidated.
    #[serde(default)]
    pub daemon_sets: bool,
}

/// A label selector, as a string or as an object.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(untagged)]
pub enum SelectorInput {
    /// Kubernetes selector syntax: `app=web,tier!=db,env in (ci,dev),!legacy`.
    Text(String),
    /// The structured form, as in a Deployment's `spec.selector`.
    Object(SelectorObject),
}

/// The structured form of a label selector.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SelectorObject {
    /// Labels a pod must carry with exactly these values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// Set-based requirements, all of which must hold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<SelectorRequirement>,
}

/// One set-based requirement of a label selector.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SelectorRequirement {
    /// Label key.
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: String,
    /// Values for `In` / `NotIn`; empty for `Exists` / `DoesNotExist`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

impl From<&LabelSelector> for SelectorObject {
    fn from(sel: &LabelSelector) -> Self {
        SelectorObject {
            match_labels: sel.match_labels.clone().unwrap_or_default(),
            match_expressions: sel
                .match_expressions
                .iter()
                .flatten()
                .map(|r| SelectorRequirement {
                    key: r.key.clone(),
                    operator: r.operator.clone(),
                    values: r.values.clone().unwrap_or_default(),
                })
                .collect(),
        }
    }
}

impl From<SelectorObject> for LabelSelector {
    fn from(sel: SelectorObject) -> Self {
        LabelSelector {
            match_labels: (!sel.match_labels.is_empty()).then_some(sel.match_labels),
            match_expressions: (!sel.match_expressions.is_empty()).then(|| {
                sel.match_expressions
                    .into_iter()
                    .map(|r| LabelSelectorRequirement {
                        key: r.key,
                        operator: r.operator,
                        values: (!r.values.is_empty()).then_some(r.values),
                    })
                    .collect()
            }),
        }
    }
}

/// Where a window comes from.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CiMeta {
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

impl From<CiMeta> for CiInfo {
    fn from(ci: CiMeta) -> Self {
        CiInfo {
            provider: ci.provider,
            repository: ci.repository,
            run_id: ci.run_id,
            url: ci.url,
        }
    }
}

impl From<&CiInfo> for CiMeta {
    fn from(ci: &CiInfo) -> Self {
        CiMeta {
            provider: ci.provider.clone(),
            repository: ci.repository.clone(),
            run_id: ci.run_id.clone(),
            url: ci.url.clone(),
        }
    }
}

/// Body of `POST …/windows/{name}/renew`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RenewRequest {
    /// New time left, counted from now (Go duration); the server's default when absent,
    /// capped by the server's maximum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = "30m", pattern = r"^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$")]
    pub ttl: Option<String>,
}

/// A window: what it protects, its state and its report.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WindowView {
    /// Name of the window.
    pub name: String,
    /// Namespace of the window.
    pub namespace: String,
    /// `Pending`, `Active`, `Expired` or `Closed`.
    pub phase: String,
    /// True once protection is in effect (the `Ready` condition).
    pub ready: bool,
    /// True once a close was requested.
    pub closed: bool,
    /// The pods it protects.
    pub selector: SelectorObject,
    /// Its time to live (Go duration).
    pub ttl: String,
    /// Why it is open.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Where it comes from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ci: Option<CiMeta>,
    /// True when it also protects pods that DaemonSets run (and their nodes).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub daemon_sets: bool,
    /// Who opened it, as the API authenticated them (absent for windows created otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opened_by: Option<OpenedBy>,
    /// When the object was created (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    /// When it opened (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opened_at: Option<String>,
    /// When it ends by itself (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// When it ended (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<String>,
    /// What is protected right now.
    pub protected: ProtectedView,
    /// What happened to the selection while it was open.
    pub report: ReportView,
    /// Conditions written by the controller (`Ready`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<ConditionView>,
}

/// What a window protects.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ProtectedView {
    /// Workloads covered by a PodDisruptionBudget.
    pub workloads: u32,
    /// Pods carrying do-not-disrupt annotations.
    pub pods: u32,
    /// Nodes carrying do-not-disrupt annotations.
    pub nodes: u32,
    /// PodDisruptionBudgets relied on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pdbs: Vec<String>,
    /// Of `pdbs`, those that existed before the window.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reused_pdbs: Vec<String>,
}

/// Was anything disrupted while the window was open?
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ReportView {
    /// True when no selected pod and no node of the selection was disrupted.
    pub clean: bool,
    /// Evictions a PodDisruptionBudget refused.
    pub evictions_blocked: u32,
    /// Selected pods that went away anyway.
    pub pods_disrupted: u32,
    /// Names of those pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disrupted_pods: Vec<String>,
    /// Rollouts made by the drain watcher.
    pub rollouts: u32,
    /// Nodes of the selection that were disrupted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes_disrupted: Vec<String>,
    /// What protection cost: node-seconds during which a node Karpenter could disrupt was kept
    /// by the window (counted as each hold ends; the status has them by annotation and PDB).
    #[serde(default)]
    pub held_node_seconds: u64,
    /// The most the window protected at once while it was open, each count on its own; kept
    /// after the release, which clears `protected`.
    #[serde(default)]
    pub peak_protected: PeakView,
}

/// The most of each kind a window protected at once while it was open.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PeakView {
    /// Workloads covered by a PodDisruptionBudget.
    pub workloads: u32,
    /// Pods carrying do-not-disrupt annotations.
    pub pods: u32,
    /// Nodes carrying do-not-disrupt annotations.
    pub nodes: u32,
}

/// A status condition.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ConditionView {
    /// Condition type, e.g. `Ready`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Machine-readable reason.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
    /// When the status last changed (RFC 3339).
    pub last_transition_time: String,
}

/// Body of `GET /v1/namespaces/{namespace}/windows`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq)]
pub struct WindowList {
    /// The windows, by name.
    pub items: Vec<WindowView>,
}
