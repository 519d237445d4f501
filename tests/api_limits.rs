//! The HTTP API's resource limits against the real operator: thousands of idle connections do
//! not stop a real request, connections over `--max-connections` wait to be accepted instead of
//! taking the process down, a client that sends its headers too slowly is cut off after
//! `--header-read-timeout`, a body too slow for `--body-read-timeout` is a 408, one client
//! address holds no more than `--max-connections-per-address` (a 429 beyond, while other
//! addresses still get in), and `?wait` requests over `--max-waits-per-identity` are 429 for
//! that identity only, told to come back when its waits are expected to end.

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::PostParams;
use reqwest::StatusCode;
use serde_json::{Value, json};
use support::operator::Operator;
use support::{wait, with_namespace};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn windows_url(op: &Operator, ns: &str) -> String {
    format!("{}/v1/namespaces/{ns}/windows", op.api)
}

fn api_addr(op: &Operator) -> String {
    op.api.trim_start_matches("http://").to_string()
}

/// Raises this process's soft limit of open files to its hard limit; the soft limit now.
fn raise_open_files() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed by reference.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        limit.rlim_cur = limit.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
    }
    limit.rlim_cur
}

/// Opens `n` TCP connections to `addr` that send nothing, 200 at a time. With `held_by`, each
/// batch waits until that operator holds every connection opened so far: a burst larger than
/// the listen queue would lose connections in the kernel (established for the client, dropped
/// for the server), which is not what is measured here.
async fn idle_connections(addr: &str, n: usize, held_by: Option<&Operator>) -> Vec<TcpStream> {
    let mut open = Vec::with_capacity(n);
    while open.len() < n {
        let batch = (n - open.len()).min(200);
        let connects = (0..batch).map(|_| TcpStream::connect(addr.to_string()));
        for conn in futures::future::join_all(connects).await {
            open.push(conn.expect("connecting to the API"));
        }
        if let Some(op) = held_by {
            let want = open.len() as f64;
            wait::until_ok(
                "the operator to hold the connections",
                Duration::from_secs(30),
                || async {
                    let held = metric(op, "disruption_guard_api_connections").await;
                    if held >= want {
                        Ok(())
                    } else {
                        Err(format!("it holds {held} of {want}"))
                    }
                },
            )
            .await;
        }
    }
    open
}

/// The value of an unlabelled metric.
async fn metric(op: &Operator, name: &str) -> f64 {
    let text = op.metrics().await;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
}

/// A request a client would make, answered within `limit`.
async fn list_within(op: &Operator, ns: &str, limit: Duration) -> StatusCode {
    let started = Instant::now();
    let resp = reqwest::Client::builder()
        .timeout(limit)
        .build()
        .unwrap()
        .get(windows_url(op, ns))
        .send()
        .await
        .unwrap_or_else(|e| panic!("a real request was not answered within {limit:?}: {e}"));
    eprintln!("a real request answered in {:?}", started.elapsed());
    resp.status()
}

#[tokio::test]
async fn five_thousand_idle_connections_do_not_stop_a_real_request() {
    with_namespace(|_client, ns| async move {
        let soft = raise_open_files();
        assert!(
            soft > 5_500,
            "this test needs 5,500 open files; the hard limit is {soft}"
        );
        // Idle connections are held for the whole test, not cut off by the header timeout;
        // all come from one address, so its share is the whole cap here.
        let op = Operator::start(
            &ns,
            &[
                "--header-read-timeout=120s",
                "--max-connections-per-address=10000",
            ],
        )
        .await;
        let (rss_before, _) = op.rss_kib();
        let idle = idle_connections(&api_addr(&op), 5_000, Some(&op)).await;
        assert_eq!(
            metric(&op, "disruption_guard_api_connections").await,
            5_000.0
        );
        let (rss_idle, _) = op.rss_kib();
        eprintln!(
            "operator RSS: {rss_before} KiB before, {rss_idle} KiB with 5,000 idle connections \
             ({:.1} KiB each)",
            (rss_idle.saturating_sub(rss_before)) as f64 / 5_000.0
        );
        assert_eq!(
            list_within(&op, &ns, Duration::from_secs(5)).await,
            StatusCode::OK
        );
        assert!(op.pid().is_some() && reqwest::get(format!("{}/healthz", op.admin)).await.is_ok());
        drop(idle);
    })
    .await;
}

