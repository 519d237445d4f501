//! Tests of [`super::assess`] and the gauges: what makes the API server call the webhook.

use super::*;
use crate::intercept::certs::{Bundle, Renewal, issue, sans};
use crate::intercept::registration::{Registration, build};
use crate::intercept::tls::certified_key;

const DAY: i64 = 24 * 3600;

fn service() -> Endpoint {
    Endpoint::Service {
        namespace: "guard".into(),
        name: "disruption-guard".into(),
        port: 443,
    }
}

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(seconds).unwrap()
}

/// Issued at `issued` (serving certificate valid 90 days from then) for the Service above.
fn bundle(issued: Timestamp) -> Bundle {
    issue(
        None,
        Renewal::All,
        &sans("disruption-guard", "guard"),
        issued,
    )
    .unwrap()
}

fn served(bundle: &Bundle) -> Vec<CertificateDer<'static>> {
    certified_key(bundle).unwrap().cert
}

fn registered_for(endpoint: Endpoint, ca_bundle: &str) -> Seen {
    let registration = Registration::new(endpoint, None, Vec::new());
    Seen::Read(Some(Box::new(build(&registration, ca_bundle))))
}

#[test]
fn a_registration_for_this_service_trusting_the_served_certificate_is_registered() {
    let now = Timestamp::now();
    let b = bundle(now);
    let seen = registered_for(service(), &b.ca_bundle);
    assert_eq!(
        assess(&seen, &service(), &served(&b), now),
        Verdict::Registered
    );
}

#[test]
fn outside_a_cluster_the_loopback_url_is_checked_for_127_0_0_1() {
    let now = Timestamp::now();
    let b = bundle(now);
    let loopback = Endpoint::Loopback { port: 9443 };
    let seen = registered_for(loopback.clone(), &b.ca_bundle);
    assert_eq!(
        assess(&seen, &loopback, &served(&b), now),
        Verdict::Registered
    );
    // Another port: the API server calls another process.
    assert_eq!(
        assess(&seen, &Endpoint::Loopback { port: 9444 }, &served(&b), now),
        Verdict::OtherEndpoint
    );
}

#[test]
fn an_expired_serving_certificate_is_not_registered_from_the_second_it_expires() {
    let issued = at(1_800_000_000);
    let b = bundle(issued);
    let expiry = not_after(&served(&b)[0]).unwrap();
    assert_eq!(expiry, issued.as_second() + 90 * DAY);
    let seen = registered_for(service(), &b.ca_bundle);
    assert_eq!(
        assess(&seen, &service(), &served(&b), at(expiry - 1)),
        Verdict::Registered
    );
    assert_eq!(
        assess(&seen, &service(), &served(&b), at(expiry + 1)),
        Verdict::Untrusted
    );
}

#[test]
fn a_ca_bundle_of_another_ca_or_none_is_untrusted() {
    let now = Timestamp::now();
    let (b, other) = (bundle(now), bundle(now));
    let seen = registered_for(service(), &other.ca_bundle);
    assert_eq!(
        assess(&seen, &service(), &served(&b), now),
        Verdict::Untrusted
    );
    let empty = registered_for(service(), "");
    assert_eq!(
        assess(&empty, &service(), &served(&b), now),
        Verdict::Untrusted
    );
}

#[test]
fn a_certificate_without_the_name_the_api_server_dials_is_untrusted() {
    let now = Timestamp::now();
    // Issued for the Service `other`: the API server dials `disruption-guard.guard.svc`.
    let b = issue(None, Renewal::All, &sans("other", "guard"), now).unwrap();
    let seen = registered_for(service(), &b.ca_bundle);
    assert_eq!(
        assess(&seen, &service(), &served(&b), now),
        Verdict::Untrusted
    );
}

