//! The eviction webhook failing open, against the real API server, beyond a dead operator
//! (`tests/intercept.rs` kills it): an operator that accepts connections but never answers
//! (its process stopped with SIGSTOP) costs an eviction at most the webhook's `timeoutSeconds`,
//! and a webhook serving an expired certificate is failed by the API server's TLS check and
//! let through at once — while `disruption_guard_intercept_registered` and the certificate's
//! expiry gauge say so, and `drain_pods_evicted_total` counts the eviction no review saw.
//!
//! The API server's own view is read from its metrics
//! (`apiserver_admission_webhook_fail_open_count`) and log ("Failed calling webhook, failing
//! open"): proof that it called the webhook and failed, not that the registration was not in
//! effect yet.

mod support;

use std::time::{Duration, Instant};

use disruption_guard::intercept::certs::{self, Renewal};
use disruption_guard::intercept::health::not_after;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::PostParams;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;
use support::drain::{cordon, deploy_on, lone, metric};
use support::intercept::{DRY_RUN, evict, reviews, until_in_effect};
use support::operator::Operator;
use support::{create_ready_node, kubectl, wait, with_namespace};
use tokio::io::AsyncReadExt as _;

const LIMIT: Duration = Duration::from_secs(60);
/// The registration's `timeoutSeconds`.
const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(5);
const REGISTERED: &str = "disruption_guard_intercept_registered";
const EXPIRY: &str = "disruption_guard_intercept_certificate_expiration_timestamp_seconds";