#[tokio::test]
async fn connections_over_the_cap_wait_to_be_accepted_and_the_process_survives() {
    with_namespace(|_client, ns| async move {
        raise_open_files();
        let op = Operator::start(&ns, &["--max-connections=50", "--header-read-timeout=2s"]).await;
        assert_eq!(
            metric(&op, "disruption_guard_api_connection_limit").await,
            50.0
        );
        // 300 idle clients: 50 are served, the rest wait in the listen queue.
        let idle = idle_connections(&api_addr(&op), 300, None).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(metric(&op, "disruption_guard_api_connections").await, 50.0);
        // A real client queued behind them gets in as the idle ones are cut off, 50 every 2 s.
        assert_eq!(
            list_within(&op, &ns, Duration::from_secs(30)).await,
            StatusCode::OK
        );
        assert!(metric(&op, "disruption_guard_api_header_read_timeouts_total").await >= 50.0);
        assert!(
            reqwest::get(format!("{}/healthz", op.admin))
                .await
                .unwrap()
                .status()
                .is_success()
        );
        drop(idle);
    })
    .await;
}

#[tokio::test]
async fn a_connection_that_sends_its_headers_too_slowly_is_closed_after_the_timeout() {
    with_namespace(|_client, ns| async move {
        let op = Operator::start(&ns, &["--header-read-timeout=2s"]).await;
        let mut conn = TcpStream::connect(api_addr(&op)).await.unwrap();
        let started = Instant::now();
        conn.write_all(
            format!("GET /v1/namespaces/{ns}/windows HTTP/1.1\r\nHost: x\r\n").as_bytes(),
        )
        .await
        .unwrap();
        // One header byte every 250 ms, never the blank line that ends the headers.
        let closed_after = loop {
            if conn.write_all(b"X").await.is_err() {
                break started.elapsed();
            }
            let mut buf = [0u8; 512];
            match tokio::time::timeout(Duration::from_millis(250), conn.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => break started.elapsed(),
                Ok(Ok(n)) => {
                    // An error answer (408) before closing is fine too.
                    let text = String::from_utf8_lossy(&buf[..n]).to_string();
                    assert!(
                        !text.starts_with("HTTP/1.1 2"),
                        "answered a request it never completed: {text}"
                    );
                }
                Err(_) => {}
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the slow connection is still open after 10s"
            );
        };
        eprintln!("the slow connection was closed after {closed_after:?}");
        assert!(
            closed_after >= Duration::from_millis(1_500),
            "closed too early: {closed_after:?}"
        );
        assert!(metric(&op, "disruption_guard_api_header_read_timeouts_total").await >= 1.0);
        // A connection that sends nothing at all is closed as well.
        let mut silent = TcpStream::connect(api_addr(&op)).await.unwrap();
        let mut buf = [0u8; 64];
        let read = tokio::time::timeout(Duration::from_secs(10), silent.read(&mut buf)).await;
        assert!(
            matches!(read, Ok(Ok(0)) | Ok(Err(_))),
            "a silent connection stayed open: {read:?}"
        );
    })
    .await;
}

#[tokio::test]
async fn a_body_that_arrives_too_slowly_is_a_408_and_its_connection_is_closed() {
    with_namespace(|_client, ns| async move {
        let op = Operator::start(&ns, &["--body-read-timeout=2s"]).await;
        let mut conn = TcpStream::connect(api_addr(&op)).await.unwrap();
        let started = Instant::now();
        conn.write_all(
            format!(
                "POST /v1/namespaces/{ns}/windows HTTP/1.1\r\nHost: x\r\n\
                 Content-Type: application/json\r\nContent-Length: 65536\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
        // One body byte every 250 ms: the headers are complete, the body never is.
        let mut answer = String::new();
        let closed_after = loop {
            if conn.write_all(b" ").await.is_err() {
                break started.elapsed();
            }
            let mut buf = [0u8; 2048];
            match tokio::time::timeout(Duration::from_millis(250), conn.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => break started.elapsed(),
                Ok(Ok(n)) => answer.push_str(&String::from_utf8_lossy(&buf[..n])),
                Err(_) => {}
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the slow body's connection is still open after 10s"
            );
        };
        eprintln!("the slow body was answered and closed after {closed_after:?}: {answer}");
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("--body-read-timeout"), "{answer}");
        assert!(
            closed_after >= Duration::from_millis(1_500),
            "closed too early: {closed_after:?}"
        );
    })
    .await;
}

/// A TCP connection to `addr` from the loopback address `from` (all of 127.0.0.0/8 is local).
async fn connect_from(from: [u8; 4], addr: &str) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(std::net::SocketAddr::from((from, 0))).unwrap();
    socket.connect(addr.parse().unwrap()).await.unwrap()
}

