//! Waiting until a window's protection is in effect: what an open's `?wait` answers, and what
//! the client's direct (`--kubeconfig`) mode waits for, decided once for both; and the open's
//! `requirePods`, kept here for both alike: a window that is Ready over no pod fails the open
//! and is closed again.

use std::time::Duration;

use super::problem::ApiError;
use super::selector;
use super::types::{SelectorObject, WindowView};
use super::windows::{Windows, is_ready, is_ready_or_ended};
use crate::resources::TestWindow;

impl Windows {
    /// Watches the window from `last` until it is Ready; a 409 as soon as it has ended instead
    /// (a short ttl ran out, or it was closed: it will never be Ready), a 504 with its state
    /// after `timeout`. With `require_pods`, a window Ready over no pod is closed and the
    /// answer is a 422 naming `requirePods` ([`Windows::refuse_no_pods`]).
    pub async fn wait_ready(
        &self,
        ns: &str,
        name: &str,
        timeout: Duration,
        last: TestWindow,
        require_pods: bool,
    ) -> Result<TestWindow, ApiError> {
        let tw = self
            .wait(ns, name, timeout, "Ready", is_ready_or_ended, last)
            .await?;
        if is_ready(&tw) {
            if require_pods && tw.status.as_ref().is_some_and(|s| s.selects_no_pod()) {
                return Err(self.refuse_no_pods(ns, name, tw).await);
            }
            return Ok(tw);
        }
        let phase = tw.status.as_ref().map(|s| s.phase).unwrap_or_default();
        Err(ApiError::Conflict(format!(
            "window {name:?} ended ({phase:?}) before its protection was in effect; open a new one"
        )))
    }

    /// Closes the window `tw`, Ready over no pod, so that an open refused for `requirePods`
    /// leaves nothing open; the 422 names the field, the window and its selector.
    async fn refuse_no_pods(&self, ns: &str, name: &str, tw: TestWindow) -> ApiError {
        let (window, closed) = match self.close(ns, name, |_| Ok(())).await {
            Ok(closed) => (closed, "it was closed".to_string()),
            Err(err) => (tw, format!("closing it failed ({err}): its ttl ends it")),
        };
        ApiError::NoPodsSelected {
            detail: no_pods_detail(
                ns,
                name,
                &SelectorObject::from(&window.spec.selector),
                &closed,
            ),
            window: Box::new(WindowView::from_window(&window)),
        }
    }
}

/// The detail of a `requirePods` refusal: the field, the window, its selector and `closed`
/// (what became of the window).
fn no_pods_detail(ns: &str, name: &str, sel: &SelectorObject, closed: &str) -> String {
    let check = match selector::text(sel) {
        text if text.is_empty() => "the namespace has no pod (DaemonSet pods count only with \
                                    protect.daemonSets)"
            .to_string(),
        text => format!("check the selector {text}"),
    };
    format!("requirePods: window {name} selects no pod in {ns}: {check}; {closed}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_require_pods_refusal_names_the_field_the_window_and_what_to_check() {
        let sel = selector::parse_text("tier=backend").unwrap();
        assert_eq!(
            no_pods_detail("shop", "tw-1", &sel, "it was closed"),
            "requirePods: window tw-1 selects no pod in shop: check the selector tier=backend; \
             it was closed"
        );
        let all = no_pods_detail("shop", "tw-1", &SelectorObject::default(), "it was closed");
        assert!(all.contains("the namespace has no pod"), "{all}");
    }
}
