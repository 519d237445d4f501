//! The `CITrust` custom resource (`disruption-guard.io/v1alpha1`, namespaced): which CI
//! OIDC id-tokens may use the HTTP API in the namespace the object lives in, and for what.
//!
//! It lives where the namespace's owners can see and change it (the chart aggregates it into
//! the ordinary `edit` role), not in the operator's flags. The operator only honours it for an
//! issuer it trusts (`--oidc-issuer`), and not at all in a namespace labelled
//! [`CI_TRUST_LABEL`]`: "false"` (cluster admins forbid CI trust there).
//!
//! ```yaml
//! apiVersion: disruption-guard.io/v1alpha1
//! kind: CITrust
//! metadata: {name: shop-main, namespace: shop}
//! spec:
//!   issuer: https://token.actions.githubusercontent.com
//!   subject: "repo:acme/shop:ref:refs/heads/main"
//!   claims: {event_name: push, repository_owner_id: "1234"}
//!   grants: [open, renew, close, read]
//!   bounds: {maxTtl: 1h, matchLabels: {tier: backend}, daemonSets: false}
//! ```
//!
//! Whoever may edit a namespace may write one, so every field is bounded where it is declared
//! (lengths, counts, at most [`MAX_SUBJECT_STARS`] `*` in `subject`, `maxTtl` a duration the
//! API server checks), and the operator reads `maxTtl` with its own parser: a stored object the
//! CRD of the day would refuse grants nothing, for that trust alone, and never stops the cache.

// `printcolumn(...)` repeats `type_ = ...` by design; clippy reads that as duplicated attributes.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Namespace label: `"false"` makes the operator ignore every `CITrust` in the namespace.
pub const CI_TRUST_LABEL: &str = "disruption-guard.io/ci-trust";

/// The most `*` a `subject` pattern may hold (the CRD refuses more; the matcher is linear
/// whatever the count).
pub const MAX_SUBJECT_STARS: usize = 8;

/// Which CI id-tokens may act on the windows of this namespace.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "disruption-guard.io",
    version = "v1alpha1",
    kind = "CITrust",
    plural = "citrusts",
    shortname = "cit",
    namespaced,
    derive = "PartialEq",
    doc = "Which CI OIDC id-tokens may open, renew, close or read windows in this namespace.",
    printcolumn(name = "Issuer", type_ = "string", json_path = ".spec.issuer"),
    printcolumn(name = "Subject", type_ = "string", json_path = ".spec.subject"),
    printcolumn(name = "Grants", type_ = "string", json_path = ".spec.grants"),
    printcolumn(name = "Max TTL", type_ = "string", json_path = ".spec.bounds.maxTtl"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct CITrustSpec {
    /// The token's `iss`, exactly (e.g. `https://token.actions.githubusercontent.com`). The
    /// operator must also trust it (`--oidc-issuer`), or this object grants nothing.
    #[x_kube(validation = Rule::new("self.startsWith('https://')").message("issuer must be an https:// URL"))]
    #[schemars(length(min = 9, max = 512))]
    pub issuer: String,

    /// The token's `sub`: exact, or with `*` standing for one or more characters other than
    /// `:` and `/`. The first two `:`-separated parts (GitHub `repo:<owner>/<repo>`, GitLab
    /// `project_path:<group>/<project>`) must be literal, so a pattern never matches another
    /// repository or a fork.
    #[x_kube(validation = Rule::new("self.matches('^[^*:]+:[^*:]+(:.*)?$')").message("the first two ':'-separated parts of subject (kind and repository) must be literal, without '*'"))]
    #[x_kube(validation = Rule::new("self.matches('^[^*]*([*][^*]*){0,8}$')").message("subject may hold at most 8 '*'"))]
    #[schemars(length(min = 1, max = 512))]
    pub subject: String,

    /// Further claims that must be present with exactly these values (string form: a number
    /// `1234` matches `"1234"`), e.g. `event_name: push`, `repository_owner_id`, `ref_protected`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[x_kube(validation = Rule::new("self.all(k, size(k) <= 128 && size(self[k]) <= 512)").message("claim names are at most 128 characters, values at most 512"))]
    #[schemars(extend("maxProperties" = 32))]
    pub claims: BTreeMap<String, String>,

    /// What a matching token may do here.
    #[schemars(length(min = 1, max = 4))]
    pub grants: Vec<Grant>,

    /// Limits on the windows opened or renewed under this trust.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bounds: Option<Bounds>,
}

/// An operation a trust grants.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Grant {
    /// Open a window.
    Open,
    /// Renew a window.
    Renew,
    /// Close a window.
    Close,
    /// Read and list windows.
    Read,
}

impl Grant {
    /// The grant as the object spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Grant::Open => "open",
            Grant::Renew => "renew",
            Grant::Close => "close",
            Grant::Read => "read",
        }
    }
}

/// Limits on the windows a trust lets open or renew.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Bounds {
    /// Longest `ttl` an open or a renew may ask for (Go duration, 1s to 168h). Kept as text
    /// and read with the operator's own parser ([`Bounds::max_ttl`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("duration(self) > duration('0s') && duration(self) <= duration('168h')").message("maxTtl must be a duration between 1s and 168h"))]
    #[schemars(length(max = 64))]
    pub max_ttl: Option<String>,
    /// Labels every window's selector must require with these values (in its `matchLabels`),
    /// so a window selects only pods carrying them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[x_kube(validation = Rule::new("self.all(k, size(k) <= 317 && size(self[k]) <= 63)").message("matchLabels keys and values must be valid label keys and values"))]
    #[schemars(extend("maxProperties" = 32))]
    pub match_labels: BTreeMap<String, String>,
    /// Whether windows under this trust may protect DaemonSet pods (`protect.daemonSets`).
    /// Off unless set: a DaemonSet runs a pod on every node, so such a window can keep every
    /// node of the cluster from being consolidated.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub daemon_sets: bool,
}

impl Bounds {
    /// The `maxTtl` bound, read with the operator's parser; the reason, naming the field,
    /// when the stored text is not a duration it accepts.
    pub fn max_ttl(&self) -> Result<Option<std::time::Duration>, String> {
        match &self.max_ttl {
            None => Ok(None),
            Some(text) => super::duration::parse(text).map(Some).map_err(|err| {
                let err: String = err.chars().take(200).collect();
                format!("bounds.maxTtl: {err}")
            }),
        }
    }
}
