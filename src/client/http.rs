//! The operator's HTTP API at a base URL: every request with the bearer token taken again
//! for it, retried under the [`RetryPolicy`] while the guard hiccups; a wait is a request with
//! `?wait=true&timeout=…` that the server answers once the window is Ready or released.

use std::time::{Duration, Instant, SystemTime};

use serde::de::DeserializeOwned;

use super::ClientError;
use super::credentials::TokenSource;
use super::retry::{self, RetryPolicy};
use super::waited::Waited;
use crate::api::request::MAX_WAIT;
use crate::operations::problem::Problem;
use crate::operations::types::WindowView;
use crate::resources::duration;

/// Longest a single request may take before it is abandoned (and retried); a request that
/// waits on the server may take this much longer than the wait it asks for.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The HTTP API at a base URL, with the bearer token of a [`TokenSource`] (taken again for
/// every attempt); every request is retried under its [`RetryPolicy`].
#[derive(Clone)]
pub struct HttpBackend {
    pub(super) client: reqwest::Client,
    pub(super) base: String,
    token: TokenSource,
    pub(super) retry: RetryPolicy,
}

impl HttpBackend {
    /// A client for `base` (e.g. `https://guard.example.com`) retrying under `retry`.
    pub fn new(base: &str, token: TokenSource, retry: RetryPolicy) -> Result<Self, ClientError> {
        // The rustls provider must be chosen once per process before an HTTPS client exists.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            // An answer that takes longer is a connection to a replica that is gone: give up
            // on it and retry. A request that waits (`?wait=true`) sets its own, longer one.
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

    /// The same client retrying under `retry`.
    pub(super) fn with_retry(&self, retry: RetryPolicy) -> Self {
        Self {
            retry,
            ..self.clone()
        }
    }

    pub(super) fn url(&self, ns: &str, rest: &str) -> String {
        format!("{}/v1/namespaces/{ns}/windows{rest}", self.base)
    }

    /// Sends `req`, again under the retry policy while the failure is transient.
    pub(super) async fn send<T: DeserializeOwned>(
        &self,
        req: reqwest::RequestBuilder,
    ) -> Result<T, ClientError> {
        let what = describe(&req);
        retry::with_retry(&self.retry, &what, || async {
            let attempt = req.try_clone().ok_or_else(|| {
                ClientError::Config("the request cannot be repeated (streamed body)".into())
            })?;
            self.send_once(self.authorized(attempt).await?).await
        })
        .await
    }

    /// `req` with the bearer token, taken again for every attempt.
    async fn authorized(
        &self,
        req: reqwest::RequestBuilder,
    ) -> Result<reqwest::RequestBuilder, ClientError> {
        Ok(match self.token.current(&self.client).await? {
            Some(token) => req.bearer_auth(token),
            None => req,
        })
    }

    /// Waits until `deadline` with the requests `ask` makes for a `?wait=true&timeout=…`: each
    /// attempt asks for the time left (at most the server's [`MAX_WAIT`]; nothing left asks for
    /// none, a last look), under the retry policy like any request. The server's 504 of a wait
    /// that ran out is its answer, never retried; past `MAX_WAIT` the wait is asked again.
    pub(super) async fn wait(
        &self,
        deadline: Instant,
        ask: impl Fn(&str) -> reqwest::RequestBuilder,
    ) -> Result<Waited, ClientError> {
        let what = describe(&ask("0s"));
        loop {
            let (waited, cut) = retry::with_retry(&self.retry, &what, || {
                let left = deadline.saturating_duration_since(Instant::now());
                let asked = left.min(MAX_WAIT);
                let req = ask(&duration::format(asked)).timeout(asked + REQUEST_TIMEOUT);
                async move {
                    let waited = match self.send_once(self.authorized(req).await?).await {
                        Ok(view) => Waited::Done(view),
                        Err(err) => Waited::TimedOut(wait_ran_out(err)?),
                    };
                    Ok((waited, asked < left))
                }
            })
            .await?;
            if !(cut && matches!(waited, Waited::TimedOut(_))) {
                return Ok(waited);
            }
        }
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

/// `METHOD /path` of a request, for messages.
fn describe(req: &reqwest::RequestBuilder) -> String {
    match req.try_clone().and_then(|r| r.build().ok()) {
        Some(r) => format!("{} {}", r.method(), r.url().path()),
        None => "request".to_string(),
    }
}

/// The window's state in the server's answer to a wait that ran out (a 504 of type
/// `…/timeout` carrying the window); any other failure as it is (a proxy's 504 has no window,
/// and is retried).
fn wait_ran_out(err: ClientError) -> Result<WindowView, ClientError> {
    match err {
        ClientError::Api { problem, .. }
            if problem.status == 504
                && problem.type_.ends_with("/timeout")
                && problem.window.is_some() =>
        {
            Ok(*problem.window.expect("checked"))
        }
        err => Err(err),
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

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use axum::http::{HeaderMap, StatusCode, Uri};
    use axum::response::IntoResponse;

    use super::*;
    use crate::operations::problem::ApiError;

    /// The requests the fake API saw: path and query, `Idempotency-Key`.
    type Seen = Arc<Mutex<Vec<(String, Option<String>)>>>;

    /// An answer of the fake API, kept to be sent again.
    type Answer = (StatusCode, HeaderMap, axum::body::Bytes);

    async fn answer(resp: impl IntoResponse) -> Answer {
        let (parts, body) = resp.into_response().into_parts();
        let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
        (parts.status, parts.headers, body)
    }

    /// An API on a loopback port answering each request with the next of `answers` (the last
    /// one again once they run out); returns its base URL and the requests seen (path and
    /// query, and the `Idempotency-Key`).
    async fn api(answers: Vec<Answer>) -> (String, Seen) {
        let seen: Seen = Arc::default();
        let answers = Arc::new(Mutex::new(answers));
        let app = axum::Router::new().fallback({
            let seen = seen.clone();
            move |uri: Uri, headers: HeaderMap| {
                let (seen, answers) = (seen.clone(), answers.clone());
                async move {
                    let key = headers
                        .get("idempotency-key")
                        .map(|v| v.to_str().unwrap().to_string());
                    seen.lock().unwrap().push((uri.to_string(), key));
                    let mut answers = answers.lock().unwrap();
                    if answers.len() > 1 {
                        answers.remove(0)
                    } else {
                        answers[0].clone()
                    }
                }
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (base, seen)
    }

    fn window(phase: &str, ready: bool) -> WindowView {
        WindowView {
            name: "tw-1".into(),
            namespace: "shop".into(),
            phase: phase.into(),
            ready,
            ..Default::default()
        }
    }

    fn backend(base: &str, budget: Duration) -> HttpBackend {
        HttpBackend::new(base, TokenSource::None, RetryPolicy::new(budget)).unwrap()
    }

    async fn wait_for_ready(h: &HttpBackend, timeout: Duration) -> Result<Waited, ClientError> {
        let url = h.url("shop", "");
        h.wait(Instant::now() + timeout, |t| {
            h.client
                .post(&url)
                .query(&[("wait", "true"), ("timeout", t)])
                .header("Idempotency-Key", "k-1")
        })
        .await
    }

    #[tokio::test]
    async fn a_wait_over_the_identitys_cap_is_asked_again_after_retry_after_for_the_time_left() {
        let refused = answer(ApiError::TooManyWaits {
            identity: "static:ci".into(),
            limit: 1,
            retry_after: Duration::from_secs(1),
        })
        .await;
        let ready = answer((StatusCode::OK, axum::Json(window("Active", true)))).await;
        let (base, seen) = api(vec![refused, ready]).await;
        let started = Instant::now();
        let waited = wait_for_ready(
            &backend(&base, Duration::from_secs(30)),
            Duration::from_secs(60),
        )
        .await
        .unwrap();
        assert_eq!(waited, Waited::Done(window("Active", true)));
        assert!(
            started.elapsed() >= Duration::from_secs(1),
            "Retry-After was honoured"
        );
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 2, "{seen:?}");
        for (uri, key) in &seen {
            assert!(
                uri.starts_with("/v1/namespaces/shop/windows?wait=true&timeout="),
                "{uri}"
            );
            assert_eq!(key.as_deref(), Some("k-1"));
        }
        let asked = |uri: &str| duration::parse(uri.rsplit('=').next().unwrap()).unwrap();
        assert!(asked(&seen[0].0) <= Duration::from_secs(60));
        assert!(
            asked(&seen[1].0) <= Duration::from_secs(59),
            "the retry asks for what is left: {seen:?}"
        );
    }

    #[tokio::test]
    async fn the_servers_answer_that_the_wait_ran_out_is_not_retried_but_a_proxys_504_is() {
        let ran_out = answer(ApiError::Timeout {
            detail: "window \"tw-1\" was not Ready within 1s".into(),
            window: Box::new(window("Pending", false)),
        })
        .await;
        // How a wait of `budget` against these answers ended, and how many requests it made.
        let wait = |answers, budget| async move {
            let (base, seen) = api(answers).await;
            let backend = backend(&base, Duration::from_secs(30));
            let waited = wait_for_ready(&backend, budget).await.unwrap();
            let requests = seen.lock().unwrap().len();
            (waited, requests)
        };
        let (waited, requests) = wait(vec![ran_out], Duration::from_secs(1)).await;
        assert_eq!(waited, Waited::TimedOut(window("Pending", false)));
        assert_eq!(requests, 1);

        let proxy = answer((StatusCode::GATEWAY_TIMEOUT, "upstream timed out")).await;
        let ready = answer((StatusCode::CREATED, axum::Json(window("Active", true)))).await;
        let (waited, requests) = wait(vec![proxy, ready], Duration::from_secs(60)).await;
        assert_eq!(waited, Waited::Done(window("Active", true)));
        assert_eq!(requests, 2);
    }

    #[tokio::test]
    async fn a_wait_that_cannot_connect_is_retried_within_the_budget() {
        // A port nothing listens on: every attempt is refused, retried until the budget.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let h = backend(&format!("http://127.0.0.1:{port}"), Duration::from_secs(1));
        let started = Instant::now();
        let err = wait_for_ready(&h, Duration::from_secs(60))
            .await
            .unwrap_err();
        assert!(matches!(err, ClientError::Unreachable(_)), "{err}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