/// What the server sends on `conn` until it closes it (at most 10 s).
async fn read_to_close(conn: &mut TcpStream) -> String {
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), conn.read_to_end(&mut answer))
        .await
        .expect("the server closes the connection")
        .expect("reading the answer");
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test]
async fn one_address_holds_at_most_its_share_of_connections_while_others_get_in() {
    with_namespace(|_client, ns| async move {
        let op = Operator::start(
            &ns,
            &[
                "--max-connections-per-address=20",
                "--header-read-timeout=60s",
            ],
        )
        .await;
        let addr = api_addr(&op);
        let greedy = [127, 0, 0, 2];
        let mut held = Vec::new();
        for _ in 0..20 {
            held.push(connect_from(greedy, &addr).await);
        }
        wait::until_ok(
            "the operator to hold the greedy address's 20 connections",
            Duration::from_secs(10),
            || async {
                match metric(&op, "disruption_guard_api_connections").await {
                    20.0 => Ok(()),
                    n => Err(format!("it holds {n}")),
                }
            },
        )
        .await;

        // The 21st from that address is answered 429 at once and closed.
        let mut over = connect_from(greedy, &addr).await;
        let answer = read_to_close(&mut over).await;
        eprintln!("the connection over the share: {answer}");
        assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
        assert!(answer.contains("application/problem+json"), "{answer}");
        assert!(answer.contains("--max-connections-per-address"), "{answer}");
        assert_eq!(
            metric(
                &op,
                "disruption_guard_api_connections_refused_per_address_total"
            )
            .await,
            1.0
        );

        // Another address is served as ever.
        assert_eq!(
            list_within(&op, &ns, Duration::from_secs(5)).await,
            StatusCode::OK
        );

        // A connection the greedy address closes frees its place.
        drop(held.pop());
        let request = format!(
            "GET /v1/namespaces/{ns}/windows HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        );
        let status = wait::for_some("a freed place to be taken", Duration::from_secs(10), || {
            let (addr, request) = (addr.clone(), request.clone());
            async move {
                let mut conn = connect_from(greedy, &addr).await;
                conn.write_all(request.as_bytes()).await.ok()?;
                let answer = read_to_close(&mut conn).await;
                (!answer.starts_with("HTTP/1.1 429")).then_some(answer)
            }
        })
        .await;
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
        drop(held);
    })
    .await;
}

#[tokio::test]
async fn waits_over_the_cap_of_one_identity_are_429_while_another_identity_still_waits() {
    with_namespace(|client, ns| async move {
        raise_open_files();
        // Another replica holds the Lease: windows stay Pending, so every wait lasts its timeout.
        let lease: Lease = serde_json::from_value(json!({
            "metadata": {"name": "disruption-guard"},
            "spec": {
                "holderIdentity": "another-replica",
                "leaseDurationSeconds": 3600,
                "renewTime": jiff::Timestamp::now().to_string(),
            },
        }))
        .unwrap();
        Api::<Lease>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &lease)
            .await
            .unwrap();
        let tokens = std::env::temp_dir().join(format!("{ns}-wait-tokens.yaml"));
        std::fs::write(
            &tokens,
            format!(
                "tokens:\n  - {{name: job-a, token: wait-token-aaaaaaaaaa, namespaces: [{ns}]}}\n  \
                 - {{name: job-b, token: wait-token-bbbbbbbbbb, namespaces: [{ns}]}}\n"
            ),
        )
        .unwrap();
        let op = Operator::start_with(
            &ns,
            vec![
                format!("--namespaces={ns}"),
                format!("--static-tokens-file={}", tokens.display()),
                "--rate-limit=0".into(),
                "--leader-election".into(),
                format!("--leader-election-namespace={ns}"),
                "--leader-election-identity=this-replica".into(),
                "--max-waits-per-identity=50".into(),
            ],
        )
        .await;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(120))
            .build()
            .unwrap();
        let url = windows_url(&op, &ns);
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut a_waits = tokio::task::JoinSet::new();
        for i in 0..500 {
            let (http, url, tx) = (http.clone(), url.clone(), tx.clone());
            a_waits.spawn(async move {
                let resp = http
                    .post(format!("{url}?wait=true&timeout=90s"))
                    .bearer_auth("wait-token-aaaaaaaaaa")
                    .json(&json!({"name": format!("a-{i}")}))
                    .send()
                    .await
                    .unwrap();
                let status = resp.status();
                let retry_after = resp.headers().get("retry-after").cloned();
                let content_type = resp.headers().get("content-type").cloned();
                let body: Value = resp.json().await.unwrap_or_default();
                let _ = tx.send((status, retry_after, content_type, body));
            });
        }
        // The 450 over the cap are refused at once; the 50 others wait.
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut refused = 0;
        while refused < 450 {
            let left = deadline.saturating_duration_since(Instant::now());
            let (status, retry_after, content_type, body) = tokio::time::timeout(left, rx.recv())
                .await
                .unwrap_or_else(|_| panic!("only {refused} of 450 waits refused in time"))
                .unwrap();
            assert_eq!(
                status,
                StatusCode::TOO_MANY_REQUESTS,
                "a wait within the cap ended early: {body}"
            );
            assert!(retry_after.is_some(), "a 429 without Retry-After: {body}");
            assert!(
                content_type
                    .is_some_and(|c| c.to_str().unwrap().starts_with("application/problem+json")),
                "{body}"
            );
            let detail = body["detail"].as_str().unwrap_or_default();
            assert!(
                detail.contains("--max-waits-per-identity=50") && detail.contains("static:job-a"),
                "{body}"
            );
            refused += 1;
        }
        // A refused wait applied nothing: only the 50 waiting opens made windows (the last
        // of them may still be on their way to the API server).
        let windows =
            Api::<disruption_guard::resources::TestWindow>::namespaced(client.clone(), &ns);
        wait::until_ok(
            "the 50 waiting opens' windows",
            Duration::from_secs(30),
            || async {
                let n = windows.list(&Default::default()).await.unwrap().items.len();
                if n == 50 {
                    Ok(())
                } else {
                    Err(format!("{n} windows"))
                }
            },
        )
        .await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            windows.list(&Default::default()).await.unwrap().items.len(),
            50
        );
        assert!(
            rx.try_recv().is_err(),
            "a wait within the cap ended while it should wait"
        );
        // Meanwhile another identity still gets its waits: they run to their timeout (504).
        let b_waits = (0..10).map(|i| {
            http.post(format!("{url}?wait=true&timeout=2s"))
                .bearer_auth("wait-token-bbbbbbbbbb")
                .json(&json!({"name": format!("b-{i}")}))
                .send()
        });
        for resp in futures::future::join_all(b_waits).await {
            let resp = resp.unwrap();
            assert_eq!(
                resp.status(),
                StatusCode::GATEWAY_TIMEOUT,
                "{:?}",
                resp.text().await
            );
        }
        assert!(
            rx.try_recv().is_err(),
            "identity a's waits are still in progress"
        );
        let refused_metric = metric(&op, "disruption_guard_api_waits_refused_total").await;
        assert_eq!(refused_metric, 450.0);
        a_waits.abort_all();
        let _ = std::fs::remove_file(&tokens);
    })
    .await;
}

