//! The registration of the eviction webhook: the `ValidatingWebhookConfiguration` that has the
//! API server send every Eviction (`pods/eviction`, CREATE) to the operator.
//!
//! [`build`] makes the object from plain inputs (pure, tested); [`apply`] writes it with
//! server-side apply under the operator's field manager; [`own_username`] asks the API server
//! who the operator is (its own evictions are exempt); [`remove`] is for an uninstall step.
//!
//! Who creates it: in a cluster the chart does (a template with the same content as [`build`],
//! `tests/chart.rs` keeps them equal), and the operator only publishes its CA in `caBundle`
//! ([`Upkeep::CaBundle`], [`ca_bundle_patch`]), so its RBAC needs no `create` on
//! `validatingwebhookconfigurations`, only `get` and `patch` of that one name. Outside Helm
//! (`make run` with an admin kubeconfig) `--intercept-create-webhook` has the operator apply
//! the whole object itself ([`Upkeep::Whole`]).
//!
//! What the object says, and why:
//! - `failurePolicy: Ignore`: while the operator is down or unreachable, evictions go on as if
//!   it were not installed (fail open). For the same reason the operator does not remove the
//!   registration when it stops.
//! - `matchPolicy: Equivalent`: clients evict through `policy/v1` and `policy/v1beta1`
//!   (Cluster Autoscaler); both reach the `pods/eviction` subresource of core `v1` pods.
//! - `namespaceSelector` ([`namespace_selector`]): namespaces labelled
//!   `disruption-guard.io/intercept-evictions: "false"` opt out; with `--namespaces`, only those
//!   namespaces are sent; with `--intercept-namespace-selector`, only the namespaces it selects
//!   (its `matchLabels` and `matchExpressions`, beside the two above), so an eviction elsewhere
//!   never reaches the webhook, nor waits on it. Every selector of kubectl's syntax has this
//!   form; one that selects no namespace once merged is refused at start-up
//!   ([`super::InterceptArgs::checked`]). An `objectSelector` would match the Eviction's
//!   labels, not the pod's, so none is set.
//! - `matchConditions`: the operator's own user is exempt when it is a ServiceAccount (its own
//!   identity, as the chart runs it). The operator never evicts, so this only guards against a
//!   loop; a person's or a tool's user shared with the operator (the admin kubeconfig of
//!   `make run`) is not exempted, or their drains would go unseen.
//! - `sideEffects: NoneOnDryRun`: the webhook records what it saw (metrics, Events), except for
//!   dry runs.
//! - `clientConfig`: the operator's Service in a cluster; outside one (`make run`), a loopback
//!   URL, which reaches the operator when the API server runs on the same host (the test cluster).

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, RuleWithOperations, ServiceReference, ValidatingWebhook,
    ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, OwnerReference,
};
use kube::api::{DeleteParams, ObjectMeta, Patch, PostParams};
use kube::{Api, Client};

use crate::resources::names::{
    CA_BUNDLE_FIELD_MANAGER, FIELD_MANAGER, INTERCEPT_EVICTIONS, MANAGED_BY_KEY, MANAGED_BY_VALUE,
};
use crate::runtime::write;

/// Name of the `ValidatingWebhookConfiguration`.
pub const NAME: &str = "disruption-guard";
/// Name of the webhook in it; the API server's denials quote it
/// (`admission webhook "evictions.disruption-guard.io" denied the request: …`).
pub const WEBHOOK: &str = "evictions.disruption-guard.io";
/// Path the API server posts `AdmissionReview`s to.
pub const PATH: &str = "/evictions";
/// The label the API server sets on every namespace to its name.
pub const NAMESPACE_NAME: &str = "kubernetes.io/metadata.name";
/// Seconds the API server waits for an answer before it ignores the webhook.
pub const DEFAULT_TIMEOUT_SECONDS: i32 = 5;

/// Where the API server reaches the webhook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// In a cluster: the operator's Service (the certificate names `<name>.<namespace>.svc`).
    Service {
        namespace: String,
        name: String,
        port: u16,
    },
    /// Outside a cluster: `https://127.0.0.1:<port>/evictions`, for an API server on this host.
    Loopback { port: u16 },
}

