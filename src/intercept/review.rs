//! The webhook's wire format: reading an `admission.k8s.io/v1` AdmissionReview of a
//! `pods/eviction` CREATE (a `policy/v1` or `policy/v1beta1` Eviction) into an [`Eviction`], and
//! writing the answers — allowed, or denied with HTTP code 429 and reason `TooManyRequests`,
//! exactly what a PodDisruptionBudget that blocks an eviction answers, so Karpenter, Cluster
//! Autoscaler and `kubectl drain` all retry. No `retryAfterSeconds`: the API server would turn
//! it into silent client-side retries.
//!
//! The pod is `request.name` in `request.namespace`, and the Eviction (`request.object`) must
//! name the same pod, as every review the API server sends does (anything else is answered as
//! unreadable: allowed, nothing looked at); the UID precondition is the Eviction's
//! `deleteOptions.preconditions.uid`; a dry run is `request.dryRun` or the Eviction's
//! `deleteOptions.dryRun`.

use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::response::StatusSummary;
use kube::core::{DynamicObject, Status};
use serde_json::Value;

use super::decide::Eviction;

/// The reason of a deny, as a PDB's 429 carries it.
pub const TOO_MANY_REQUESTS: &str = "TooManyRequests";

/// A review read from a request body.
#[derive(Debug)]
pub enum Parsed {
    /// An eviction to decide on.
    Eviction {
        request: Box<AdmissionRequest<DynamicObject>>,
        eviction: Eviction,
    },
    /// A well-formed review of something else (another resource or operation): allowed.
    Other(Box<AdmissionRequest<DynamicObject>>),
}

/// A body that is no AdmissionReview; the request uid when it could be read, so the answer
/// still reaches the API server as an answer to its request.
#[derive(Debug, PartialEq, Eq)]
pub struct Malformed {
    pub uid: String,
}

/// Reads a request body.
pub fn parse(body: &[u8]) -> Result<Parsed, Malformed> {
    let value: Value = serde_json::from_slice(body).map_err(|_| Malformed { uid: "".into() })?;
    let uid = value
        .pointer("/request/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let review: AdmissionReview<DynamicObject> =
        serde_json::from_value(value).map_err(|_| Malformed { uid: uid.clone() })?;
    let request: AdmissionRequest<DynamicObject> =
        review.try_into().map_err(|_| Malformed { uid })?;
    let is_eviction = request.kind.group == "policy"
        && request.kind.kind == "Eviction"
        && request.resource.resource == "pods"
        && request.sub_resource.as_deref() == Some("eviction")
        && request.operation == Operation::Create;
    if !is_eviction {
        return Ok(Parsed::Other(Box::new(request)));
    }
    // The API server sends the Eviction as its client posted it, after checking that it names
    // the pod of the URL (and filling in the namespace): a review whose Eviction names another
    // pod, or none, was not sent by it.
    let Some(object) = request
        .object
        .as_ref()
        .filter(|o| names_the_pod(o, &request))
    else {
        return Err(Malformed {
            uid: request.uid.clone(),
        });
    };
    let delete_options = Some(&object.data["deleteOptions"]);
    let uid = delete_options
        .and_then(|d| d.pointer("/preconditions/uid"))
        .and_then(Value::as_str)
        .map(str::to_string);
    let dry_run_option = delete_options
        .and_then(|d| d.get("dryRun"))
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty());
    let eviction = Eviction {
        namespace: request.namespace.clone().unwrap_or_default(),
        name: request.name.clone(),
        uid,
        dry_run: request.dry_run || dry_run_option,
    };
    Ok(Parsed::Eviction {
        request: Box::new(request),
        eviction,
    })
}

/// Whether the Eviction `object` names the pod `request` is about: the same name, and the
/// same namespace when it says one.
fn names_the_pod(object: &DynamicObject, request: &AdmissionRequest<DynamicObject>) -> bool {
    let meta = &object.metadata;
    meta.name.as_deref() == Some(request.name.as_str())
        && meta
            .namespace
            .as_deref()
            .is_none_or(|ns| Some(ns) == request.namespace.as_deref())
}

/// Allows the request.
pub fn allow(request: &AdmissionRequest<DynamicObject>) -> AdmissionReview<DynamicObject> {
    AdmissionResponse::from(request).into_review()
}

/// Allows a request that could not be read (fail open).
pub fn allow_unreadable(malformed: &Malformed) -> AdmissionReview<DynamicObject> {
    let mut response = AdmissionResponse::invalid("");
    response.uid = malformed.uid.clone();
    response.allowed = true;
    response.result = Status::default();
    response.into_review()
}

/// Denies the eviction the way a PDB does: code 429, reason `TooManyRequests`, `message`.
pub fn deny(
    request: &AdmissionRequest<DynamicObject>,
    message: String,
) -> AdmissionReview<DynamicObject> {
    denied(request, message, 429, TOO_MANY_REQUESTS)
}

