//! Opening, reading, renewing and closing windows: the API's operations on `TestWindow`
//! objects, shared by the HTTP handlers and the client's direct (`--kubeconfig`) mode.
//!
//! The API server is the only state: an open creates an object, a renew sets
//! `spec.expiresAt`, a close sets `spec.closed`; the window controller does the rest.

use std::time::Duration;

use futures::TryStreamExt;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{ListParams, Patch, PostParams, WatchEvent, WatchParams};
use kube::{Api, Client};
use serde_json::json;
use tracing::warn;

use super::daemon_sets::DaemonSetPolicy;
use super::deadline::bounded;
use super::open::{IDEMPOTENCY_ANNOTATION, build_window, is_retry_of};
use super::problem::ApiError;
use super::selector;
use super::ttl::TtlLimits;
use super::types::{OpenRequest, RenewRequest, WindowList, WindowView};
use crate::k8s::decoded::Decoded;
use crate::resources::names::{CLOSE_MANAGER, FIELD_MANAGER, RENEW_MANAGER};
use crate::resources::{OpenedBy, TestWindow};
use crate::runtime::write;

/// Operations on the windows of any namespace.
#[derive(Clone)]
pub struct Windows {
    client: Client,
    limits: TtlLimits,
    /// Who may open windows with `protect.daemonSets`; None: not checked here (the CI
    /// client's direct mode; the window controller decides).
    daemon_sets: Option<DaemonSetPolicy>,
}

/// Whether protection is in effect: `Ready` is True for the current generation.
pub fn is_ready(tw: &TestWindow) -> bool {
    !tw.spec.closed && tw.status.as_ref().is_some_and(|s| s.is_ready())
}

/// Whether an open's wait is over: protection is in effect, or the window ended (closed, or
/// expired before the controller could protect anything) and never will be.
pub fn is_ready_or_ended(tw: &TestWindow) -> bool {
    is_ready(tw) || has_ended(tw)
}

/// Whether the window was closed or its phase is final.
pub fn has_ended(tw: &TestWindow) -> bool {
    tw.spec.closed || tw.status.as_ref().is_some_and(|s| s.phase.is_final())
}

/// Whether the controller has finished a close: the window has ended for the current spec and
/// its protection is gone.
pub fn is_released(tw: &TestWindow) -> bool {
    tw.status
        .as_ref()
        // A controller that does not report observedGeneration is taken at its status.
        .is_some_and(|s| {
            s.is_released()
                && (s.observed_generation.is_none()
                    || s.observed_generation >= tw.metadata.generation)
        })
}

impl Windows {
    /// Operations through `client`, within `limits`.
    pub fn new(client: Client, limits: TtlLimits) -> Self {
        Self {
            client,
            limits,
            daemon_sets: None,
        }
    }

    /// The same operations, refusing opens with `protect.daemonSets` that `policy` does not
    /// admit (403 naming the field) before anything is written.
    pub fn with_daemon_sets(self, policy: DaemonSetPolicy) -> Self {
        Self {
            daemon_sets: Some(policy),
            ..self
        }
    }

    /// The ttl limits windows are opened and renewed within.
    pub fn limits(&self) -> &TtlLimits {
        &self.limits
    }

    fn api(&self, ns: &str) -> Api<TestWindow> {
        Api::namespaced(self.client.clone(), ns)
    }

