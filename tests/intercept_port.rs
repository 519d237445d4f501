//! The webhook port as anyone who reaches it sees it — a pod in the cluster, without a
//! NetworkPolicy in the way — against the real operator: a forged AdmissionReview posted
//! straight to it holds nothing and starts no rollout unless it names a pod exactly as the
//! cache shows it, and its connections are bounded (a share per address, closed before the TLS
//! handshake; an idle connection closed).
//!
//! Every forged review is answered before the next is sent, and a deny (the only verdict that
//! starts a rollout) is counted in `intercept_denied_total` before its answer leaves: a count
//! of 0 after the answers is the proof that nothing was started, with no waiting.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use support::drain::{cordon, deploy_on, lone, metric};
use support::intercept::{evict, until_in_effect};
use support::operator::Operator;
use support::{create_ready_node, with_namespace};

/// A TLS client of `op`'s webhook port, trusting the CA the operator keeps in its Secret.
struct Forger {
    port: u16,
    connector: TlsConnector,
}

impl Forger {
    async fn new(client: &kube::Client, ns: &str, op: &Operator) -> Forger {
        let name = format!("{}-webhook-tls", op.webhook().unwrap());
        let secret = Api::<Secret>::namespaced(client.clone(), ns)
            .get(&name)
            .await
            .unwrap();
        let ca = secret.data.unwrap()["ca.crt"].0.clone();
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&ca) {
            roots.add(cert.unwrap()).unwrap();
        }
        let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Forger {
            port: op.intercept_port(),
            connector: TlsConnector::from(Arc::new(config)),
        }
    }

    async fn connect(&self) -> TlsStream<TcpStream> {
        let tcp = TcpStream::connect(("127.0.0.1", self.port)).await.unwrap();
        self.connector
            .connect("localhost".try_into().unwrap(), tcp)
            .await
            .unwrap()
    }

    /// POSTs `review` to `/evictions` and returns the AdmissionReview's `response`.
    async fn post(&self, review: &Value) -> Value {
        let body = serde_json::to_vec(review).unwrap();
        let mut tls = self.connect().await;
        let head = format!(
            "POST /evictions HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        tls.write_all(head.as_bytes()).await.unwrap();
        tls.write_all(&body).await.unwrap();
        let mut answer = String::new();
        tls.read_to_string(&mut answer).await.ok();
        let (head, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        serde_json::from_str::<Value>(body).unwrap()["response"].clone()
    }
}

/// An AdmissionReview of an eviction of `pod` in `ns` as the API server sends it, with the
/// Eviction naming `object_name` and carrying `uid` as its precondition.
fn review(ns: &str, pod: &str, object_name: &str, uid: Option<&str>) -> Value {
    let mut eviction = json!({"apiVersion": "policy/v1", "kind": "Eviction",
        "metadata": {"name": object_name, "namespace": ns}});
    if let Some(uid) = uid {
        eviction["deleteOptions"] = json!({"preconditions": {"uid": uid}});
    }
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": format!("forged-{pod}-{object_name}"),
            "kind": {"group": "policy", "version": "v1", "kind": "Eviction"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "subResource": "eviction",
            "requestKind": {"group": "policy", "version": "v1", "kind": "Eviction"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "requestSubResource": "eviction",
            "name": pod, "namespace": ns, "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:karpenter"},
            "object": eviction,
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}
        }
    })
}