/// Answers the webhook probe (a dry run of a pod that does not exist: see
/// [`probe`](super::probe)): denied with code 400, reason `BadRequest`, `message`.
pub fn answer_probe(
    request: &AdmissionRequest<DynamicObject>,
    message: String,
) -> AdmissionReview<DynamicObject> {
    denied(request, message, 400, "BadRequest")
}

fn denied(
    request: &AdmissionRequest<DynamicObject>,
    message: String,
    code: u16,
    reason: &str,
) -> AdmissionReview<DynamicObject> {
    let mut response = AdmissionResponse::from(request).deny(message);
    response.result.status = Some(StatusSummary::Failure);
    response.result.code = code;
    response.result.reason = reason.into();
    response.into_review()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// An AdmissionReview of an eviction of `web-abc`.
    fn body(version: &str, delete_options: Value, dry_run: bool) -> Vec<u8> {
        crate::testing::eviction_review(version, "web-abc", delete_options, dry_run)
    }

    fn eviction(parsed: Parsed) -> Eviction {
        match parsed {
            Parsed::Eviction { eviction, .. } => eviction,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_v1_eviction_names_the_pod_and_its_uid_precondition() {
        let b = body("v1", json!({"preconditions": {"uid": "pod-uid"}}), false);
        assert_eq!(
            eviction(parse(&b).unwrap()),
            Eviction {
                namespace: "ns".into(),
                name: "web-abc".into(),
                uid: Some("pod-uid".into()),
                dry_run: false
            }
        );
    }

    #[test]
    fn a_v1beta1_eviction_without_options_reads_the_same() {
        let b = body("v1beta1", Value::Null, false);
        let e = eviction(parse(&b).unwrap());
        assert_eq!(
            (e.name.as_str(), e.uid, e.dry_run),
            ("web-abc", None, false)
        );
    }

    #[test]
    fn a_dry_run_is_read_from_the_request_or_the_delete_options() {
        assert!(eviction(parse(&body("v1", json!({}), true)).unwrap()).dry_run);
        let b = body("v1", json!({"dryRun": ["All"]}), false);
        assert!(eviction(parse(&b).unwrap()).dry_run);
    }

    #[test]
    fn a_review_of_something_else_is_not_an_eviction() {
        let mut v: Value = serde_json::from_slice(&body("v1", json!({}), false)).unwrap();
        v["request"]["operation"] = json!("DELETE");
        let parsed = parse(&serde_json::to_vec(&v).unwrap()).unwrap();
        assert!(matches!(parsed, Parsed::Other(_)));
    }

    #[test]
    fn a_malformed_body_keeps_the_request_uid_when_it_can() {
        assert_eq!(parse(b"{").unwrap_err(), Malformed { uid: "".into() });
        let half = br#"{"request": {"uid": "req-9", "kind": 3}}"#;
        assert_eq!(
            parse(half).unwrap_err(),
            Malformed {
                uid: "req-9".into()
            }
        );
    }

    #[test]
    fn an_eviction_that_names_another_pod_than_the_request_or_none_is_unreadable() {
        let mut v: Value = serde_json::from_slice(&body("v1", json!({}), false)).unwrap();
        v["request"]["object"]["metadata"]["name"] = json!("someone-else");
        let other_pod = serde_json::to_vec(&v).unwrap();
        assert_eq!(
            parse(&other_pod).unwrap_err(),
            Malformed {
                uid: crate::testing::REVIEW_UID.into()
            }
        );
        v["request"]["object"]["metadata"]["name"] = json!("web-abc");
        v["request"]["object"]["metadata"]["namespace"] = json!("elsewhere");
        assert!(parse(&serde_json::to_vec(&v).unwrap()).is_err());
        v["request"]["object"] = Value::Null;
        assert!(parse(&serde_json::to_vec(&v).unwrap()).is_err());
        v["request"]["object"] = json!({"apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": "web-abc"}});
        assert!(
            parse(&serde_json::to_vec(&v).unwrap()).is_ok(),
            "no namespace in the Eviction: the request's"
        );
    }

    #[test]
    fn a_deny_is_a_429_too_many_requests_without_retry_after() {
        let Parsed::Eviction { request, .. } = parse(&body("v1", json!({}), false)).unwrap() else {
            panic!()
        };
        let answer = serde_json::to_value(deny(&request, "held".into())).unwrap();
        assert_eq!(answer["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(answer["kind"], "AdmissionReview");
        let response = &answer["response"];
        assert_eq!(response["uid"], crate::testing::REVIEW_UID);
        assert_eq!(response["allowed"], false);
        assert_eq!(response["status"]["code"], 429);
        assert_eq!(response["status"]["reason"], "TooManyRequests");
        assert_eq!(response["status"]["message"], "held");
        assert!(response["status"].get("details").is_none());
    }

    #[test]
    fn an_unreadable_request_is_allowed_under_its_uid() {
        let answer =
            serde_json::to_value(allow_unreadable(&Malformed { uid: "r".into() })).unwrap();
        assert_eq!(answer["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(answer["response"]["uid"], "r");
        assert_eq!(answer["response"]["allowed"], true);
    }
}
