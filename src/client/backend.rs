//! Where the windows are — the operator's HTTP API or the cluster itself — and the window
//! operations over either, waits included: through the API, the open or the close asked with
//! `?wait=true`, answered once the window is Ready or released (the server watches the window);
//! in direct mode, a watch of its own.

use std::time::{Duration, Instant};

use super::ClientError;
use super::http::HttpBackend;
use super::retry::RetryPolicy;
use super::waited::Waited;
use crate::operations::problem::ApiError;
use crate::operations::types::{OpenRequest, RenewRequest, WindowList, WindowView};
use crate::operations::windows::{Windows, is_released};

/// An idempotency key for an open that names none, so that retrying it after a lost answer
/// finds the window the first attempt made instead of opening a second one.
pub fn generated_key() -> String {
    format!(
        "dg-{:016x}{:016x}",
        fastrand::u64(..),
        fastrand::u64(..) ^ u64::from(std::process::id())
    )
}

/// Where the windows are.
#[derive(Clone)]
pub enum Backend {
    /// The operator's HTTP API.
    Http(HttpBackend),
    /// The cluster directly.
    Kube(Windows),
}

/// A direct-mode wait's end as a [`Waited`]: its 504 is the time running out.
fn waited(result: Result<crate::resources::TestWindow, ApiError>) -> Result<Waited, ClientError> {
    match result {
        Ok(tw) => Ok(Waited::Done(WindowView::from_window(&tw))),
        Err(ApiError::Timeout { window, .. }) => Ok(Waited::TimedOut(*window)),
        Err(err) => Err(err.into()),
    }
}

impl Backend {
    /// The same backend retrying under `retry` (direct mode keeps kube's own retries).
    pub fn with_retry(&self, retry: RetryPolicy) -> Backend {
        match self {
            Backend::Http(h) => Backend::Http(h.with_retry(retry)),
            Backend::Kube(w) => Backend::Kube(w.clone()),
        }
    }

    /// The retry policy of the backend (none in direct mode, where kube retries).
    pub fn retry(&self) -> RetryPolicy {
        match self {
            Backend::Http(h) => h.retry,
            Backend::Kube(_) => RetryPolicy::NONE,
        }
    }

    /// Opens a window (does not wait for Ready). `requirePods` is a condition of the wait
    /// ([`Backend::wait_ready`]), so the open itself never asks it.
    pub async fn open(
        &self,
        ns: &str,
        req: &OpenRequest,
        key: Option<&str>,
    ) -> Result<WindowView, ClientError> {
        let req = &OpenRequest {
            require_pods: false,
            ..req.clone()
        };
        match self {
            Backend::Http(h) => {
                let mut r = h.client.post(h.url(ns, "")).json(req);
                if let Some(k) = key {
                    r = r.header("Idempotency-Key", k);
                }
                h.send(r).await
            }
            Backend::Kube(w) => Ok(WindowView::from_window(
                &w.open(ns, req, key, None).await?.0,
            )),
        }
    }

    /// Reads a window.
    pub async fn get(&self, ns: &str, name: &str) -> Result<WindowView, ClientError> {
        match self {
            Backend::Http(h) => h.send(h.client.get(h.url(ns, &format!("/{name}")))).await,
            Backend::Kube(w) => Ok(WindowView::from_window(&w.get(ns, name).await?)),
        }
    }

    /// Lists the windows of `ns` (every namespace with `None`) whose labels match `labels`.
    pub async fn list(
        &self,
        ns: Option<&str>,
        labels: Option<&str>,
    ) -> Result<WindowList, ClientError> {
        match self {
            Backend::Http(h) => {
                let url = match ns {
                    Some(ns) => h.url(ns, ""),
                    None => format!("{}/v1/windows", h.base),
                };
                let query: Vec<(&str, &str)> =
                    labels.map(|l| ("labelSelector", l)).into_iter().collect();
                h.send(h.client.get(url).query(&query)).await
            }
            Backend::Kube(w) => Ok(w.list(ns, labels).await?),
        }
    }

    /// Renews a window for `ttl` from now.
    pub async fn renew(
        &self,
        ns: &str,
        name: &str,
        ttl: Option<String>,
    ) -> Result<WindowView, ClientError> {
        let req = RenewRequest { ttl };
        match self {
            Backend::Http(h) => {
                h.send(
                    h.client
                        .post(h.url(ns, &format!("/{name}/renew")))
                        .json(&req),
                )
                .await
            }
            Backend::Kube(w) => Ok(WindowView::from_window(
                &w.renew(ns, name, &req, jiff::Timestamp::now(), |_| Ok(None))
                    .await?,
            )),
        }
    }

    /// Closes a window (does not wait for the release).
    pub async fn close(&self, ns: &str, name: &str) -> Result<WindowView, ClientError> {
        match self {
            Backend::Http(h) => {
                h.send(h.client.delete(h.url(ns, &format!("/{name}"))))
                    .await
            }
            Backend::Kube(w) => Ok(WindowView::from_window(
                &w.close(ns, name, |_| Ok(())).await?,
            )),
        }
    }

    /// Waits until the window `name`, opened with `req` and `key`, is Ready, for at most
    /// `timeout`: through the API, the same open asked again (the key finds the window the
    /// first made) with `?wait=true`, which the server answers once protection is in effect,
    /// with one watch. A window that ended first is a 409: it will never be Ready. With
    /// `req.require_pods`, a window Ready over no pod is closed and the answer is a 422.
    pub async fn wait_ready(
        &self,
        ns: &str,
        name: &str,
        req: &OpenRequest,
        key: &str,
        timeout: Duration,
    ) -> Result<Waited, ClientError> {
        let deadline = Instant::now() + timeout;
        match self {
            Backend::Http(h) => {
                let url = h.url(ns, "");
                h.wait(deadline, |t| {
                    h.client
                        .post(&url)
                        .query(&[("wait", "true"), ("timeout", t)])
                        .header("Idempotency-Key", key)
                        .json(req)
                })
                .await
            }
            Backend::Kube(w) => {
                let last = w.get(ns, name).await?;
                waited(
                    w.wait_ready(ns, name, timeout, last, req.require_pods)
                        .await,
                )
            }
        }
    }

    /// Waits until the closed window `name` is released, for at most `timeout`: through the
    /// API, the close asked again (closing a closed window changes nothing) with `?wait=true`.
    pub async fn wait_released(
        &self,
        ns: &str,
        name: &str,
        timeout: Duration,
    ) -> Result<Waited, ClientError> {
        let deadline = Instant::now() + timeout;
        match self {
            Backend::Http(h) => {
                let url = h.url(ns, &format!("/{name}"));
                h.wait(deadline, |t| {
                    h.client
                        .delete(&url)
                        .query(&[("wait", "true"), ("timeout", t)])
                })
                .await
            }
            Backend::Kube(w) => {
                let last = w.get(ns, name).await?;
                waited(
                    w.wait(ns, name, timeout, "released", is_released, last)
                        .await,
                )
            }
        }
    }
}
