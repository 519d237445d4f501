//! Where the windows are — the operator's HTTP API or the cluster itself — and the window
//! operations over either.

use std::time::{Duration, SystemTime};

use serde::de::DeserializeOwned;

use super::ClientError;
use super::credentials::TokenSource;
use super::retry::{self, RetryPolicy};
use crate::operations::problem::Problem;
use crate::operations::types::{OpenRequest, RenewRequest, WindowList, WindowView};
use crate::operations::windows::Windows;

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

/// Longest a single request may take before it is abandoned (and retried).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The HTTP API at a base URL, with the bearer token of a [`TokenSource`] (taken again for
/// every attempt); every request is retried under its [`RetryPolicy`].
#[derive(Clone)]
pub struct HttpBackend {
    client: reqwest::Client,
    base: String,
    token: TokenSource,
    retry: RetryPolicy,
}

impl HttpBackend {
    /// A client for `base` (e.g. `https://guard.example.com`) retrying under `retry`.
    pub fn new(base: &str, token: TokenSource, retry: RetryPolicy) -> Result<Self, ClientError> {
        // The rustls provider must be chosen once per process before an HTTPS client exists.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            // No call of the client waits on the server (waits poll), so an answer that takes
            // longer is a connection to a replica that is gone: give up on it and retry.
            .timeout(REQUEST_TIMEOUT)
            .connect_timeout(Duration::from_secs(10))
            .user_agent(concat!("disruption-guard/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ClientError::Config(format!("building the HTTP client: {e}")))?;
        Ok(Self {
            client,
            base: base.trim_end_matches('/').to_string(),
            token,
            retry,
        })
    }

    fn url(&self, ns: &str, rest: &str) -> String {
        format!("{}/v1/namespaces/{ns}/windows{rest}", self.base)
    }

    /// Sends `req`, again under the retry policy while the failure is transient.
    async fn send<T: DeserializeOwned>(
        &self,
        req: reqwest::RequestBuilder,
    ) -> Result<T, ClientError> {
        let what = match req.try_clone().and_then(|r| r.build().ok()) {
            Some(r) => format!("{} {}", r.method(), r.url().path()),
            None => "request".to_string(),
        };
        retry::with_retry(&self.retry, &what, || async {
            let attempt = req.try_clone().ok_or_else(|| {
                ClientError::Config("the request cannot be repeated (streamed body)".into())
            })?;
            let attempt = match self.token.current(&self.client).await? {
                Some(token) => attempt.bearer_auth(token),
                None => attempt,
            };
            self.send_once(attempt).await
        })
        .await
    }

    async fn send_once<T: DeserializeOwned>(
        &self,
        req: reqwest::RequestBuilder,
    ) -> Result<T, ClientError> {
        let resp = req
            .send()
            .await
            .map_err(|e| ClientError::Unreachable(error_chain(&e)))?;
        let status = resp.status();
        let retry_after = resp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| retry::parse_retry_after(v, SystemTime::now()));
        let bytes = resp.bytes().await.map_err(|e| {
            ClientError::Unreachable(format!("reading the answer: {}", error_chain(&e)))
        })?;
        if status.is_success() {
            return serde_json::from_slice(&bytes).map_err(|e| {
                ClientError::Transport(format!("the server's answer is not a window: {e}"))
            });
        }
        let problem = serde_json::from_slice::<Problem>(&bytes).unwrap_or_else(|_| Problem {
            type_: "about:blank".into(),
            title: status.canonical_reason().unwrap_or("Error").into(),
            status: status.as_u16(),
            detail: String::from_utf8_lossy(&bytes).chars().take(300).collect(),
            instance: None,
            window: None,
        });
        Err(ClientError::Api {
            problem: Box::new(problem),
            retry_after,
        })
    }
}

/// An error and its causes on one line (reqwest's own message hides "connection refused").
fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

impl Backend {
    /// The same backend retrying under `retry` (direct mode keeps kube's own retries).
    pub fn with_retry(&self, retry: RetryPolicy) -> Backend {
        match self {
            Backend::Http(h) => Backend::Http(HttpBackend { retry, ..h.clone() }),
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

    /// Opens a window (does not wait for Ready).
    pub async fn open(
        &self,
        ns: &str,
        req: &OpenRequest,
        key: Option<&str>,
    ) -> Result<WindowView, ClientError> {
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
}
