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
//!   bounds: {maxTtl: 1h, matchLabels: {tier: backend}}
//! ```

// `printcolumn(...)` repeats `type_ = ...` by design; clippy reads that as duplicated attributes.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

use kube::core::Duration;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Namespace label: `"false"` makes the operator ignore every `CITrust` in the namespace.
pub const CI_TRUST_LABEL: &str = "disruption-guard.io/ci-trust";

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
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
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
    #[schemars(length(min = 1, max = 512))]
    pub subject: String,

    /// Further claims that must be present with exactly these values (string form: a number
    /// `1234` matches `"1234"`), e.g. `event_name: push`, `repository_owner_id`, `ref_protected`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub claims: BTreeMap<String, String>,

    /// What a matching token may do here.
    #[schemars(length(min = 1))]
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
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Bounds {
    /// Longest `ttl` an open or a renew may ask for (Go duration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_ttl: Option<Duration>,
    /// Labels every window's selector must require with these values (in its `matchLabels`),
    /// so a window selects only pods carrying them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
}