    /// Opens a window; `Ok((view, false))` when the idempotency key matched an existing one.
    pub async fn open(
        &self,
        ns: &str,
        req: &OpenRequest,
        key: Option<&str>,
        opened_by: Option<OpenedBy>,
    ) -> Result<(TestWindow, bool), ApiError> {
        let mut tw = build_window(ns, req, key, &self.limits)?;
        if let Some(policy) = &self.daemon_sets
            && tw.spec.protect.daemon_sets
        {
            policy
                .admits(opened_by.as_ref())
                .map_err(ApiError::Forbidden)?;
        }
        tw.spec.opened_by = opened_by;
        let api = self.api(ns);
        let pp = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        match bounded(api.create(&pp, &tw)).await {
            Ok(created) => Ok((created, true)),
            Err(e) if write::is_conflict(&e) => {
                let name = tw.metadata.name.clone().unwrap_or_default();
                let existing = bounded(api.get(&name))
                    .await
                    .map_err(|e| ApiError::from_kube(e, &format!("reading window {name}")))?;
                let existing_key = existing
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(IDEMPOTENCY_ANNOTATION));
                match (key, existing_key) {
                    (Some(k), Some(e)) if k == e => {
                        if is_retry_of(&existing, &tw, k) {
                            Ok((existing, false))
                        } else {
                            Err(ApiError::KeyReused {
                                key: k.to_string(),
                                window: name,
                            })
                        }
                    }
                    _ => Err(ApiError::Conflict(format!(
                        "name: a window named {name:?} already exists in {ns} (opened with \
                         another idempotency key or none)"
                    ))),
                }
            }
            Err(e) => Err(ApiError::from_kube(e, "creating the window")),
        }
    }

    /// Reads one window.
    pub async fn get(&self, ns: &str, name: &str) -> Result<TestWindow, ApiError> {
        bounded(self.api(ns).get(name)).await.map_err(|e| match e {
            kube::Error::Api(s) if s.code == 404 => {
                ApiError::NotFound(format!("window {name:?} does not exist in namespace {ns}"))
            }
            e => ApiError::from_kube(e, &format!("reading window {name}")),
        })
    }

    /// Lists the windows of a namespace (every namespace with `None`) whose labels match
    /// `labels` (a label selector in the text syntax, checked first: a malformed one is a 400
    /// naming `labelSelector`), by namespace and name.
    pub async fn list(
        &self,
        ns: Option<&str>,
        labels: Option<&str>,
    ) -> Result<WindowList, ApiError> {
        let mut params = ListParams::default();
        if let Some(text) = labels.filter(|t| !t.trim().is_empty()) {
            selector::parse_text(text)
                .map_err(|e| ApiError::BadRequest(format!("labelSelector: {e}")))?;
            params = params.labels(text);
        }
        // Read one at a time: a window stored out of range is left out, not the whole list.
        let api = match ns {
            Some(ns) => Api::<Decoded<TestWindow>>::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        };
        let list = bounded(api.list(&params))
            .await
            .map_err(|e| ApiError::from_kube(e, "listing windows"))?;
        let mut items: Vec<WindowView> = list
            .items
            .into_iter()
            .filter_map(|w| match w.into_object() {
                Ok(window) => Some(WindowView::from_window(&window)),
                Err(refused) => {
                    warn!(name = ?refused.metadata.name, namespace = ?refused.metadata.namespace,
                        reason = %refused.reason, "a window that cannot be read is left out of a list");
                    None
                }
            })
            .collect();
        items.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        Ok(WindowList { items })
    }

    /// Extends a window to now + ttl (capped by the maximum). `admit` sees the stored window
    /// before anything is written: it may refuse the renew, or name the ttl to use when the
    /// request named none (a CI trust's bound).
    pub async fn renew(
        &self,
        ns: &str,
        name: &str,
        req: &RenewRequest,
        now: Timestamp,
        admit: impl FnOnce(&TestWindow) -> Result<Option<String>, ApiError>,
    ) -> Result<TestWindow, ApiError> {
        let mut until = self
            .limits
            .renewed_until(req.ttl.as_deref(), now)
            .map_err(ApiError::Unprocessable)?;
        let tw = self.get(ns, name).await?;
        let phase = tw.status.as_ref().map(|s| s.phase).unwrap_or_default();
        if tw.spec.closed || phase.is_final() {
            return Err(ApiError::Conflict(format!(
                "window {name:?} has ended ({phase:?}); open a new one"
            )));
        }
        if let Some(ttl) = admit(&tw)? {
            until = self
                .limits
                .renewed_until(Some(&ttl), now)
                .map_err(ApiError::Unprocessable)?;
        }
        let spec = json!({"expiresAt": Time(until)});
        self.apply_spec(ns, name, RENEW_MANAGER, spec, "renewing")
            .await
    }

    /// Closes a window (sets `spec.closed`); closing a closed window changes nothing. `admit`
    /// sees the stored window before anything is written, and may refuse the close (a CI
    /// trust's bounds).
    pub async fn close(
        &self,
        ns: &str,
        name: &str,
        admit: impl FnOnce(&TestWindow) -> Result<(), ApiError>,
    ) -> Result<TestWindow, ApiError> {
        let tw = self.get(ns, name).await?;
        admit(&tw)?;
        if tw.spec.closed {
            return Ok(tw);
        }
        let spec = json!({"closed": true});
        self.apply_spec(ns, name, CLOSE_MANAGER, spec, "closing")
            .await
    }

    /// Server-side applies `spec` fields of a window as `manager` (renew and close each own
    /// their one field); `doing` names the step in the error.
    async fn apply_spec(
        &self,
        ns: &str,
        name: &str,
        manager: &str,
        spec: serde_json::Value,
        doing: &str,
    ) -> Result<TestWindow, ApiError> {
        let patch = json!({
            "apiVersion": "disruption-guard.io/v1alpha1",
            "kind": "TestWindow",
            "metadata": {"name": name},
            "spec": spec,
        });
        bounded(
            self.api(ns)
                .patch(name, &write::apply_forced(manager), &Patch::Apply(patch)),
        )
        .await
        .map_err(|e| ApiError::from_kube(e, &format!("{doing} window {name}")))
    }

    /// Watches the window until `done` holds; a 504 with its state after `timeout`. A window
    /// that is gone counts as done (a close: every trace is removed). A watch answers as soon
    /// as the controller writes the status, where polling would add up to its interval; it
    /// starts at the version the caller holds (`last`), so a wait costs the API server one
    /// watch and no list.
    pub async fn wait(
        &self,
        ns: &str,
        name: &str,
        timeout: Duration,
        what: &str,
        done: fn(&TestWindow) -> bool,
        mut last: TestWindow,
    ) -> Result<TestWindow, ApiError> {
        let deadline = tokio::time::Instant::now() + timeout;
        while !done(&last) {
            match tokio::time::timeout_at(deadline, self.follow(ns, name, &mut last, done)).await {
                Ok(Ok(Followed::Done)) => return Ok(last),
                Ok(Ok(Followed::Gone)) => break,
                // The watch server ended it (its timeout): watch on from the last version.
                Ok(Ok(Followed::Ended)) => continue,
                Ok(Err(err)) => {
                    // The version is too old (410), or the watch broke (e.g. the API server
                    // restarted): read, then watch again from what was read.
                    if !matches!(&err, kube::Error::Api(s) if s.code == 410) {
                        warn!(window = name, namespace = ns, error = %err, "watching a window failed, retrying");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    match self.get(ns, name).await {
                        Ok(tw) => last = tw,
                        Err(ApiError::NotFound(_)) => break,
                        Err(e) => return Err(e),
                    }
                }
                Err(_) => {
                    if let Ok(tw) = self.get(ns, name).await {
                        last = tw;
                    }
                    if done(&last) {
                        break;
                    }
                    return Err(ApiError::Timeout {
                        detail: format!(
                            "window {name:?} was not {what} within {}",
                            crate::resources::duration::format(timeout)
                        ),
                        window: Box::new(WindowView::from_window(&last)),
                    });
                }
            }
        }
        Ok(last)
    }

    /// Follows the window's changes from `last`'s resourceVersion, keeping `last` current,
    /// until `done` holds, it is deleted, or the watch ends.
    async fn follow(
        &self,
        ns: &str,
        name: &str,
        last: &mut TestWindow,
        done: fn(&TestWindow) -> bool,
    ) -> Result<Followed, kube::Error> {
        let version = last.metadata.resource_version.clone().unwrap_or_default();
        let params = WatchParams::default().fields(&format!("metadata.name={name}"));
        let mut events = std::pin::pin!(self.api(ns).watch(&params, &version).await?);
        while let Some(event) = events.try_next().await? {
            match event {
                WatchEvent::Added(tw) | WatchEvent::Modified(tw) => {
                    *last = tw;
                    if done(last) {
                        return Ok(Followed::Done);
                    }
                }
                WatchEvent::Deleted(_) => return Ok(Followed::Gone),
                WatchEvent::Bookmark(b) => {
                    last.metadata.resource_version = Some(b.metadata.resource_version);
                }
                WatchEvent::Error(status) => return Err(kube::Error::Api(status)),
            }
        }
        Ok(Followed::Ended)
    }
}