/// What the registration is built from.
#[derive(Debug, Clone, PartialEq)]
pub struct Registration {
    /// Name of the `ValidatingWebhookConfiguration` ([`NAME`] in production).
    pub name: String,
    /// Where the API server reaches the webhook.
    pub endpoint: Endpoint,
    /// Seconds the API server waits for an answer (1–30).
    pub timeout_seconds: i32,
    /// The user whose evictions are not sent: the operator's own, when [`exempt_user`] says so.
    pub own_username: Option<String>,
    /// Only evictions in these namespaces are sent (`--namespaces`); every namespace when empty.
    pub namespaces: Vec<String>,
    /// Only evictions in namespaces this selects are sent (`--intercept-namespace-selector`);
    /// every namespace when empty.
    pub namespace_selector: LabelSelector,
}

impl Registration {
    /// The production registration for `endpoint`: named [`NAME`], the default timeout.
    pub fn new(endpoint: Endpoint, own_username: Option<String>, namespaces: Vec<String>) -> Self {
        Registration {
            name: NAME.to_string(),
            endpoint,
            timeout_seconds: DEFAULT_TIMEOUT_SECONDS,
            own_username,
            namespaces,
            namespace_selector: LabelSelector::default(),
        }
    }
}

/// The registration's `namespaceSelector`: the opt-out label, then `namespaces` (when any),
/// then `selector`'s own `matchLabels` and `matchExpressions`. All must hold.
pub fn namespace_selector(namespaces: &[String], selector: &LabelSelector) -> LabelSelector {
    let mut expressions = vec![LabelSelectorRequirement {
        key: INTERCEPT_EVICTIONS.to_string(),
        operator: "NotIn".to_string(),
        values: Some(vec!["false".to_string()]),
    }];
    if !namespaces.is_empty() {
        expressions.push(LabelSelectorRequirement {
            key: NAMESPACE_NAME.to_string(),
            operator: "In".to_string(),
            values: Some(namespaces.to_vec()),
        });
    }
    expressions.extend(selector.match_expressions.iter().flatten().cloned());
    LabelSelector {
        match_labels: selector
            .match_labels
            .clone()
            .filter(|labels| !labels.is_empty()),
        match_expressions: Some(expressions),
    }
}

/// Whether the process runs in a Kubernetes pod (the API server's Service is in its
/// environment): the webhook is then reached through its Service, otherwise on loopback.
pub fn in_cluster() -> bool {
    std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
}

/// The user whose evictions are not sent: the operator's own, when it is a ServiceAccount
/// (a dedicated identity); a user name shared with people or tools is never exempted.
pub fn exempt_user(own: Option<&str>) -> Option<&str> {
    own.filter(|user| user.starts_with("system:serviceaccount:"))
}

/// The `ValidatingWebhookConfiguration` for `registration`, trusting `ca_bundle` (PEM).
pub fn build(registration: &Registration, ca_bundle: &str) -> ValidatingWebhookConfiguration {
    let client_config = match &registration.endpoint {
        Endpoint::Service {
            namespace,
            name,
            port,
        } => WebhookClientConfig {
            service: Some(ServiceReference {
                namespace: namespace.clone(),
                name: name.clone(),
                path: Some(PATH.to_string()),
                port: Some(i32::from(*port)),
            }),
            ..WebhookClientConfig::default()
        },
        Endpoint::Loopback { port } => WebhookClientConfig {
            url: Some(format!("https://127.0.0.1:{port}{PATH}")),
            ..WebhookClientConfig::default()
        },
    };
    let match_conditions = registration.own_username.as_ref().map(|user| {
        vec![MatchCondition {
            name: "not-the-operator".to_string(),
            expression: format!("request.userInfo.username != {}", cel_string(user)),
        }]
    });
    ValidatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(registration.name.clone()),
            labels: Some(
                [(MANAGED_BY_KEY.to_string(), MANAGED_BY_VALUE.to_string())]
                    .into_iter()
                    .collect(),
            ),
            ..ObjectMeta::default()
        },
        webhooks: Some(vec![ValidatingWebhook {
            name: WEBHOOK.to_string(),
            admission_review_versions: vec!["v1".to_string()],
            client_config: WebhookClientConfig {
                ca_bundle: Some(ByteString(ca_bundle.as_bytes().to_vec())),
                ..client_config
            },
            rules: Some(vec![RuleWithOperations {
                operations: Some(vec!["CREATE".to_string()]),
                api_groups: Some(vec![String::new()]),
                api_versions: Some(vec!["v1".to_string()]),
                resources: Some(vec!["pods/eviction".to_string()]),
                scope: Some("Namespaced".to_string()),
            }]),
            match_policy: Some("Equivalent".to_string()),
            failure_policy: Some("Ignore".to_string()),
            side_effects: "NoneOnDryRun".to_string(),
            timeout_seconds: Some(registration.timeout_seconds),
            namespace_selector: Some(namespace_selector(
                &registration.namespaces,
                &registration.namespace_selector,
            )),
            object_selector: None,
            match_conditions,
        }]),
    }
}

