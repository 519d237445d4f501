//! Waiting until a window's protection is in effect: what an open's `?wait` answers, and what
//! the client's direct (`--kubeconfig`) mode waits for, decided once for both.

use std::time::Duration;

use super::problem::ApiError;
use super::windows::{Windows, is_ready, is_ready_or_ended};
use crate::resources::TestWindow;

impl Windows {
    /// Watches the window from `last` until it is Ready; a 409 as soon as it has ended instead
    /// (a short ttl ran out, or it was closed: it will never be Ready), a 504 with its state
    /// after `timeout`.
    pub async fn wait_ready(
        &self,
        ns: &str,
        name: &str,
        timeout: Duration,
        last: TestWindow,
    ) -> Result<TestWindow, ApiError> {
        let tw = self
            .wait(ns, name, timeout, "Ready", is_ready_or_ended, last)
            .await?;
        if is_ready(&tw) {
            return Ok(tw);
        }
        let phase = tw.status.as_ref().map(|s| s.phase).unwrap_or_default();
        Err(ApiError::Conflict(format!(
            "window {name:?} ended ({phase:?}) before its protection was in effect; open a new one"
        )))
    }
}
