//! The eviction interception's flags, and what it shares with the drain watcher's.

use std::time::Duration;

use clap::Args;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::{certs, decide, registration};
use crate::k8s::signals::Signal;
use crate::operations::types::SelectorInput;
use crate::resources::names::INTERCEPT_EVICTIONS;
use crate::runtime::limited_server::ConnectionLimits;

/// Flags of the eviction interception.
#[derive(Debug, Clone, Args)]
pub struct InterceptArgs {
    /// Hold back evictions of lone replicas on nodes being disrupted while their Deployment
    /// rolls out (a validating webhook on pods/eviction). `--intercept=false` turns it off.
    #[arg(
        long = "intercept",
        env = "DISRUPTION_GUARD_INTERCEPT",
        default_value_t = true,
        action = clap::ArgAction::Set
    )]
    pub enabled: bool,

    /// HTTPS port of the webhook.
    #[arg(long, env = "DISRUPTION_GUARD_INTERCEPT_PORT", default_value_t = 9443)]
    pub intercept_port: u16,

    /// Only hold evictions in namespaces whose labels match this selector (kubectl's `-l`
    /// syntax, e.g. `kubernetes.io/metadata.name=shop`; every namespace when unset); applies on
    /// top of --namespaces. Evictions elsewhere are allowed at once and start nothing.
    #[arg(long, env = "DISRUPTION_GUARD_INTERCEPT_NAMESPACE_SELECTOR", value_parser = namespace_selector)]
    pub intercept_namespace_selector: Option<LabelSelector>,

    /// Let a held eviction through after this long, counted from the first deny of any
    /// replica (recorded on the Deployment); 1s to 15m (default: the Deployment's
    /// progressDeadlineSeconds, at most 15m).
    #[arg(long, env = "DISRUPTION_GUARD_INTERCEPT_TIMEOUT", value_parser = decide::parse_timeout)]
    pub intercept_timeout: Option<Duration>,

    /// Namespace of the operator: its webhook Service and certificate Secret live there.
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub intercept_namespace: String,

    /// Service through which the API server reaches the webhook (in a cluster).
    #[arg(long, env = "DISRUPTION_GUARD_INTERCEPT_SERVICE", default_value = "disruption-guard")]
    pub intercept_service: String,

    /// Port of that Service.
    #[arg(long, env = "DISRUPTION_GUARD_INTERCEPT_SERVICE_PORT", default_value_t = 443)]
    pub intercept_service_port: u16,

    /// Reviews per second each requester (client address, requesting user and namespace) may
    /// send on average, counting only reviews that could hold an eviction (those of pods the
    /// cache does not hold, or on nodes not being disrupted, are answered at no cost); over the
    /// limit a review is allowed without acting on it (fail open, counted). 0 turns the limit
    /// off.
    #[arg(long, env = "DISRUPTION_GUARD_INTERCEPT_RATE_LIMIT", default_value_t = 200)]
    pub intercept_rate_limit: u32,

    /// Reviews each requester may send in a burst.
    #[arg(long, env = "DISRUPTION_GUARD_INTERCEPT_RATE_BURST", default_value_t = 1000)]
    pub intercept_rate_burst: u32,

    /// Webhook connections served at once; further clients wait to be accepted.
    #[arg(long, env = "DISRUPTION_GUARD_INTERCEPT_MAX_CONNECTIONS", default_value_t = 1_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub intercept_max_connections: u32,

    /// Webhook connections one client address may have open at once; one more is closed at
    /// once (the API server then lets the eviction through: fail open). The API server
    /// multiplexes its reviews over a few HTTP/2 connections per instance.
    #[arg(long, env = "DISRUPTION_GUARD_INTERCEPT_MAX_CONNECTIONS_PER_ADDRESS", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    pub intercept_max_connections_per_address: u32,

    /// Time a client has to send an HTTP/1 request's headers on the webhook port, from when
    /// its connection opened or was answered; a slower (or idle) connection is closed.
    #[arg(long, env = "DISRUPTION_GUARD_INTERCEPT_HEADER_READ_TIMEOUT", default_value = "10s", value_parser = crate::resources::duration::parse)]
    pub intercept_header_read_timeout: Duration,

    /// A webhook connection (HTTP/2, or one that never sends a request) with no request in
    /// flight for this long is closed (HTTP/2 GOAWAY); the API server opens a new one when it
    /// next calls.
    #[arg(long, env = "DISRUPTION_GUARD_INTERCEPT_IDLE_TIMEOUT", default_value = "60s", value_parser = crate::resources::duration::parse)]
    pub intercept_idle_timeout: Duration,

    /// Secret holding the webhook's serving certificate and CA (created and renewed here).
    #[arg(
        long,
        env = "DISRUPTION_GUARD_INTERCEPT_SECRET",
        default_value = certs::SECRET_NAME
    )]
    pub intercept_secret: String,

    /// That Secret is kept by someone else (cert-manager: `tls.crt`, `tls.key`, `ca.crt`): read
    /// it (again every 5 minutes), never write it.
    #[arg(long, env = "DISRUPTION_GUARD_INTERCEPT_EXTERNAL_CERTIFICATE")]
    pub intercept_external_certificate: bool,

    /// Create the whole ValidatingWebhookConfiguration (server-side apply) instead of only
    /// patching the caBundle of the one the chart installs. For local runs with an admin
    /// kubeconfig (`make run`); the chart's RBAC does not allow it.
    #[arg(long, env = "DISRUPTION_GUARD_INTERCEPT_CREATE_WEBHOOK")]
    pub intercept_create_webhook: bool,

    /// Name of the ValidatingWebhookConfiguration the operator keeps.
    #[arg(
        long,
        env = "DISRUPTION_GUARD_INTERCEPT_WEBHOOK",
        default_value = registration::NAME
    )]
    pub intercept_webhook: String,
}