/// Writes the registration with server-side apply (field manager [`FIELD_MANAGER`], forced:
/// the operator owns every field it sets). Every replica applies the same object.
pub async fn apply(
    client: &Client,
    registration: &Registration,
    ca_bundle: &str,
) -> Result<(), kube::Error> {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    api.patch(
        &registration.name,
        &write::apply_forced(FIELD_MANAGER),
        &Patch::Apply(&build(registration, ca_bundle)),
    )
    .await?;
    Ok(())
}

/// How the operator keeps the registration current.
#[derive(Debug, Clone, PartialEq)]
pub enum Upkeep {
    /// The registration `name` exists (the chart installs it): only its `caBundle` is patched.
    CaBundle { name: String },
    /// The operator applies the whole registration (`--intercept-create-webhook`: local runs
    /// with an admin kubeconfig).
    Whole(Registration),
}

impl Upkeep {
    /// Name of the `ValidatingWebhookConfiguration`.
    pub fn name(&self) -> &str {
        match self {
            Upkeep::CaBundle { name } => name,
            Upkeep::Whole(registration) => &registration.name,
        }
    }

    /// Publishes `ca_bundle` (PEM) in the registration, server-side applied (forced: the
    /// operator owns the fields it sets) by [`CA_BUNDLE_FIELD_MANAGER`] or, for the whole
    /// registration, [`FIELD_MANAGER`]. A registration that is
    /// gone is not re-created in [`Upkeep::CaBundle`] mode: the patch fails (403 or 404).
    pub async fn publish(&self, client: &Client, ca_bundle: &str) -> Result<(), kube::Error> {
        match self {
            Upkeep::Whole(registration) => apply(client, registration, ca_bundle).await,
            Upkeep::CaBundle { name } => {
                let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
                api.patch(
                    name,
                    &write::apply_forced(CA_BUNDLE_FIELD_MANAGER),
                    &Patch::Apply(&ca_bundle_patch(name, ca_bundle)),
                )
                .await
                .map(drop)
            }
        }
    }

    /// An owner reference to the registration as it exists now, for objects that must go when
    /// it goes (the certificate Secret: `helm uninstall` deletes the registration, garbage
    /// collection the Secret). `None` when it does not exist.
    pub async fn owner(&self, client: &Client) -> Result<Option<OwnerReference>, kube::Error> {
        let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
        Ok(api.get_opt(self.name()).await?.and_then(|config| {
            Some(OwnerReference {
                api_version: "admissionregistration.k8s.io/v1".to_string(),
                kind: "ValidatingWebhookConfiguration".to_string(),
                name: config.metadata.name?,
                uid: config.metadata.uid?,
                ..OwnerReference::default()
            })
        }))
    }
}

/// The server-side apply body that sets only the `caBundle` of [`WEBHOOK`] in the registration
/// `name`: `webhooks` is a list keyed by `name`, so every other field stays the chart's.
pub fn ca_bundle_patch(name: &str, ca_bundle: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{
            "name": WEBHOOK,
            "clientConfig": {"caBundle": ByteString(ca_bundle.as_bytes().to_vec())},
        }],
    })
}

