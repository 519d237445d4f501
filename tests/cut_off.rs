//! An operator cut off from the API server without its process dying: a proxy between them
//! stalls every byte. Its watches go stale, so `/readyz` must turn 503; its HTTP API must
//! answer 503 problems within its bound on calls to the API server (never hang, never 500);
//! and once the API server answers again it must be ready and serve windows without a restart.
//!
//! Its own test binary: the chaos test restarts the API server.

mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::operator::Operator;
use support::proxy::Proxy;
use support::windows::is_ready;
use support::{wait, with_namespace};

/// The operator's bound: the API server silent for 10 s, probed every 5 s (5 s timeout).
const NOT_READY_WITHIN: Duration = Duration::from_secs(25);
/// The HTTP API's bound on one call to the API server, plus slack.
const ANSWER_WITHIN: Duration = Duration::from_secs(15);

async fn readyz(op: &Operator) -> (u16, String) {
    let resp = reqwest::get(format!("{}/readyz", op.admin)).await.unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

/// Opens a window through the HTTP API: status, content type and body, and how long it took.
async fn open(op: &Operator, ns: &str, name: &str) -> (u16, String, Value, Duration) {
    let started = Instant::now();
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/namespaces/{ns}/windows", op.api))
        .json(&json!({"name": name, "ttl": "10m", "selector": "app=none"}))
        .timeout(Duration::from_secs(60))
        .send()
        .await
        .expect("the HTTP API answers (no hang)");
    let status = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let body = resp.json().await.unwrap_or(Value::Null);
    (status, content_type, body, started.elapsed())
}

#[tokio::test]
async fn cut_off_from_the_api_server_it_says_not_ready_answers_503_and_recovers_without_a_restart()
{
    with_namespace(|client, ns| async move {
        let proxy = Proxy::start().await;
        let args = vec![format!("--namespaces={ns}"), "--insecure-no-auth".into()];
        let op = Operator::start_as(&ns, args, proxy.kubeconfig()).await;
        let pid = op.pid();
        assert_eq!(open(&op, &ns, "before").await.0, 201);

        let stalled = proxy.stall();
        let cut = Instant::now();
        let (code, content_type, problem, took) = open(&op, &ns, "during").await;
        println!("cut off: an open answered {code} after {took:?}: {problem}");
        assert_eq!(code, 503, "{problem}");
        assert_eq!(content_type, "application/problem+json");
        assert!(took < ANSWER_WITHIN, "the answer took {took:?}");
        assert!(
            problem["detail"].as_str().unwrap().contains("unreachable"),
            "{problem}"
        );

        wait::until(
            "/readyz to say the watches are stale",
            NOT_READY_WITHIN,
            || async {
                let (code, text) = readyz(&op).await;
                code == 503 && text.contains("watches stale")
            },
        )
        .await;
        println!(
            "cut off: /readyz 503 {:?} after the cut: {}",
            cut.elapsed(),
            readyz(&op).await.1.trim()
        );

        drop(stalled);
        let healed = Instant::now();
        wait::until("/readyz to say ready again", NOT_READY_WITHIN, || async {
            readyz(&op).await.0 == 200
        })
        .await;
        println!(
            "cut off: ready again {:?} after the API server answered",
            healed.elapsed()
        );
        assert_eq!(op.pid(), pid, "recovered without a restart");

        let (code, _, body, _) = open(&op, &ns, "after").await;
        assert_eq!(code, 201, "{body}");
        let windows =
            kube::Api::<disruption_guard::resources::TestWindow>::namespaced(client.clone(), &ns);
        wait::until(
            "the window opened after the cut to be Ready",
            Duration::from_secs(30),
            || async { windows.get("after").await.is_ok_and(|w| is_ready(&w)) },
        )
        .await;
    })
    .await;
}