impl InterceptArgs {
    /// Refuses an `--intercept-namespace-selector` that selects no namespace once the
    /// registration merges it with the opt-out label and `--namespaces`
    /// ([`registration::namespace_selector`]): the webhook would never be called. The error
    /// names the flag and the label key.
    pub fn checked(&self, namespaces: &[String]) -> Result<(), String> {
        let Some(selector) = self.intercept_namespace_selector.as_ref() else {
            return Ok(());
        };
        if !self.enabled {
            return Ok(());
        }
        let merged = registration::namespace_selector(namespaces, selector);
        match crate::k8s::selector::contradiction(&merged) {
            None => Ok(()),
            Some(key) => Err(format!(
                "--intercept-namespace-selector selects no namespace: no value of {key:?} meets \
                 it together with the opt-out ({INTERCEPT_EVICTIONS} notin (false)){}",
                if namespaces.is_empty() {
                    String::new()
                } else {
                    format!(" and --namespaces={}", namespaces.join(","))
                }
            )),
        }
    }

    /// The webhook port's connection limits.
    pub fn connection_limits(&self) -> ConnectionLimits {
        ConnectionLimits {
            max_connections: self.intercept_max_connections as usize,
            per_address: self.intercept_max_connections_per_address as usize,
            header_read_timeout: self.intercept_header_read_timeout,
            idle_timeout: Some(self.intercept_idle_timeout),
        }
    }
}

/// Reads `--intercept-namespace-selector`; the error names the rule the text breaks.
fn namespace_selector(text: &str) -> Result<LabelSelector, String> {
    crate::operations::selector::parse(&SelectorInput::Text(text.to_string())).map(Into::into)
}

/// What the interception shares with the drain watcher's flags: which node states mean a
/// drain (`--drain-signals`) and which Deployments count as lone replicas (`--max-replicas`).
#[derive(Debug, Clone)]
pub struct DrainLimits {
    pub signals: Vec<Signal>,
    pub max_replicas: i32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_selector_is_read_in_kubectls_syntax() {
        let selector = namespace_selector("kubernetes.io/metadata.name=shop,tier in (ci)").unwrap();
        assert_eq!(
            selector.match_labels.unwrap()["kubernetes.io/metadata.name"],
            "shop"
        );
        assert_eq!(selector.match_expressions.unwrap()[0].operator, "In");
    }

    fn with_selector(text: &str) -> InterceptArgs {
        use clap::Parser;
        #[derive(Parser)]
        struct Flags {
            #[command(flatten)]
            intercept: InterceptArgs,
        }
        Flags::parse_from(["x", &format!("--intercept-namespace-selector={text}")]).intercept
    }

    #[test]
    fn a_selector_that_selects_no_namespace_once_merged_is_refused_naming_the_flag() {
        let shop = with_selector("kubernetes.io/metadata.name=shop");
        assert_eq!(shop.checked(&[]), Ok(()));
        assert_eq!(shop.checked(&["shop".into(), "web".into()]), Ok(()));
        let err = shop.checked(&["web".into()]).unwrap_err();
        assert!(err.starts_with("--intercept-namespace-selector"), "{err}");
        assert!(err.contains("kubernetes.io/metadata.name"), "{err}");
        assert!(err.contains("--namespaces=web"), "{err}");
        let opted_out = with_selector("disruption-guard.io/intercept-evictions=false");
        let err = opted_out.checked(&[]).unwrap_err();
        assert!(
            err.contains("disruption-guard.io/intercept-evictions"),
            "{err}"
        );
        // Not checked when the interception is off: the flag is then unused.
        let off = InterceptArgs {
            enabled: false,
            ..opted_out
        };
        assert_eq!(off.checked(&[]), Ok(()));
    }

    #[test]
    fn a_bad_namespace_selector_is_refused_naming_what_is_wrong() {
        let err = namespace_selector("tier in ci").unwrap_err();
        assert!(err.contains("tier in ci"), "{err}");
    }
}