/// How following a window ended.
enum Followed {
    /// `done` holds for the last version.
    Done,
    /// The window was deleted.
    Gone,
    /// The API server ended the watch.
    Ended,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operations::open::{REQUEST_DIGEST_ANNOTATION, name_for_key};
    use crate::operations::types::SelectorInput;
    use crate::resources::names::{FINALIZER, MANAGED_BY_KEY, MANAGED_BY_VALUE};

    const LIMITS: TtlLimits = TtlLimits {
        default: Duration::from_secs(1800),
        max: Duration::from_secs(7200),
    };

    #[test]
    fn an_idempotency_key_always_maps_to_the_same_valid_name() {
        let a = name_for_key("run-123-attempt-1");
        assert_eq!(a, name_for_key("run-123-attempt-1"));
        assert_ne!(a, name_for_key("run-123-attempt-2"));
        assert!(selector::is_dns_subdomain(&a) && a.len() <= 63, "{a}");
    }

    fn digest_of(req: &OpenRequest) -> String {
        let tw = build_window("shop", req, Some("k"), &LIMITS).unwrap();
        tw.metadata.annotations.unwrap()[REQUEST_DIGEST_ANNOTATION].clone()
    }

    #[test]
    fn one_request_has_one_digest_however_it_is_spelled_and_another_request_another() {
        let text = OpenRequest {
            selector: Some(SelectorInput::Text("app=web".into())),
            ttl: Some("30m".into()),
            ..Default::default()
        };
        let object = OpenRequest {
            selector: Some(SelectorInput::Object(
                crate::operations::types::SelectorObject {
                    match_labels: [("app".to_string(), "web".to_string())].into(),
                    ..Default::default()
                },
            )),
            ttl: Some("1800s".into()),
            reason: Some(String::new()),
            idempotency_key: Some("k".into()),
            ..Default::default()
        };
        assert_eq!(digest_of(&text), digest_of(&object));
        for other in [
            OpenRequest {
                selector: Some(SelectorInput::Text("app=api".into())),
                ..text.clone()
            },
            OpenRequest {
                ttl: Some("20m".into()),
                ..text.clone()
            },
            OpenRequest {
                reason: Some("another".into()),
                ..text.clone()
            },
            OpenRequest {
                name: Some("w".into()),
                ..text.clone()
            },
        ] {
            assert_ne!(digest_of(&text), digest_of(&other), "{other:?}");
        }
        let without_key = build_window("shop", &text, None, &LIMITS).unwrap();
        assert!(without_key.metadata.annotations.is_none());
    }

