//! Where a refused CI token's reasons go: the operator's log, one line per refusal, and a
//! `Warning` Event `TokenRefused` on each near miss (a CITrust whose subject the token matches
//! but that did not grant it: a pinned claim, a grant, a bad bound), so the namespace's owners
//! see why their pipeline was refused (`kubectl describe cit`). The
//! caller is told only what its own token lacks ([`super::trust::Refused::detail`]).
//!
//! Anyone the issuer mints tokens for (anyone on GitHub, for GitHub's issuer) is one request
//! away from a refusal, so Events are bounded: a burst of [`EVENT_BURST`] per trust, then one
//! per [`EVENT_EVERY`] (one keyed limiter, whose keys are the trusts, written by the namespace's owners, never a
//! token's claims); the note quotes at most 200 characters of the token's `sub`.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;
use kube::runtime::events::EventType;
use tracing::info;

use super::token::Claims;
use super::trust::{Refused, short};
use crate::resources::CITrust;
use crate::runtime::events::{Events, Note};
use crate::runtime::keyed_limit::KeyedLimit;

/// After a burst, at most one `TokenRefused` Event per trust this often.
pub const EVENT_EVERY: Duration = Duration::from_secs(60);
/// `TokenRefused` Events a trust may get at once (a pipeline's first few mistakes, each named).
pub const EVENT_BURST: u32 = 5;
/// Trusts remembered before those whose bucket has refilled are forgotten.
const MAX_TRUSTS: usize = 10_000;

/// Reports refusals; cheap to share behind an `Arc`.
pub struct Refusals {
    events: Option<Events>,
    per_trust: KeyedLimit<String>,
}

impl Refusals {
    /// Reports to the log and, when `events` is given, as Events on the trusts.
    pub fn new(events: Option<Events>) -> Self {
        Self {
            events,
            per_trust: KeyedLimit::every(EVENT_EVERY, EVENT_BURST, MAX_TRUSTS),
        }
    }

    /// Reports `refused`, a refusal of the token `claims` in namespace `ns`; `trusts` are the
    /// namespace's CITrusts (the ones it names get an Event).
    pub fn report(&self, ns: &str, claims: &Claims, refused: &Refused, trusts: &[Arc<CITrust>]) {
        info!(
            namespace = %ns,
            issuer = %claims.iss,
            sub = %short(&claims.sub),
            why = %refused.why,
            "CI token refused"
        );
        let Some(events) = &self.events else {
            return;
        };
        for (name, why) in &refused.trusts {
            let Some(trust) = trusts
                .iter()
                .find(|t| t.meta().name.as_deref() == Some(name))
            else {
                continue;
            };
            if !self.per_trust.allow(&format!("{ns}/{name}")) {
                continue;
            }
            events.publish(
                &regarding(trust),
                Note {
                    type_: EventType::Warning,
                    reason: "TokenRefused",
                    action: "Authorize",
                    note: format!(
                        "a CI token with sub {:?} was refused: {why} (after a burst of {}, at \
                         most one such Event per {}s)",
                        short(&claims.sub),
                        EVENT_BURST,
                        EVENT_EVERY.as_secs()
                    ),
                    secondary: None,
                },
            );
        }
    }
}

/// The Event's subject: the CITrust.
fn regarding(trust: &CITrust) -> ObjectReference {
    ObjectReference {
        api_version: Some(CITrust::api_version(&()).into_owned()),
        kind: Some(CITrust::kind(&()).into_owned()),
        name: trust.meta().name.clone(),
        namespace: trust.meta().namespace.clone(),
        uid: trust.meta().uid.clone(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_of_events_per_trust_then_none_whatever_the_flood() {
        let r = Refusals::new(None);
        for _ in 0..EVENT_BURST {
            assert!(r.per_trust.allow(&"shop/main".to_string()));
        }
        for _ in 0..1000 {
            assert!(!r.per_trust.allow(&"shop/main".to_string()));
        }
        // Another trust has its own allowance.
        assert!(r.per_trust.allow(&"shop/other".to_string()));
    }
}
