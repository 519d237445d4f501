//! The eviction webhook's certificate, HTTPS server and registration against the real API
//! server: it calls the webhook over TLS trusting the CA the operator manages, a 429 from the
//! webhook reaches the evicting client as `TooManyRequests` (policy/v1 and policy/v1beta1
//! Evictions alike), and after the serving certificate and then the CA are renewed in the
//! Secret, the running server serves the new certificate and the API server still reaches it,
//! without a restart. Trusting another CA, the API server cannot reach it and fails open.
//!
//! The webhook here is a stand-in that denies evictions of the pod named `guarded` with 429
//! and allows the rest, recording each review. It is registered by loopback URL (the test
//! cluster's API server runs on this host), for the test's namespace only.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::State;
use axum::routing::post;
use disruption_guard::intercept::certs::{self, CertSecret, Renewal};
use disruption_guard::intercept::registration::{self, Endpoint, Registration, Upkeep};
use disruption_guard::intercept::tls;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{EvictParams, PostParams};
use kube::{Api, Client};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;
use serde_json::{Value, json};
use support::{wait, with_namespace};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

const LIMIT: Duration = Duration::from_secs(10);
const GUARDED: &str = "guarded";

/// What the stand-in webhook saw: (pod name, dry run) per review.
type Seen = Arc<Mutex<Vec<(String, bool)>>>;

/// Denies evictions of [`GUARDED`] with 429 `TooManyRequests`, allows the rest.
async fn review(State(seen): State<Seen>, Json(review): Json<Value>) -> Json<Value> {
    let request = &review["request"];
    let pod = request["name"].as_str().unwrap_or_default().to_string();
    let dry_run = request["dryRun"].as_bool().unwrap_or(false);
    seen.lock().unwrap().push((pod.clone(), dry_run));
    let response = if pod == GUARDED {
        json!({
            "uid": request["uid"],
            "allowed": false,
            "status": {"code": 429, "reason": "TooManyRequests", "message": "guarded by the test"}
        })
    } else {
        json!({"uid": request["uid"], "allowed": true})
    };
    Json(json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": response
    }))
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}
    }))
    .unwrap()
}

/// A dry-run eviction through policy/v1: `Ok` when allowed, the API error otherwise.
async fn evict_dry_run(pods: &Api<Pod>, name: &str) -> Result<(), kube::core::Status> {
    let params = EvictParams {
        post_options: PostParams {
            dry_run: true,
            ..PostParams::default()
        },
        ..EvictParams::default()
    };
    match pods.evict(name, &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) => Err(*status),
        Err(other) => panic!("evicting {name}: {other}"),
    }
}

/// A dry-run eviction through policy/v1beta1, as Cluster Autoscaler sends it.
async fn evict_v1beta1_dry_run(client: &Client, ns: &str, name: &str) -> Result<(), u16> {
    let body = json!({
        "apiVersion": "policy/v1beta1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": ns}
    });
    let request = http::Request::post(format!(
        "/api/v1/namespaces/{ns}/pods/{name}/eviction?dryRun=All"
    ))
    .header("content-type", "application/json")
    .body(serde_json::to_vec(&body).unwrap())
    .unwrap();
    match client.request::<Value>(request).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) => Err(status.code),
        Err(other) => panic!("evicting {name} through policy/v1beta1: {other}"),
    }
}