// Needs the window controller: windows over no pods are Ready within milliseconds, so every
// wait ends quickly.
#[tokio::test]
async fn legs_of_a_burst_past_the_wait_cap_come_back_after_a_second_when_waits_end_quickly() {
    with_namespace(|_client, ns| async move {
        let op = Operator::start(&ns, &["--rate-limit=0", "--max-waits-per-identity=5"]).await;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        let url = windows_url(&op, &ns);
        // 20 legs of one CI matrix (one identity: no authentication here) open at once, each
        // coming back after the Retry-After it is told, as the CLI and the Action do.
        let started = Instant::now();
        let legs = (0..20).map(|i| {
            let (http, url) = (http.clone(), url.clone());
            async move {
                let mut told = Vec::new();
                loop {
                    let resp = http
                        .post(format!("{url}?wait=true&timeout=30s"))
                        .json(&json!({"name": format!("leg-{i}"), "idempotencyKey": format!("leg-{i}")}))
                        .send()
                        .await
                        .unwrap();
                    if resp.status() != StatusCode::TOO_MANY_REQUESTS {
                        let status = resp.status();
                        let body: Value = resp.json().await.unwrap();
                        return (status, body, told, started.elapsed());
                    }
                    let retry_after = resp.headers()["retry-after"].to_str().unwrap().to_string();
                    let seconds: u64 = retry_after.parse().unwrap();
                    told.push(retry_after);
                    tokio::time::sleep(Duration::from_secs(seconds)).await;
                }
            }
        });
        let legs = futures::future::join_all(legs).await;
        let took = started.elapsed();
        let mut refused = 0;
        for (status, body, told, _) in &legs {
            assert_eq!(*status, StatusCode::CREATED, "{body}");
            assert_eq!(body["ready"], true, "{body}");
            assert!(told.iter().all(|t| t == "1"), "told {told:?}");
            refused += told.len();
        }
        let last_refused = legs
            .iter()
            .filter(|(_, _, told, _)| !told.is_empty())
            .map(|(_, _, _, done)| *done)
            .max();
        eprintln!(
            "20 legs, cap 5: {refused} refusals, each Retry-After: 1; every leg Ready after {took:?} \
             (the last refused leg at {last_refused:?})"
        );
        assert!(refused > 0, "the burst was over the cap");
        assert_eq!(
            metric(&op, "disruption_guard_api_waits_refused_total").await,
            refused as f64
        );
        assert!(
            took < Duration::from_secs(5),
            "the refused legs came back after about a second, not 5 s: {took:?}"
        );
    })
    .await;
}