/// Calls of webhooks named `evictions.disruption-guard.io` the API server failed open, by its
/// own metrics (every test's registration uses that webhook name: compare before and after).
fn api_server_fail_opens() -> f64 {
    let out = kubectl()
        .args(["get", "--raw", "/metrics"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("apiserver_admission_webhook_fail_open_count{"))
        .filter(|l| l.contains("name=\"evictions.disruption-guard.io\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The test cluster's kube-apiserver log (beside its kubeconfig, as `tests/cluster/up` runs it).
fn api_server_log() -> String {
    let dir = support::kubeconfig().parent().unwrap().to_path_buf();
    std::fs::read_to_string(dir.join("logs/kube-apiserver.log")).unwrap_or_default()
}

async fn gauge(op: &Operator, name: &str) -> Option<f64> {
    let text = op.metrics().await;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// A process stopped with SIGSTOP (its sockets stay open, the kernel still accepts
/// connections on them); SIGCONT when dropped, also when the test fails.
struct Stopped(u32);

impl Stopped {
    fn new(pid: u32) -> Stopped {
        signal(pid, "-STOP");
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        signal(self.0, "-CONT");
    }
}

fn signal(pid: u32, which: &str) {
    let ok = std::process::Command::new("kill")
        .args([which, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {which} {pid}");
}

#[tokio::test]
async fn with_the_operator_hung_an_eviction_goes_through_within_the_webhooks_timeout() {
    with_namespace(|client, ns| async move {
        let a = format!("{ns}-a");
        create_ready_node(&client, &ns, &a).await;
        let pod = deploy_on(&client, &ns, lone(&ns, "web"), &a).await;
        let name = pod.metadata.name.clone().unwrap();
        cordon(&a);
        let op = Operator::intercepting(&ns, &[]).await;
        until_in_effect(&client, &op, &ns, &name).await;
        wait::until("the webhook to be registered", LIMIT, || async {
            gauge(&op, REGISTERED).await == Some(1.0)
        })
        .await;
        // The operator's own certificate: 90 days.
        let expiry = gauge(&op, EXPIRY).await.expect("the expiry gauge");
        let left = expiry - jiff::Timestamp::now().as_second() as f64;
        assert!(
            (89.0 * 86400.0..=90.0 * 86400.0).contains(&left),
            "{left} s left"
        );
        let reviewed = reviews(&op).await;
        let fail_opens = api_server_fail_opens();

        let stopped = Stopped::new(op.pid().unwrap());
        // Hung, not gone: the connection is accepted, nothing ever comes back.
        let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", op.intercept_port()))
            .await
            .expect("the kernel accepts connections for the stopped process");
        let mut buf = [0u8; 1];
        let answer = tokio::time::timeout(Duration::from_secs(1), conn.read(&mut buf)).await;
        assert!(answer.is_err(), "the stopped webhook answered: {answer:?}");

        let started = Instant::now();
        let (code, message) = evict(&client, &ns, &name, None).await;
        let took = started.elapsed();
        println!(
            "eviction with the webhook hung (SIGSTOP): {code} in {:.0} ms (timeoutSeconds 5)",
            took.as_secs_f64() * 1000.0
        );
        assert_eq!(code, 201, "let through, as without the guard: {message}");
        // The API server waited for the hung webhook (a refused connection fails at once) ...
        assert!(
            took >= WEBHOOK_TIMEOUT - Duration::from_millis(500),
            "{took:?}"
        );
        // ... and no longer than the registration's timeoutSeconds.
        assert!(took < WEBHOOK_TIMEOUT + Duration::from_secs(2), "{took:?}");
        assert!(
            api_server_fail_opens() > fail_opens,
            "the API server counts the call it failed open"
        );
        drop(stopped);
        drop(conn);
        // Resumed, it is registered and answers again.
        wait::until("the resumed operator to be registered", LIMIT, || async {
            gauge(&op, REGISTERED).await == Some(1.0)
        })
        .await;
        let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), &ns);
        wait::until("the resumed webhook to review again", LIMIT, || async {
            let _ = pods.evict(&name, &DRY_RUN).await;
            reviews(&op).await > reviewed
        })
        .await;
    })
    .await;
}

#[tokio::test]
async fn with_an_expired_certificate_the_api_server_fails_the_call_and_the_eviction_goes_through() {
    with_namespace(|client, ns| async move {
        let (a, b) = (format!("{ns}-a"), format!("{ns}-b"));
        create_ready_node(&client, &ns, &a).await;
        let web = deploy_on(&client, &ns, lone(&ns, "web"), &a).await;
        let web = web.metadata.name.clone().unwrap();
        let other = deploy_on(&client, &ns, lone(&ns, "other").starts_in("1s"), &a).await;
        let other = other.metadata.name.clone().unwrap();
        create_ready_node(&client, &ns, &b).await;

        // A certificate issued 100 days ago (valid 90) by a CA that is still valid, in the
        // Secret a certificate keeper (cert-manager) fills: the operator serves it as it is.
        let fullname = support::chart_identity::fullname(&ns);
        let secret_name = format!("{fullname}-webhook-tls");
        let sans = certs::sans(&fullname, &ns);
        let issued = jiff::Timestamp::now() - jiff::SignedDuration::from_hours(100 * 24);
        let expired = certs::issue(None, Renewal::All, &sans, issued).unwrap();
        let expired_at =
            not_after(&CertificateDer::from_pem_slice(expired.cert.as_bytes()).unwrap()).unwrap();
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
        secrets
            .create(
                &PostParams::default(),
                &certs::secret(&ns, &secret_name, &expired),
            )
            .await
            .unwrap();
        cordon(&a);
        let mut op = Operator::intercepting(&ns, &["--intercept-external-certificate"]).await;

        // The gauges say it: the expiry is in the past, the registration does not verify it.
        assert_eq!(gauge(&op, EXPIRY).await, Some(expired_at as f64));
        assert!(expired_at < jiff::Timestamp::now().as_second());
        wait::until("the registration to be read back", LIMIT, || async {
            op.log_text().contains("eviction webhook not registered")
        })
        .await;
        assert_eq!(gauge(&op, REGISTERED).await, Some(0.0));

        // Wait until the API server calls the webhook (and fails): dry runs leave the pod.
        let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), &ns);
        let fail_opens = api_server_fail_opens();
        wait::until(
            "the API server to call the webhook and fail open",
            LIMIT,
            || async {
                let _ = pods.evict(&web, &DRY_RUN).await;
                api_server_fail_opens() > fail_opens
            },
        )
        .await;
        assert!(
            api_server_log().contains("certificate has expired"),
            "the API server failed the call on the expired certificate"
        );

        let started = Instant::now();
        let (code, message) = evict(&client, &ns, &web, None).await;
        let took = started.elapsed();
        println!(
            "eviction with an expired webhook certificate: {code} in {:.0} ms",
            took.as_secs_f64() * 1000.0
        );
        assert_eq!(code, 201, "let through, as without the guard: {message}");
        assert!(took < WEBHOOK_TIMEOUT, "failed at the handshake: {took:?}");
        assert_eq!(reviews(&op).await, 0.0, "no review got through TLS");
        // The pod left a draining node through the Eviction API, unseen by the webhook.
        wait::until("the evicted pod to be counted", LIMIT, || async {
            metric(
                &op.metrics().await,
                "disruption_guard_drain_pods_evicted_total",
            ) >= 1.0
        })
        .await;

        // The same set-up with a valid certificate holds the eviction: what made the
        // difference was the certificate.
        let fresh = certs::issue(None, Renewal::All, &sans, jiff::Timestamp::now()).unwrap();
        let mut replacement = certs::secret(&ns, &secret_name, &fresh);
        replacement.metadata.resource_version = secrets
            .get(&secret_name)
            .await
            .unwrap()
            .metadata
            .resource_version;
        secrets
            .replace(&secret_name, &PostParams::default(), &replacement)
            .await
            .unwrap();
        op.restart().await;
        wait::until("the webhook to be registered", LIMIT, || async {
            gauge(&op, REGISTERED).await == Some(1.0)
        })
        .await;
        until_in_effect(&client, &op, &ns, &other).await;
        let (code, message) = evict(&client, &ns, &other, None).await;
        assert_eq!(code, 429, "held with a valid certificate: {message}");
    })
    .await;
}