#[test]
fn a_registration_sending_evictions_to_another_service_port_or_path_is_another_endpoint() {
    let now = Timestamp::now();
    let b = bundle(now);
    for elsewhere in [
        Endpoint::Service {
            namespace: "guard".into(),
            name: "someone-else".into(),
            port: 443,
        },
        Endpoint::Service {
            namespace: "guard".into(),
            name: "disruption-guard".into(),
            port: 8443,
        },
        Endpoint::Loopback { port: 9443 },
    ] {
        let seen = registered_for(elsewhere.clone(), &b.ca_bundle);
        assert_eq!(
            assess(&seen, &service(), &served(&b), now),
            Verdict::OtherEndpoint,
            "{elsewhere:?}"
        );
    }
    let mut config = build(
        &Registration::new(service(), None, Vec::new()),
        &b.ca_bundle,
    );
    config.webhooks.as_mut().unwrap()[0]
        .client_config
        .service
        .as_mut()
        .unwrap()
        .path = Some("/other".into());
    assert_eq!(
        assess(
            &Seen::Read(Some(Box::new(config))),
            &service(),
            &served(&b),
            now
        ),
        Verdict::OtherEndpoint
    );
}

#[test]
fn a_missing_configuration_webhook_or_rule_is_not_registered() {
    let now = Timestamp::now();
    let b = bundle(now);
    let chain = served(&b);
    assert_eq!(
        assess(&Seen::Read(None), &service(), &chain, now),
        Verdict::Missing
    );
    assert_eq!(
        assess(&Seen::NotYet, &service(), &chain, now),
        Verdict::NotReadYet
    );
    assert_eq!(
        assess(&Seen::Unreadable, &service(), &chain, now),
        Verdict::Unreadable
    );
    let config = build(
        &Registration::new(service(), None, Vec::new()),
        &b.ca_bundle,
    );

    let mut renamed = config.clone();
    renamed.webhooks.as_mut().unwrap()[0].name = "other.example.com".into();
    assert_eq!(
        assess(
            &Seen::Read(Some(Box::new(renamed))),
            &service(),
            &chain,
            now
        ),
        Verdict::NoWebhook
    );

    let mut pods_only = config;
    pods_only.webhooks.as_mut().unwrap()[0]
        .rules
        .as_mut()
        .unwrap()[0]
        .resources = Some(vec!["pods".into()]);
    assert_eq!(
        assess(
            &Seen::Read(Some(Box::new(pods_only))),
            &service(),
            &chain,
            now
        ),
        Verdict::NoEvictionRule
    );
}

fn encoded(health: &Arc<WebhookHealth>) -> String {
    crate::testing::encode_registered(|r| r.register_collector(Box::new(health.clone())))
}

#[test]
fn the_gauges_are_exported_only_with_the_interception_on_and_the_expiry_once_serving() {
    let health = Arc::new(WebhookHealth::default());
    assert!(!encoded(&health).contains("intercept_registered"));

    health.enable();
    let out = encoded(&health);
    assert!(
        out.contains("disruption_guard_intercept_registered 0\n"),
        "{out}"
    );
    assert!(!out.contains("expiration"), "{out}");

    let now = Timestamp::now();
    let b = bundle(now);
    health.attach(
        crate::intercept::tls::CertResolver::new(&b).unwrap(),
        service(),
        "disruption-guard".into(),
    );
    let out = encoded(&health);
    // The registration is not read yet.
    assert!(
        out.contains("disruption_guard_intercept_registered 0\n"),
        "{out}"
    );
    let expiry = now.as_second() + 90 * DAY;
    assert!(
        out.contains(&format!(
            "disruption_guard_intercept_certificate_expiration_timestamp_seconds {expiry}\n"
        )),
        "{out}"
    );

    *health.source.get().unwrap().seen.write().unwrap() = registered_for(service(), &b.ca_bundle);
    let out = encoded(&health);
    assert!(
        out.contains("disruption_guard_intercept_registered 1\n"),
        "{out}"
    );
}
