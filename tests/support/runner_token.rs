//! A local stand-in for the GitHub Actions runner's id-token endpoint
//! (`ACTIONS_ID_TOKEN_REQUEST_URL` / `ACTIONS_ID_TOKEN_REQUEST_TOKEN`), handing out the real
//! test issuer's tokens: `GET <url>&audience=<aud>` with `Authorization: Bearer <request
//! token>` answers `{"value": "<jwt>"}` for the issuer's ServiceAccount the endpoint stands for,
//! as the runner answers with the job's token. Only the transport is stood in for: the tokens
//! are the issuer's, with real signatures and claims. It records the audiences asked for.
//!
//! It serves from a thread of its own, so a test may block on a child process (node, the CLI)
//! while the child asks it for tokens.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;

use super::issuer::Issuer;

/// A running stand-in, stopped when dropped.
pub struct RunnerTokenEndpoint {
    /// `ACTIONS_ID_TOKEN_REQUEST_URL`.
    pub url: String,
    /// `ACTIONS_ID_TOKEN_REQUEST_TOKEN`.
    pub request_token: String,
    requests: Arc<Mutex<Vec<String>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[derive(Clone)]
struct Shared {
    issuer: &'static Issuer,
    ns: String,
    name: String,
    request_token: String,
    requests: Arc<Mutex<Vec<String>>>,
}

impl RunnerTokenEndpoint {
    /// Stands in for the runner of a job whose identity is the issuer's ServiceAccount
    /// `ns/name`.
    pub fn start(issuer: &'static Issuer, ns: &str, name: &str) -> Self {
        let request_token = format!("runner-request-token-{}", rand::random::<u64>());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let shared = Shared {
            issuer,
            ns: ns.to_string(),
            name: name.to_string(),
            request_token: request_token.clone(),
            requests: requests.clone(),
        };
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let app = axum::Router::new()
                    .route("/_apis/idtoken", get(token))
                    .with_state(shared);
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                axum::serve(listener, app)
                    .with_graceful_shutdown(async {
                        let _ = stopped.await;
                    })
                    .await
                    .unwrap();
            });
        });
        Self {
            // As the runner's: a query string is already there, the client adds `audience`.
            url: format!("http://127.0.0.1:{port}/_apis/idtoken?api-version=2.0"),
            request_token,
            requests,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// The two variables the runner sets for a job with `permissions: id-token: write`.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("ACTIONS_ID_TOKEN_REQUEST_URL", self.url.clone()),
            ("ACTIONS_ID_TOKEN_REQUEST_TOKEN", self.request_token.clone()),
        ]
    }

    /// The audiences of the tokens handed out so far, in order.
    pub fn audiences(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

impl Drop for RunnerTokenEndpoint {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn token(
    State(s): State<Shared>,
    headers: HeaderMap,
    Query(query): Query<std::collections::HashMap<String, String>>,
) -> Result<axum::Json<serde_json::Value>, StatusCode> {
    let expected = format!("bearer {}", s.request_token);
    let presented = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_ascii_lowercase);
    if presented.as_deref() != Some(expected.to_ascii_lowercase().as_str()) {
        return Err(StatusCode::UNAUTHORIZED);
    }
    // Without `audience` the runner uses the repository owner's URL.
    let audience = query
        .get("audience")
        .cloned()
        .unwrap_or_else(|| "https://github.com/test-owner".to_string());
    s.requests.lock().unwrap().push(audience.clone());
    let jwt = tokio::task::spawn_blocking(move || {
        // The runner's tokens live minutes; the issuer mints 10 at least.
        s.issuer
            .token(&s.ns, &s.name, &audience, Duration::from_secs(600))
    })
    .await
    .map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)?;
    Ok(axum::Json(serde_json::json!({"value": jwt})))
}