/// Deletes the registration `name` (absent is fine). For an uninstall step: the operator never
/// removes it itself, since a registration without a running operator fails open.
pub async fn remove(client: &Client, name: &str) -> Result<(), kube::Error> {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// The user name the API server knows the operator by (a SelfSubjectReview), e.g.
/// `system:serviceaccount:disruption-guard:disruption-guard`.
pub async fn own_username(client: &Client) -> Result<Option<String>, kube::Error> {
    let api: Api<SelfSubjectReview> = Api::all(client.clone());
    let review = api
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await?;
    Ok(review
        .status
        .and_then(|s| s.user_info)
        .and_then(|u| u.username))
}

/// A CEL string literal: single-quoted, backslashes and quotes escaped.
fn cel_string(text: &str) -> String {
    let escaped = text.replace('\\', "\\\\").replace('\'', "\\'");
    format!("'{escaped}'")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service() -> Registration {
        Registration::new(
            Endpoint::Service {
                namespace: "guard".into(),
                name: "disruption-guard".into(),
                port: 8443,
            },
            Some("system:serviceaccount:guard:disruption-guard".into()),
            Vec::new(),
        )
    }

    const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

    #[test]
    fn in_a_cluster_the_webhook_is_reached_through_the_service() {
        let config = serde_json::to_value(build(&service(), CA)).unwrap();
        let webhook = &config["webhooks"][0];
        assert_eq!(
            webhook["clientConfig"]["service"],
            serde_json::json!({
                "namespace": "guard",
                "name": "disruption-guard",
                "path": "/evictions",
                "port": 8443
            })
        );
        assert!(webhook["clientConfig"].get("url").is_none());
    }

    #[test]
    fn outside_a_cluster_the_webhook_is_reached_on_loopback() {
        let registration = Registration {
            endpoint: Endpoint::Loopback { port: 9443 },
            ..service()
        };
        let config = serde_json::to_value(build(&registration, CA)).unwrap();
        let client = &config["webhooks"][0]["clientConfig"];
        assert_eq!(client["url"], "https://127.0.0.1:9443/evictions");
        assert!(client.get("service").is_none());
    }

    #[test]
    fn the_registration_sends_evictions_fails_open_and_trusts_the_ca() {
        let config = serde_json::to_value(build(&service(), CA)).unwrap();
        assert_eq!(config["apiVersion"], "admissionregistration.k8s.io/v1");
        assert_eq!(config["kind"], "ValidatingWebhookConfiguration");
        assert_eq!(config["metadata"]["name"], "disruption-guard");
        assert_eq!(
            config["metadata"]["labels"]["app.kubernetes.io/managed-by"],
            "disruption-guard"
        );
        let webhook = &config["webhooks"][0];
        assert_eq!(webhook["name"], "evictions.disruption-guard.io");
        assert_eq!(
            webhook["rules"],
            serde_json::json!([{
                "operations": ["CREATE"],
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "resources": ["pods/eviction"],
                "scope": "Namespaced"
            }])
        );
        assert_eq!(webhook["matchPolicy"], "Equivalent");
        assert_eq!(webhook["failurePolicy"], "Ignore");
        assert_eq!(webhook["sideEffects"], "NoneOnDryRun");
        assert_eq!(webhook["timeoutSeconds"], 5);
        assert_eq!(
            webhook["admissionReviewVersions"],
            serde_json::json!(["v1"])
        );
        assert!(webhook.get("objectSelector").is_none());
        // ByteString serializes as base64; the API server decodes it back to the PEM.
        let decoded = ByteString(CA.as_bytes().to_vec());
        assert_eq!(
            webhook["clientConfig"]["caBundle"],
            serde_json::to_value(decoded).unwrap()
        );
    }

    #[test]
    fn namespaces_labelled_out_are_not_sent() {
        let config = serde_json::to_value(build(&service(), CA)).unwrap();
        assert_eq!(
            config["webhooks"][0]["namespaceSelector"],
            serde_json::json!({"matchExpressions": [{
                "key": "disruption-guard.io/intercept-evictions",
                "operator": "NotIn",
                "values": ["false"]
            }]})
        );
    }

    #[test]
    fn with_namespaces_only_those_are_sent() {
        let registration = Registration {
            namespaces: vec!["ci".into(), "tests".into()],
            ..service()
        };
        let config = serde_json::to_value(build(&registration, CA)).unwrap();
        let expressions = &config["webhooks"][0]["namespaceSelector"]["matchExpressions"];
        assert_eq!(
            expressions[1],
            serde_json::json!({
                "key": "kubernetes.io/metadata.name",
                "operator": "In",
                "values": ["ci", "tests"]
            })
        );
    }

    #[test]
    fn with_a_namespace_selector_only_the_namespaces_it_selects_are_sent() {
        // `kubernetes.io/metadata.name=shop,tier in (ci),!legacy`, as the flag reads it.
        let selector =
            crate::operations::selector::parse(&crate::operations::types::SelectorInput::Text(
                "kubernetes.io/metadata.name=shop,tier in (ci),!legacy".into(),
            ))
            .unwrap()
            .into();
        let registration = Registration {
            namespaces: vec!["shop".into()],
            namespace_selector: selector,
            ..service()
        };
        let config = serde_json::to_value(build(&registration, CA)).unwrap();
        assert_eq!(
            config["webhooks"][0]["namespaceSelector"],
            serde_json::json!({
                "matchLabels": {"kubernetes.io/metadata.name": "shop"},
                "matchExpressions": [
                    {"key": "disruption-guard.io/intercept-evictions", "operator": "NotIn", "values": ["false"]},
                    {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["shop"]},
                    {"key": "tier", "operator": "In", "values": ["ci"]},
                    {"key": "legacy", "operator": "DoesNotExist"}
                ]
            })
        );
        // The merged selector is what the API server evaluates: the trial namespace is sent,
        // others (and the trial namespace once opted out) are not.
        let merged = namespace_selector(&registration.namespaces, &registration.namespace_selector);
        let labels = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        use crate::k8s::selector::matches;
        let shop = [(NAMESPACE_NAME, "shop"), ("tier", "ci")];
        assert!(matches(&merged, &labels(&shop)));
        assert!(!matches(
            &merged,
            &labels(&[(NAMESPACE_NAME, "web"), ("tier", "ci")])
        ));
        assert!(!matches(
            &merged,
            &labels(&[shop[0], shop[1], (INTERCEPT_EVICTIONS, "false")])
        ));
    }

    #[test]
    fn the_operators_own_evictions_are_not_sent() {
        let config = serde_json::to_value(build(&service(), CA)).unwrap();
        assert_eq!(
            config["webhooks"][0]["matchConditions"],
            serde_json::json!([{
                "name": "not-the-operator",
                "expression":
                    "request.userInfo.username != 'system:serviceaccount:guard:disruption-guard'"
            }])
        );
        let unknown = Registration {
            own_username: None,
            ..service()
        };
        let config = serde_json::to_value(build(&unknown, CA)).unwrap();
        assert!(config["webhooks"][0].get("matchConditions").is_none());
    }

    #[test]
    fn only_a_service_account_of_its_own_is_exempted() {
        // `make run` with the admin kubeconfig: the admin's `kubectl drain` must be seen.
        assert_eq!(exempt_user(Some("kubernetes-admin")), None);
        assert_eq!(exempt_user(None), None);
        assert_eq!(
            exempt_user(Some("system:serviceaccount:guard:disruption-guard")),
            Some("system:serviceaccount:guard:disruption-guard")
        );
    }

    #[test]
    fn the_ca_bundle_patch_names_only_the_webhook_and_its_ca() {
        let patch = ca_bundle_patch("guard", CA);
        assert_eq!(patch["metadata"], serde_json::json!({"name": "guard"}));
        let webhooks = patch["webhooks"].as_array().unwrap();
        assert_eq!(webhooks.len(), 1);
        assert_eq!(webhooks[0]["name"], WEBHOOK);
        assert_eq!(
            webhooks[0]["clientConfig"],
            serde_json::json!({"caBundle": serde_json::to_value(ByteString(CA.as_bytes().to_vec())).unwrap()})
        );
    }

    #[test]
    fn user_names_are_quoted_for_cel() {
        assert_eq!(cel_string("it's"), r"'it\'s'");
        assert_eq!(cel_string(r"a\b"), r"'a\\b'");
    }
}