#[tokio::test]
async fn a_forged_review_posted_to_the_webhook_port_that_does_not_match_the_cache_starts_no_rollout()
 {
    with_namespace(|client, ns| async move {
        let a = format!("{ns}-a");
        create_ready_node(&client, &ns, &a).await;
        let pod = deploy_on(&client, &ns, lone(&ns, "web").starts_in("1s"), &a).await;
        let name = pod.metadata.name.clone().unwrap();
        let uid = pod.metadata.uid.clone().unwrap();
        create_ready_node(&client, &ns, &format!("{ns}-b")).await;
        cordon(&a);
        let op = Operator::intercepting(&ns, &[]).await;
        until_in_effect(&client, &op, &ns, &name).await;
        let forger = Forger::new(&client, &ns, &op).await;

        let forged = [
            (
                "another uid than the cached pod's",
                review(&ns, &name, &name, Some("not-its-uid")),
            ),
            (
                "a pod the cache does not have",
                review(&ns, "no-such-pod", "no-such-pod", None),
            ),
            (
                "an Eviction of another pod than the request's",
                review(&ns, &name, "decoy", None),
            ),
            ("an Eviction without its pod", {
                let mut r = review(&ns, &name, &name, None);
                r["request"]["object"] = Value::Null;
                r
            }),
        ];
        for (what, review) in &forged {
            let response = forger.post(review).await;
            assert_eq!(response["allowed"], true, "{what}: {response}");
            let metrics = op.metrics().await;
            assert_eq!(
                metric(&metrics, "disruption_guard_intercept_denied_total"),
                0.0,
                "{what}: nothing held, nothing started"
            );
        }
        let metrics = op.metrics().await;
        for reason in ["uid_mismatch", "pod_gone", "malformed"] {
            assert!(
                metric(
                    &metrics,
                    &format!("disruption_guard_intercept_allowed_total{{reason=\"{reason}\"}}")
                ) >= 1.0,
                "{reason}: {metrics}"
            );
        }
        // The pod itself is one a rollout saves: the real eviction through the API server is
        // held, and only it starts the rollout.
        let (code, message) = evict(&client, &ns, &name, Some(&uid)).await;
        assert_eq!(code, 429, "{message}");
        let metrics = op.metrics().await;
        assert_eq!(
            metric(&metrics, "disruption_guard_intercept_denied_total"),
            1.0
        );
    })
    .await;
}

#[tokio::test]
async fn the_webhook_port_closes_a_connection_over_its_addresss_share_and_an_idle_one() {
    with_namespace(|client, ns| async move {
        let op = Operator::intercepting(
            &ns,
            &[
                "--intercept-max-connections-per-address=2",
                "--intercept-idle-timeout=2s",
            ],
        )
        .await;
        let forger = Forger::new(&client, &ns, &op).await;
        // Two connections from this address (the API server's own, on loopback, may hold one
        // of the two: then the second is the one refused).
        let first = forger.connect().await;
        let mut refused = None;
        let mut held = vec![first];
        for _ in 0..2 {
            let mut tcp = TcpStream::connect(("127.0.0.1", op.intercept_port()))
                .await
                .unwrap();
            let mut hello = [0u8; 1];
            // A refused connection is closed before its TLS handshake: EOF at once, without
            // sending a byte. An accepted one waits for the ClientHello.
            match tokio::time::timeout(Duration::from_millis(500), tcp.read(&mut hello)).await {
                Ok(Ok(0)) | Ok(Err(_)) => {
                    refused = Some(tcp);
                    break;
                }
                _ => held.push(forger.connector_stream(tcp).await),
            }
        }
        assert!(
            refused.is_some(),
            "a third connection from one address is closed at once"
        );
        let metrics = op.metrics().await;
        assert!(
            metric(
                &metrics,
                "disruption_guard_intercept_connections_refused_per_address_total"
            ) >= 1.0,
            "{metrics}"
        );

        // A connection that completed its handshake and sends nothing is closed after the
        // idle timeout.
        let mut idle = held.pop().unwrap();
        drop(held);
        let started = Instant::now();
        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(20), idle.read_to_end(&mut rest))
            .await
            .expect("the idle connection is closed");
        println!(
            "idle connection closed after {:?} ({read:?})",
            started.elapsed()
        );
        let metrics = op.metrics().await;
        assert!(
            metric(
                &metrics,
                "disruption_guard_intercept_connections_timed_out_total{reason=\"idle\"}"
            ) + metric(
                &metrics,
                "disruption_guard_intercept_connections_timed_out_total{reason=\"header_read\"}"
            ) >= 1.0,
            "{metrics}"
        );
    })
    .await;
}

impl Forger {
    /// Finishes the TLS handshake on an open TCP connection.
    async fn connector_stream(&self, tcp: TcpStream) -> TlsStream<TcpStream> {
        self.connector
            .connect("localhost".try_into().unwrap(), tcp)
            .await
            .unwrap()
    }
}
