//! The webhook probe: a dry-run eviction, sent through the API server, that proves the API
//! server calls this webhook (`disruption-guard check-webhook`, the chart's `helm test`).
//!
//! Why a dry run of a pod that does not exist, read from kube-apiserver
//! (`pkg/registry/core/pod/storage/eviction.go`, `EvictionREST.Create`): the dry-run option is
//! copied into the Eviction, then the admission webhooks run (`createValidation`), and only
//! then is the pod looked up. So every validating webhook registered for `pods/eviction` sees
//! the probe, with `request.dryRun: true`, before the API server finds that there is no pod.
//! The API server sends a dry-run request only to webhooks whose `sideEffects` is `None` or
//! `NoneOnDryRun` (the registration's is `NoneOnDryRun`) and refuses it otherwise.
//!
//! The webhook answers a dry-run eviction of [`POD`] — and nothing else — with a denial that
//! names the replica which answered ([`answer`]); the API server passes it on as
//! `admission webhook "evictions.disruption-guard.io" denied the request: …`. Nothing is
//! held, counted as a deny, rolled out or recorded. When the webhook is not registered for
//! the namespace, or the API server cannot reach it (the registration fails open), the
//! eviction goes on to the pod lookup and ends in a 404 for the missing pod: [`read`] tells
//! the outcomes apart.

use super::registration::WEBHOOK;

/// Name of the pod the probe "evicts": no such pod exists, and a dry run removes nothing.
pub const POD: &str = "disruption-guard-webhook-probe";

/// What every probe answer starts with.
const MARK: &str = "disruption-guard webhook probe answered by";

/// Whether an eviction is the probe: a dry run, of [`POD`]. A real eviction of a pod that
/// happens to carry the name is decided like any other.
pub fn is_probe(pod: &str, dry_run: bool) -> bool {
    dry_run && pod == POD
}

/// The webhook's answer to the probe: a message naming the replica `replica` that answered.
pub fn answer(replica: &str) -> String {
    format!("{MARK} {replica} (a dry run: nothing is held)")
}

/// What the API server's answer to the probe says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The webhook saw the probe; the replica that answered.
    Seen { replica: String },
    /// The API server went on to look the pod up: the webhook was not called, or could not be
    /// reached and the registration failed open.
    NotSeen,
    /// The API server refused the eviction before any webhook (`code`: 401, 403).
    Refused { code: u16, message: String },
    /// Anything else (another webhook's denial, a server error).
    Other { code: u16, message: String },
}

/// Reads the API server's answer to the probe: its HTTP `code` and status `message`.
pub fn read(code: u16, message: &str) -> Outcome {
    let denied_by = format!("admission webhook \"{WEBHOOK}\" denied the request: {MARK} ");
    if let Some(rest) = message
        .find(&denied_by)
        .map(|at| &message[at + denied_by.len()..])
    {
        let replica = rest.split_whitespace().next().unwrap_or_default();
        return Outcome::Seen {
            replica: replica.to_string(),
        };
    }
    match code {
        404 if message.contains(POD) => Outcome::NotSeen,
        401 | 403 => Outcome::Refused {
            code,
            message: message.to_string(),
        },
        _ => Outcome::Other {
            code,
            message: message.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_dry_run_of_the_probe_pod_is_the_probe() {
        assert!(is_probe(POD, true));
        assert!(!is_probe(POD, false));
        assert!(!is_probe("web-0", true));
    }

    #[test]
    fn the_answer_as_the_api_server_passes_it_on_names_the_replica() {
        let message = format!(
            "admission webhook \"evictions.disruption-guard.io\" denied the request: {}",
            answer("guard-7d9f-x2")
        );
        assert_eq!(
            read(400, &message),
            Outcome::Seen {
                replica: "guard-7d9f-x2".into()
            }
        );
    }

    #[test]
    fn the_missing_pod_means_the_webhook_did_not_see_the_probe() {
        let message = format!("pods \"{POD}\" not found");
        assert_eq!(read(404, &message), Outcome::NotSeen);
    }

    #[test]
    fn another_webhooks_denial_or_a_refusal_is_not_taken_for_the_answer() {
        let other = "admission webhook \"other.example.com\" denied the request: \
                     disruption-guard webhook probe answered by me";
        assert!(matches!(read(400, other), Outcome::Other { code: 400, .. }));
        assert!(matches!(
            read(403, "pods \"x\" is forbidden"),
            Outcome::Refused { code: 403, .. }
        ));
        assert!(matches!(
            read(404, "namespaces \"gone\" not found"),
            Outcome::Other { code: 404, .. }
        ));
    }
}