    #[test]
    fn a_window_under_the_key_is_a_retry_only_when_it_protects_as_asked() {
        let req = OpenRequest {
            selector: Some(SelectorInput::Text("app=web".into())),
            ..Default::default()
        };
        let wanted = build_window("shop", &req, Some("k"), &LIMITS).unwrap();
        assert!(is_retry_of(&wanted.clone(), &wanted, "k"));
        assert!(!is_retry_of(&wanted, &wanted, "other key"));
        type Flag = fn(&mut crate::resources::Protect);
        let flags: [(&str, Flag); 5] = [
            ("podDisruptionBudgets", |p| p.pod_disruption_budgets = false),
            ("doNotDisrupt", |p| p.do_not_disrupt = false),
            ("nodes", |p| p.nodes = false),
            ("karpenterDuration", |p| p.karpenter_duration = true),
            ("daemonSets", |p| p.daemon_sets = true),
        ];
        for (flag, change) in flags {
            // Pre-created by someone else under the key's name, the annotations copied: the
            // stored digest says "the same request", the spec protects otherwise.
            let mut planted = wanted.clone();
            change(&mut planted.spec.protect);
            assert!(!is_retry_of(&planted, &wanted, "k"), "{flag}");
        }
        let mut other_selector = wanted.clone();
        other_selector.spec.selector.match_labels = None;
        assert!(!is_retry_of(&other_selector, &wanted, "k"));
    }

    #[test]
    fn an_open_builds_a_labelled_window_with_the_default_ttl() {
        let req = OpenRequest {
            selector: Some(SelectorInput::Text("app=web".into())),
            reason: Some("e2e".into()),
            ..Default::default()
        };
        let tw = build_window("shop", &req, Some("k1"), &LIMITS).unwrap();
        assert_eq!(
            tw.metadata.name.as_deref(),
            Some(name_for_key("k1").as_str())
        );
        assert_eq!(
            tw.metadata.annotations.unwrap()[IDEMPOTENCY_ANNOTATION],
            "k1"
        );
        assert_eq!(
            tw.metadata.labels.unwrap()[MANAGED_BY_KEY],
            MANAGED_BY_VALUE
        );
        assert_eq!(tw.spec.ttl, Duration::from_secs(1800));
        assert_eq!(tw.spec.selector.match_labels.unwrap()["app"], "web");
        assert_eq!(tw.metadata.finalizers.unwrap(), [FINALIZER]);
    }

