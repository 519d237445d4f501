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
/// Annotation holding a digest of the request a window was opened with, beside its key: the
/// key reused with another request is refused (422), as the IETF Idempotency-Key draft says.
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
    let annotations = key.map(|k| {
        std::collections::BTreeMap::from([
            (IDEMPOTENCY_ANNOTATION.to_string(), k.to_string()),
            (
                REQUEST_DIGEST_ANNOTATION.to_string(),
                request_digest(&selector, req),
            ),
        ])
    });
    Ok(TestWindow {
        metadata: ObjectMeta {
            generate_name: name.is_none().then(|| "tw-".to_string()),
            name,
            namespace: Some(ns.to_string()),
            labels: Some(labels),
            annotations,
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
    })
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

/// A digest of what an open asks for, equal for every spelling of one request: the selector
/// as parsed (its string or its object form), the ttl as a duration, no reason as an empty
/// one; the idempotency key itself (header or body field) is left out. It tells a retry from
/// another request made with the same key by mistake; it is no secret and no signature.
pub fn request_digest(selector: &SelectorObject, req: &OpenRequest) -> String {
    let ttl = req
        .ttl
        .as_deref()
        .map(|t| match crate::resources::duration::parse(t) {
            Ok(d) => d.as_nanos().to_string(),
            Err(_) => t.to_string(),
        });
    let mut canonical = json!({
        "selector": selector,
        "ttl": ttl,
        "reason": req.reason.as_deref().unwrap_or_default(),
        "ci": req.ci,
        "name": req.name,
    });
    // Only when asked for: the digest of every request without it stays what it was, so a
    // retry of an open made before `protect` existed still matches its window.
    if req.protect.as_ref().is_some_and(|p| p.daemon_sets) {
        canonical["protect"] = json!({"daemonSets": true});
    }
    format!("fnv1a64:{:016x}", fnv1a(canonical.to_string().as_bytes()))
}