/// Waits until a dry-run eviction of [`GUARDED`] is refused by the webhook, returns the
/// refusal and how many evictions went through meanwhile (the webhook failing open while the
/// API server catches up with a change).
async fn until_guarded(pods: &Api<Pod>, what: &str) -> (kube::core::Status, usize) {
    let deadline = Instant::now() + LIMIT;
    let mut let_through = 0;
    loop {
        match evict_dry_run(pods, GUARDED).await {
            Err(status) => return (status, let_through),
            Ok(()) => let_through += 1,
        }
        assert!(
            Instant::now() < deadline,
            "{what}: the API server did not reach the webhook within {LIMIT:?} \
             ({let_through} evictions let through by failurePolicy Ignore)"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn served(resolver: &tls::CertResolver) -> CertificateDer<'static> {
    resolver
        .current()
        .end_entity_cert()
        .unwrap()
        .clone()
        .into_owned()
}

fn der(pem: &str) -> CertificateDer<'static> {
    CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()
}

fn reviews_of(seen: &Seen, pod: &str) -> usize {
    seen.lock()
        .unwrap()
        .iter()
        .filter(|(p, _)| p == pod)
        .count()
}

#[tokio::test]
async fn the_api_server_calls_the_webhook_over_tls_with_the_managed_ca_across_renewals() {
    with_namespace(|client, ns| async move {
        let started = Instant::now();
        let secret = CertSecret::for_service(&ns, certs::SECRET_NAME, "disruption-guard");
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut registration = Registration {
            name: format!("disruption-guard-test-{ns}"),
            endpoint: Endpoint::Loopback { port },
            timeout_seconds: 5,
            own_username: Some("system:serviceaccount:elsewhere:someone-else".into()),
            namespaces: vec![ns.clone()],
            namespace_selector: Default::default(),
        };
        // Created as the chart creates it, without a CA: the operator publishes only that.
        support::operator::create_registration(&ns, &registration.name, Some(&ns), port).await;
        let upkeep = Upkeep::CaBundle {
            name: registration.name.clone(),
        };
        let (resolver, bundle) = tls::load(&client, &secret, Some(&upkeep)).await.unwrap();
        let seen = Seen::default();
        let router = axum::Router::new()
            .route(registration::PATH, post(review))
            .with_state(seen.clone());
        let shutdown = CancellationToken::new();
        let limits = disruption_guard::runtime::limited_server::ConnectionLimits {
            max_connections: 100,
            per_address: 100,
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Some(Duration::from_secs(60)),
        };
        tokio::spawn(tls::serve_on(
            listener,
            router,
            resolver.clone(),
            limits,
            std::sync::Arc::new(disruption_guard::intercept::InterceptMetrics::default()),
            shutdown.clone(),
        ));
        let refresher = CancellationToken::new();
        tokio::spawn(tls::keep_current(
            client.clone(),
            secret.clone(),
            Some(upkeep.clone()),
            resolver.clone(),
            bundle.clone(),
            Duration::from_millis(300),
            refresher.clone(),
        ));

        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        for name in [GUARDED, "free"] {
            pods.create(&PostParams::default(), &pod(name))
                .await
                .unwrap();
        }

        // The guarded pod's eviction is refused exactly as a PDB refuses one.
        let (status, let_through) = until_guarded(&pods, "first registration").await;
        eprintln!(
            "after {:?}: refused {} {} {:?} ({let_through} let through while the API server \
             picked the registration up)",
            started.elapsed(),
            status.code,
            status.reason,
            status.message
        );
        assert_eq!(status.code, 429);
        assert_eq!(status.reason, "TooManyRequests");
        assert!(
            status.message.starts_with(
                "admission webhook \"evictions.disruption-guard.io\" denied the request"
            ),
            "{}",
            status.message
        );
        assert!(
            seen.lock()
                .unwrap()
                .iter()
                .any(|(pod, dry_run)| pod == GUARDED && *dry_run),
            "the webhook saw the dry run as one"
        );
        assert_eq!(
            evict_v1beta1_dry_run(&client, &ns, GUARDED).await,
            Err(429),
            "a policy/v1beta1 Eviction is sent to the webhook too"
        );

        // Another pod's eviction (a real one) is reviewed and allowed.
        pods.evict("free", &EvictParams::default()).await.unwrap();
        assert_eq!(reviews_of(&seen, "free"), 1);

        // A new serving certificate from the same CA: served without a restart.
        let renewed = certs::renew(&client, &secret, Renewal::Serving)
            .await
            .unwrap();
        assert_eq!(renewed.ca_bundle, bundle.ca_bundle);
        wait::until(
            "the new serving certificate to be served",
            LIMIT,
            || async { served(&resolver) == der(&renewed.cert) },
        )
        .await;
        let before = reviews_of(&seen, GUARDED);
        let (status, let_through) = until_guarded(&pods, "serving renewal").await;
        assert_eq!(status.code, 429);
        assert!(reviews_of(&seen, GUARDED) > before);
        eprintln!(
            "after {:?}: serving certificate renewed, still refused {} ({let_through} let through)",
            started.elapsed(),
            status.code
        );

        // A new CA: the registration publishes it (the old one stays in the bundle) before the
        // server presents a certificate signed by it.
        let renewed = certs::renew(&client, &secret, Renewal::All).await.unwrap();
        assert_ne!(renewed.ca_bundle, bundle.ca_bundle);
        assert!(renewed.ca_bundle.ends_with(&bundle.ca_bundle));
        wait::until(
            "the certificate from the new CA to be served",
            LIMIT,
            || async { served(&resolver) == der(&renewed.cert) },
        )
        .await;
        let configs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
        let config = configs.get(&registration.name).await.unwrap();
        let ca_bundle = config.webhooks.unwrap()[0]
            .client_config
            .ca_bundle
            .clone()
            .unwrap();
        assert_eq!(ca_bundle.0, renewed.ca_bundle.as_bytes());
        let (status, let_through) = until_guarded(&pods, "CA renewal").await;
        assert_eq!(status.code, 429);
        eprintln!(
            "after {:?}: CA renewed, still refused {} ({let_through} let through)",
            started.elapsed(),
            status.code
        );

        // The API server really checks the certificate: trusting another CA, it cannot reach
        // the webhook and lets the eviction through (failurePolicy Ignore).
        refresher.cancel();
        let stranger =
            certs::issue(None, Renewal::All, &secret.sans, jiff::Timestamp::now()).unwrap();
        upkeep.publish(&client, &stranger.ca_bundle).await.unwrap();
        wait::until("the eviction to fail open", LIMIT, || async {
            evict_dry_run(&pods, GUARDED).await.is_ok()
        })
        .await;
        let before = reviews_of(&seen, GUARDED);
        evict_dry_run(&pods, GUARDED).await.unwrap();
        assert_eq!(reviews_of(&seen, GUARDED), before, "not reached");
        eprintln!(
            "after {:?}: trusting another CA, the API server let the eviction through",
            started.elapsed()
        );

        // The operator's own evictions are not sent: exempt the test's own user.
        registration.own_username = registration::own_username(&client).await.unwrap();
        eprintln!("own user name: {:?}", registration.own_username);
        registration::apply(&client, &registration, &renewed.ca_bundle)
            .await
            .unwrap();
        wait::until("the exemption to take effect", LIMIT, || async {
            evict_dry_run(&pods, GUARDED).await.is_ok()
        })
        .await;
        let before = reviews_of(&seen, GUARDED);
        evict_dry_run(&pods, GUARDED).await.unwrap();
        assert_eq!(
            reviews_of(&seen, GUARDED),
            before,
            "the exempt user's eviction is not sent"
        );

        shutdown.cancel();
        registration::remove(&client, &registration.name)
            .await
            .unwrap();
        assert!(
            configs.get_opt(&registration.name).await.unwrap().is_none(),
            "removed"
        );
        eprintln!("done after {:?}", started.elapsed());
    })
    .await;
}

#[tokio::test]
async fn replicas_starting_together_agree_on_one_certificate() {
    with_namespace(|client, ns| async move {
        let secret = CertSecret::for_service(&ns, certs::SECRET_NAME, "disruption-guard");
        let replicas = (0..4).map(|_| {
            let (client, secret) = (client.clone(), secret.clone());
            tokio::spawn(async move { certs::ensure(&client, &secret).await.unwrap() })
        });
        let bundles: Vec<_> = futures::future::join_all(replicas)
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
        assert!(
            bundles.iter().all(|b| *b == bundles[0]),
            "every replica got the stored bundle"
        );
        let stored = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), &ns)
            .get(certs::SECRET_NAME)
            .await
            .unwrap();
        assert_eq!(certs::from_secret(&stored).as_ref(), Some(&bundles[0]));
        assert_eq!(stored.type_.as_deref(), Some("kubernetes.io/tls"));

        // A later start reads it as it is: nothing is renewed.
        let again = certs::ensure(&client, &secret).await.unwrap();
        assert_eq!(again, bundles[0]);
    })
    .await;
}
