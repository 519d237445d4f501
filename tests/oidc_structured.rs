//! The cluster's own way to trust a CI issuer: the API server runs with a JWT authenticator for
//! the issuer (structured authentication configuration), so the operator's TokenReview accepts
//! the issuer's tokens like any Kubernetes credential and its SubjectAccessReview lets RBAC
//! decide, for the user the configuration maps the token to. The issuer is the real one of
//! `support::issuer`; the operator is the real binary, with its ordinary authentication.

mod support;

use std::time::Duration;

use kube::Api;
use serde_json::{Value, json};
use support::authn;
use support::operator::Operator;
use support::{wait, with_namespace};

const HOUR: Duration = Duration::from_secs(3600);

#[tokio::test]
async fn a_token_of_an_issuer_the_api_server_trusts_opens_a_window_where_rbac_grants_its_user() {
    let issuer = authn::trust_shared_issuer();
    with_namespace(|client, ns| async move {
        // The pipeline's identity at the issuer: ServiceAccount `<ns>/pipeline` there.
        let token = issuer.token(&ns, "pipeline", authn::AUDIENCE, HOUR);
        let other_audience = issuer.token(&ns, "pipeline", "another-service", HOUR);
        let user = authn::user_for(&ns, "pipeline");
        let op = Operator::start_with(&ns, vec![format!("--namespaces={ns}")]).await;
        let http = reqwest::Client::new();
        let url = format!("{}/v1/namespaces/{ns}/windows", op.api);
        let open = |token: String, name: &'static str| {
            let (http, url) = (http.clone(), url.clone());
            async move {
                let resp = http
                    .post(url)
                    .bearer_auth(token)
                    .json(&json!({"name": name, "ttl": "10m"}))
                    .send()
                    .await
                    .unwrap();
                let status = resp.status().as_u16();
                let body: Value = resp.json().await.unwrap_or(Value::Null);
                (status, body)
            }
        };

        // Authenticated (a 401 would mean TokenReview refused it), but RBAC grants nothing yet.
        let (status, body) = open(token.clone(), "before-rbac").await;
        assert_eq!(status, 403, "{body}");
        let detail = body["detail"].as_str().unwrap_or_default();
        assert!(
            detail.contains(&user),
            "the refusal names the mapped user: {body}"
        );

        // The token's audience is checked by the API server's JWT authenticator.
        let (status, body) = open(other_audience, "wrong-audience").await;
        assert_eq!(status, 401, "{body}");
        // An issuer the API server has no authenticator for: the same claims, refused.
        let untrusted = support::issuer::Issuer::start();
        let stranger = untrusted.token(&ns, "pipeline", authn::AUDIENCE, HOUR);
        let (status, body) = open(stranger, "untrusted-issuer").await;
        assert_eq!(status, 401, "{body}");

        authn::grant_windows(&client, &ns, &user).await;
        // RBAC reaches the authorizer through its informer: a moment after the binding exists.
        let body = wait::for_some("the open to be allowed", Duration::from_secs(30), || {
            let open = open(token.clone(), "pipeline");
            async move {
                let (status, body) = open.await;
                (status == 201).then_some(body)
            }
        })
        .await;
        assert_eq!(body["name"], "pipeline", "{body}");

        let close = http
            .delete(format!("{url}/pipeline"))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        assert!(close.status().is_success(), "close: {}", close.status());
        let windows: Api<disruption_guard::resources::TestWindow> =
            Api::namespaced(client.clone(), &ns);
        assert!(windows.get_opt("before-rbac").await.unwrap().is_none());
        assert!(windows.get_opt("wrong-audience").await.unwrap().is_none());
        assert!(windows.get_opt("untrusted-issuer").await.unwrap().is_none());
    })
    .await;
}
