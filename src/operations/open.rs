//! What an open asks the API server to create, decided without it: the `TestWindow` object
//! (checked), the name an idempotency key maps to, and the digest that tells a retry from
//! another request made with the same key.

use kube::core::ObjectMeta;
use serde_json::json;

use super::problem::ApiError;
use super::selector;
use super::ttl::TtlLimits;
use super::types::{OpenRequest, SelectorObject};
use crate::resources::names::{FINALIZER, MANAGED_BY_KEY, MANAGED_BY_VALUE};
use crate::resources::{Protect, TestWindow, TestWindowSpec};

/// Annotation holding the idempotency key a window was opened with.
pub const IDEMPOTENCY_ANNOTATION: &str = "disruption-guard.io/idempotency-key";
/// Annotation holding the digest ([`window_digest`]) of the window an open created, beside its
/// key, for people reading the object: a retry is compared with what the existing window
/// holds, not with this annotation. The key reused with another request is refused (422), as
/// the IETF Idempotency-Key draft says.
pub const REQUEST_DIGEST_ANNOTATION: &str = "disruption-guard.io/idempotency-request";
/// Longest accepted idempotency key.
pub const MAX_KEY_LEN: usize = 255;

/// The object an open request asks for, checked; pure, so it is unit-tested.
pub fn build_window(
    ns: &str,
    req: &OpenRequest,
    key: Option<&str>,
    limits: &TtlLimits,
) -> Result<TestWindow, ApiError> {
    let selector = match &req.selector {
        Some(input) => selector::parse(input).map_err(ApiError::BadRequest)?,
        None => Default::default(),
    };
    let ttl = limits
        .for_open(req.ttl.as_deref())
        .map_err(ApiError::Unprocessable)?;
    let reason = req.reason.clone().unwrap_or_default();
    if reason.chars().count() > 256 {
        return Err(ApiError::Unprocessable(
            "reason: must be at most 256 characters".into(),
        ));
    }
    if let Some(key) = key
        && (key.is_empty() || key.len() > MAX_KEY_LEN || key.chars().any(char::is_control))
    {
        return Err(ApiError::Unprocessable(format!(
            "idempotencyKey: must be 1 to {MAX_KEY_LEN} printable characters"
        )));
    }
    let name = match (&req.name, key) {
        (Some(name), _) => {
            if !selector::is_dns_subdomain(name) || name.len() > 63 {
                return Err(ApiError::Unprocessable(format!(
                    "name: {name:?} must be a DNS-1123 label: up to 63 lowercase letters, \
                     digits, '-' or '.', starting and ending alphanumeric"
                )));
            }
            Some(name.clone())
        }
        (None, Some(key)) => Some(name_for_key(key)),
        (None, None) => None,
    };
    let mut labels = std::collections::BTreeMap::new();
    labels.insert(MANAGED_BY_KEY.to_string(), MANAGED_BY_VALUE.to_string());
    let mut tw = TestWindow {
        metadata: ObjectMeta {
            generate_name: name.is_none().then(|| "tw-".to_string()),
            name,
            namespace: Some(ns.to_string()),
            labels: Some(labels),
            // Created with the controller's finalizer, its first reconcile protects at once
            // instead of first adding it (one write and one watch round trip fewer to Ready).
            finalizers: Some(vec![FINALIZER.to_string()]),
            ..Default::default()
        },
        spec: TestWindowSpec {
            selector: selector.into(),
            ttl: ttl.into(),
            expires_at: None,
            closed: false,
            reason,
            protect: Protect {
                daemon_sets: req.protect.as_ref().is_some_and(|p| p.daemon_sets),
                ..Protect::default()
            },
            ci: req.ci.clone().map(Into::into),
            opened_by: None,
        },
        status: None,
    };
    if let Some(key) = key {
        tw.metadata.annotations = Some(std::collections::BTreeMap::from([
            (IDEMPOTENCY_ANNOTATION.to_string(), key.to_string()),
            (REQUEST_DIGEST_ANNOTATION.to_string(), window_digest(&tw)),
        ]));
    }
    Ok(tw)
}

/// FNV-1a, 64 bits: stable across builds and platforms (std's hasher is not).
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// The window name an idempotency key maps to: stable across retries and replicas.
pub fn name_for_key(key: &str) -> String {
    format!("tw-{:016x}", fnv1a(key.as_bytes()))
}

/// A digest of what a window is, as an open asks for it: its name, selector (its string and
/// object forms alike), ttl (as a duration), reason, `ci` and every `protect` flag; the
/// idempotency key itself, the opener and what a renew or close changes later are left out.
/// It tells a retry from another request made with the same key by mistake; it is no secret
/// and no signature.
pub fn window_digest(tw: &TestWindow) -> String {
    let spec = &tw.spec;
    let canonical = json!({
        "name": tw.metadata.name,
        "selector": SelectorObject::from(&spec.selector),
        "ttl": std::time::Duration::from(spec.ttl).as_nanos().to_string(),
        "reason": spec.reason,
        "ci": spec.ci,
        "protect": spec.protect,
    });
    format!("fnv1a64:{:016x}", fnv1a(canonical.to_string().as_bytes()))
}

/// Whether `existing`, found under the name an open with idempotency key `key` maps to, is the
/// window that open asks for (`wanted`): opened with the same key, and the same window by
/// [`window_digest`] of both specs. The digest is computed from what the existing object holds,
/// never read from its annotation: whoever may create windows in the namespace could write the
/// annotation beside a spec that protects nothing, and the caller would take that window for
/// its own.
pub fn is_retry_of(existing: &TestWindow, wanted: &TestWindow, key: &str) -> bool {
    let existing_key = existing
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(IDEMPOTENCY_ANNOTATION));
    existing_key.map(String::as_str) == Some(key)
        && window_digest(existing) == window_digest(wanted)
}