    fn with_status(
        closed: bool,
        phase: crate::resources::Phase,
        ready: bool,
        observed: Option<i64>,
    ) -> TestWindow {
        let mut tw = build_window("shop", &OpenRequest::default(), None, &LIMITS).unwrap();
        tw.metadata.generation = Some(2);
        tw.spec.closed = closed;
        let condition: k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition =
            serde_json::from_value(serde_json::json!({
                "type": "Ready", "status": if ready { "True" } else { "False" },
                "reason": "r", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"
            }))
            .unwrap();
        tw.status = Some(crate::resources::TestWindowStatus {
            phase,
            conditions: vec![condition],
            observed_generation: observed,
            ..Default::default()
        });
        tw
    }

    #[test]
    fn a_window_is_ready_only_while_open_with_ready_true() {
        use crate::resources::Phase::*;
        assert!(is_ready(&with_status(false, Active, true, Some(2))));
        assert!(!is_ready(&with_status(false, Active, false, Some(2))));
        assert!(!is_ready(&with_status(true, Active, true, Some(2))));
    }

    #[test]
    fn an_opens_wait_ends_when_the_window_is_ready_or_ended_before_it_could_be() {
        use crate::resources::Phase::*;
        assert!(is_ready_or_ended(&with_status(
            false,
            Active,
            true,
            Some(1)
        )));
        assert!(!is_ready_or_ended(&with_status(
            false,
            Pending,
            false,
            Some(1)
        )));
        // A short ttl that ran out before the controller protected anything.
        let expired = with_status(false, Expired, false, Some(1));
        assert!(is_ready_or_ended(&expired) && !is_ready(&expired));
        assert!(is_ready_or_ended(&with_status(
            true,
            Pending,
            false,
            Some(2)
        )));
    }

    #[test]
    fn a_close_is_released_once_the_phase_is_final_for_the_current_generation() {
        use crate::resources::Phase::*;
        assert!(is_released(&with_status(true, Closed, false, Some(2))));
        assert!(!is_released(&with_status(true, Closed, false, Some(1))));
        assert!(!is_released(&with_status(true, Active, false, Some(2))));
        assert!(is_released(&with_status(true, Expired, false, None)));
        let mut releasing = with_status(true, Closed, false, Some(2));
        releasing.status.as_mut().unwrap().conditions[0].reason =
            crate::resources::RELEASING.into();
        assert!(
            !is_released(&releasing),
            "the end is recorded before the release"
        );
    }

    #[test]
    fn an_open_without_name_or_key_gets_a_generated_name() {
        let tw = build_window("shop", &OpenRequest::default(), None, &LIMITS).unwrap();
        assert!(tw.metadata.name.is_none());
        assert_eq!(tw.metadata.generate_name.as_deref(), Some("tw-"));
    }

    #[test]
    fn invalid_fields_are_refused_with_the_field_named() {
        let cases = [
            (
                OpenRequest {
                    ttl: Some("3h".into()),
                    ..Default::default()
                },
                422,
                "ttl",
            ),
            (
                OpenRequest {
                    ttl: Some("x".into()),
                    ..Default::default()
                },
                422,
                "ttl",
            ),
            (
                OpenRequest {
                    name: Some("Bad_Name".into()),
                    ..Default::default()
                },
                422,
                "name",
            ),
            (
                OpenRequest {
                    reason: Some("r".repeat(300)),
                    ..Default::default()
                },
                422,
                "reason",
            ),
            (
                OpenRequest {
                    selector: Some(SelectorInput::Text("a in b".into())),
                    ..Default::default()
                },
                400,
                "selector",
            ),
        ];
        for (req, status, field) in cases {
            let err = build_window("shop", &req, None, &LIMITS).unwrap_err();
            assert_eq!(err.status().as_u16(), status, "{req:?}");
            assert!(err.to_string().contains(field), "{err}");
        }
    }
}
