//! The HTTP API against the real cluster, through the real operator binary: bad input answers
//! problem+json 4xx, opens are idempotent, ServiceAccount tokens go through TokenReview and
//! RBAC, static tokens are scoped to namespaces, the OpenAPI document is current.
//!
//! Tests whose name says "once the controller" need the window controller to set `Ready`;
//! everything else needs only the API.

mod support;

use std::time::Duration;

use disruption_guard::resources::TestWindow;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use reqwest::StatusCode;
use serde_json::{Value, json};
use support::operator::Operator;
use support::{wait, with_namespace};

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(90))
        .build()
        .unwrap()
}

fn windows_url(op: &Operator, ns: &str) -> String {
    format!("{}/v1/namespaces/{ns}/windows", op.api)
}

async fn windows_in(client: &Client, ns: &str) -> Vec<TestWindow> {
    Api::<TestWindow>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
}

/// Asserts a problem+json answer with `status` whose detail contains `detail`.
async fn assert_problem(resp: reqwest::Response, status: u16, detail: &str, case: &str) {
    assert_eq!(resp.status().as_u16(), status, "{case}: status");
    let content_type = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    assert!(
        content_type.starts_with("application/problem+json"),
        "{case}: content-type {content_type:?}"
    );
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["status"], status, "{case}: {body}");
    assert!(body["title"].is_string(), "{case}: {body}");
    let text = body["detail"].as_str().unwrap_or_default();
    assert!(
        text.to_lowercase().contains(&detail.to_lowercase()),
        "{case}: detail {text:?} does not mention {detail:?}"
    );
}

#[tokio::test]
async fn every_malformed_request_answers_its_4xx_as_problem_json() {
    with_namespace(|client, ns| async move {
        let op = Operator::start(&ns, &["--max-body-bytes=2048", "--max-ttl=2h"]).await;
        let http = http();
        let url = windows_url(&op, &ns);
        // A window that exists, for the conflict case.
        let taken = http
            .post(&url)
            .json(&json!({"name": "taken"}))
            .send()
            .await
            .unwrap();
        assert_eq!(taken.status(), StatusCode::CREATED);

        struct Case {
            what: &'static str,
            method: &'static str,
            path: String,
            content_type: Option<&'static str>,
            body: String,
            status: u16,
            detail: &'static str,
        }
        let post = |what, body: &str, status, detail| Case {
            what,
            method: "POST",
            path: format!("/v1/namespaces/{ns}/windows"),
            content_type: Some("application/json"),
            body: body.to_string(),
            status,
            detail,
        };
        let cases = vec![
            post("malformed JSON", "{\"ttl\": ", 400, "body"),
            post("JSON that is not an object", "[1,2]", 400, "body"),
            post("an unknown field", r#"{"tll": "5m"}"#, 400, "tll"),
            post("a wrongly typed field", r#"{"ttl": 5}"#, 400, "body"),
            post("a malformed selector string", r#"{"selector": "app in web"}"#, 400, "selector"),
            post("an invalid label key", r#"{"selector": "-x=y"}"#, 400, "label key"),
            post(
                "an unknown selector operator",
                r#"{"selector": {"matchExpressions": [{"key": "a", "operator": "Like", "values": ["b"]}]}}"#,
                400,
                "operator",
            ),
            post("a ttl that is not a duration", r#"{"ttl": "soon"}"#, 422, "ttl"),
            post("a zero ttl", r#"{"ttl": "0s"}"#, 422, "ttl"),
            post("a negative ttl", r#"{"ttl": "-5m"}"#, 422, "ttl"),
            post("a ttl over the maximum", r#"{"ttl": "3h"}"#, 422, "maximum"),
            post("an invalid name", r#"{"name": "Not_A_Name"}"#, 422, "name"),
            post("a reason that is too long", &format!(r#"{{"reason": "{}"}}"#, "r".repeat(300)), 422, "reason"),
            post("a name that is taken", r#"{"name": "taken"}"#, 409, "already exists"),
            post("a body over the limit", &format!(r#"{{"reason": "{}"}}"#, "x".repeat(4096)), 413, "body"),
            Case {
                content_type: Some("text/plain"),
                ..post("a body that is not JSON", r#"{"ttl": "5m"}"#, 415, "content-type")
            },
            Case {
                content_type: None,
                ..post("a body without content type", r#"{"ttl": "5m"}"#, 415, "content-type")
            },
            Case {
                path: format!("/v1/namespaces/{ns}/windows?wait=maybe"),
                ..post("a wait that is not a boolean", "{}", 400, "wait")
            },
            Case {
                path: format!("/v1/namespaces/{ns}/windows?wait=true&timeout=1y"),
                ..post("a wait timeout that is not a duration", "{}", 400, "timeout")
            },
            Case {
                path: "/v1/namespaces/not-served-here/windows".into(),
                ..post("a namespace outside --namespaces", "{}", 403, "--namespaces")
            },
            Case {
                method: "GET",
                path: format!("/v1/namespaces/{ns}/windows/nope"),
                ..post("a window that does not exist", "", 404, "nope")
            },
            Case {
                method: "GET",
                path: format!("/v1/namespaces/{ns}/windows/%09l%C2%9B"),
                ..post("a window name no object can have", "", 404, "not a valid object name")
            },
            Case {
                method: "DELETE",
                path: format!("/v1/namespaces/{ns}/windows/nope"),
                ..post("closing a window that does not exist", "", 404, "nope")
            },
            Case {
                path: format!("/v1/namespaces/{ns}/windows/nope/renew"),
                ..post("renewing a window that does not exist", "{}", 404, "nope")
            },
            Case {
                path: format!("/v1/namespaces/{ns}/windows/taken/renew"),
                ..post("a renew ttl that is not a duration", r#"{"ttl": "x"}"#, 422, "ttl")
            },
            Case {
                method: "GET",
                path: "/v2/anything".into(),
                ..post("an unknown route", "", 404, "no route")
            },
            Case {
                method: "PUT",
                path: format!("/v1/namespaces/{ns}/windows"),
                ..post("a method the route does not have", "{}", 405, "method")
            },
        ];
        for case in cases {
            let method = reqwest::Method::from_bytes(case.method.as_bytes()).unwrap();
            let mut req = http
                .request(method, format!("{}{}", op.api, case.path))
                .body(case.body.clone());
            if let Some(ct) = case.content_type {
                req = req.header("content-type", ct);
            }
            let resp = req.send().await.unwrap();
            assert_problem(resp, case.status, case.detail, case.what).await;
        }
        // Nothing of the above created a window beside the one that took the name.
        assert_eq!(windows_in(&client, &ns).await.len(), 1);
    })
    .await;
}

#[tokio::test]
async fn an_overflowing_ttl_is_a_422_naming_the_field_on_open_and_renew_and_the_crd_refuses_it() {
    with_namespace(|client, ns| async move {
        let op = Operator::start(&ns, &[]).await;
        let http = http();
        let url = windows_url(&op, &ns);
        let huge = "94522879700260684295381835.4h";
        let open = http
            .post(&url)
            .json(&json!({"name": "huge", "ttl": huge}))
            .send()
            .await
            .unwrap();
        assert_problem(open, 422, "ttl: ", "open with an overflowing ttl").await;
        assert!(
            windows_in(&client, &ns).await.is_empty(),
            "nothing was created"
        );
        let made = http
            .post(&url)
            .json(&json!({"name": "w", "ttl": "10m"}))
            .send()
            .await
            .unwrap();
        assert_eq!(made.status(), StatusCode::CREATED);
        let renew = http
            .post(format!("{url}/w/renew"))
            .json(&json!({"ttl": huge}))
            .send()
            .await
            .unwrap();
        assert_problem(renew, 422, "ttl: ", "renew with an overflowing ttl").await;
        // Written straight to the API server, the CRD's own rule refuses it, naming spec.ttl.
        let resource = kube::api::ApiResource::erase::<TestWindow>(&());
        let raw: Api<kube::api::DynamicObject> =
            Api::namespaced_with(client.clone(), &ns, &resource);
        let object: kube::api::DynamicObject = serde_json::from_value(json!({
            "apiVersion": "disruption-guard.io/v1alpha1", "kind": "TestWindow",
            "metadata": {"name": "direct"}, "spec": {"ttl": huge}
        }))
        .unwrap();
        let refused = raw
            .create(&PostParams::default(), &object)
            .await
            .unwrap_err();
        assert!(refused.to_string().contains("spec.ttl"), "{refused}");
        // The operator is still serving.
        let list = http.get(&url).send().await.unwrap();
        assert_eq!(list.status(), StatusCode::OK);
    })
    .await;
}

#[tokio::test]
async fn a_client_over_its_rate_limit_gets_429_with_retry_after() {
    with_namespace(|_client, ns| async move {
        let op = Operator::start(&ns, &["--rate-limit=1", "--rate-burst=3"]).await;
        let http = http();
        let mut statuses = vec![];
        let mut limited = None;
        for _ in 0..6 {
            let resp = http.get(windows_url(&op, &ns)).send().await.unwrap();
            statuses.push(resp.status().as_u16());
            if resp.status() == StatusCode::TOO_MANY_REQUESTS && limited.is_none() {
                assert!(resp.headers().contains_key("retry-after"));
                limited = Some(resp);
            }
        }
        assert_eq!(&statuses[..3], [200, 200, 200], "{statuses:?}");
        let resp = limited.unwrap_or_else(|| panic!("never rate limited: {statuses:?}"));
        assert_problem(resp, 429, "rate limit", "over the limit").await;
    })
    .await;
}

#[tokio::test]
async fn an_open_creates_a_testwindow_that_renew_extends_and_close_marks_closed() {
    with_namespace(|client, ns| async move {
        let op = Operator::start(&ns, &[]).await;
        let http = http();
        let url = windows_url(&op, &ns);
        let resp = http
            .post(&url)
            .header("x-request-id", "req-abc-123")
            .json(&json!({
                "selector": "app=web,tier in (backend)",
                "ttl": "20m",
                "reason": "e2e for PR 42",
                "ci": {"provider": "github", "repository": "org/shop", "runId": "7"}
            }))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::CREATED);
        assert_eq!(resp.headers()["x-request-id"], "req-abc-123");
        let location = resp.headers()["location"].to_str().unwrap().to_string();
        let view: Value = resp.json().await.unwrap();
        let name = view["name"].as_str().unwrap().to_string();
        assert_eq!(location, format!("/v1/namespaces/{ns}/windows/{name}"));
        assert_eq!(view["ttl"], "20m");

        let tw = Api::<TestWindow>::namespaced(client.clone(), &ns)
            .get(&name)
            .await
            .unwrap();
        assert_eq!(tw.spec.selector.match_labels.as_ref().unwrap()["app"], "web");
        let expr = &tw.spec.selector.match_expressions.as_ref().unwrap()[0];
        assert_eq!((expr.key.as_str(), expr.operator.as_str()), ("tier", "In"));
        assert_eq!(tw.spec.ttl, Duration::from_secs(20 * 60));
        assert_eq!(tw.spec.reason, "e2e for PR 42");
        assert_eq!(tw.spec.ci.as_ref().unwrap().run_id.as_deref(), Some("7"));
        assert!(!tw.spec.closed);

        let got: Value = http.get(format!("{url}/{name}")).send().await.unwrap().json().await.unwrap();
        assert_eq!(got["name"], name.as_str());
        let list: Value = http.get(&url).send().await.unwrap().json().await.unwrap();
        assert_eq!(list["items"].as_array().unwrap().len(), 1);

        let before = jiff::Timestamp::now();
        let renewed = http
            .post(format!("{url}/{name}/renew"))
            .json(&json!({"ttl": "10m"}))
            .send()
            .await
            .unwrap();
        assert_eq!(renewed.status(), StatusCode::OK);
        let tw = Api::<TestWindow>::namespaced(client.clone(), &ns)
            .get(&name)
            .await
            .unwrap();
        let until = tw.spec.expires_at.expect("renew sets spec.expiresAt").0;
        let ahead = until.duration_since(before).as_secs();
        assert!((590..=610).contains(&ahead), "expiresAt is {ahead}s ahead");
        assert_eq!(tw.spec.ttl, Duration::from_secs(20 * 60), "renew keeps the ttl");

        let closed = http.delete(format!("{url}/{name}")).send().await.unwrap();
        assert_eq!(closed.status(), StatusCode::OK);
        let closed: Value = closed.json().await.unwrap();
        assert_eq!(closed["closed"], true);
        assert!(closed["report"].is_object());
        let tw = Api::<TestWindow>::namespaced(client.clone(), &ns)
            .get(&name)
            .await
            .unwrap();
        assert!(tw.spec.closed);
        assert!(tw.spec.expires_at.is_some(), "close keeps the renewal");

        let again = http.delete(format!("{url}/{name}")).send().await.unwrap();
        assert_eq!(again.status(), StatusCode::OK, "closing a closed window is fine");
        let late = http
            .post(format!("{url}/{name}/renew"))
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_problem(late, 409, "ended", "renewing a closed window").await;

        let metrics = op.metrics().await;
        assert!(
            metrics.contains(
                r#"disruption_guard_api_requests_total{method="POST",route="/v1/namespaces/{namespace}/windows",code="201"} 1"#
            ),
            "{metrics}"
        );
        assert!(
            metrics.contains(r#"disruption_guard_api_request_duration_seconds_count{method="DELETE",route="/v1/namespaces/{namespace}/windows/{name}",code="200"} 2"#),
            "{metrics}"
        );
    })
    .await;
}

#[tokio::test]
async fn a_retried_open_with_one_idempotency_key_yields_one_window_even_when_concurrent() {
    with_namespace(|client, ns| async move {
        let op = Operator::start(&ns, &[]).await;
        let http = http();
        let url = windows_url(&op, &ns);
        let open = |key: &'static str| {
            let (http, url) = (http.clone(), url.clone());
            async move {
                let resp = http
                    .post(&url)
                    .header("Idempotency-Key", key)
                    .json(&json!({"selector": "app=web", "reason": "retry"}))
                    .send()
                    .await
                    .unwrap();
                let status = resp.status().as_u16();
                let body: Value = resp.json().await.unwrap();
                (
                    status,
                    body["name"].as_str().unwrap_or_default().to_string(),
                )
            }
        };
        let (first, name) = open("ci-run-1").await;
        assert_eq!(first, 201);
        let (again, same) = open("ci-run-1").await;
        assert_eq!((again, same.as_str()), (200, name.as_str()));

        let answers = futures::future::join_all((0..20).map(|_| open("ci-run-2"))).await;
        let created = answers.iter().filter(|(s, _)| *s == 201).count();
        assert!(
            answers.iter().all(|(s, _)| *s == 201 || *s == 200),
            "{answers:?}"
        );
        assert!(created <= 1, "{answers:?}");
        let names: std::collections::BTreeSet<_> = answers.iter().map(|(_, n)| n.clone()).collect();
        assert_eq!(names.len(), 1, "{answers:?}");

        // The body field works like the header.
        let resp = http
            .post(&url)
            .json(&json!({"selector": "app=web", "reason": "retry", "idempotencyKey": "ci-run-1"}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["name"], name.as_str());

        assert_eq!(windows_in(&client, &ns).await.len(), 2);
    })
    .await;
}

#[tokio::test]
async fn an_idempotency_key_reused_with_another_request_is_a_422_naming_the_key() {
    with_namespace(|client, ns| async move {
        let op = Operator::start(&ns, &[]).await;
        let http = http();
        let url = windows_url(&op, &ns);
        let open = |body: Value| {
            http.post(&url)
                .header("Idempotency-Key", "ci-run-7")
                .json(&body)
                .send()
        };
        let first = open(json!({"selector": "app=web", "ttl": "30m", "reason": "e2e"}))
            .await
            .unwrap();
        assert_eq!(first.status(), StatusCode::CREATED);
        let name = first.json::<Value>().await.unwrap()["name"]
            .as_str()
            .unwrap()
            .to_string();

        // The same request spelled another way is a retry.
        let again = open(json!({
            "selector": {"matchLabels": {"app": "web"}}, "ttl": "1800s", "reason": "e2e",
            "idempotencyKey": "ignored-the-header-wins"
        }))
        .await
        .unwrap();
        assert_eq!(again.status(), StatusCode::OK);
        assert_eq!(again.json::<Value>().await.unwrap()["name"], name.as_str());

        for (what, body) in [
            (
                "another selector",
                json!({"selector": "app=api", "ttl": "30m", "reason": "e2e"}),
            ),
            (
                "another ttl",
                json!({"selector": "app=web", "ttl": "20m", "reason": "e2e"}),
            ),
            (
                "another reason",
                json!({"selector": "app=web", "ttl": "30m", "reason": "other"}),
            ),
        ] {
            let resp = open(body).await.unwrap();
            assert_eq!(resp.status().as_u16(), 422, "{what}");
            let problem: Value = resp.json().await.unwrap();
            assert_eq!(
                problem["type"], "https://disruption-guard.io/problems/idempotency-key-reused",
                "{what}"
            );
            let detail = problem["detail"].as_str().unwrap();
            assert!(
                detail.contains("Idempotency-Key: \"ci-run-7\""),
                "{what}: {detail}"
            );
            assert!(
                detail.contains(&name),
                "{what}: the detail names the window: {detail}"
            );
        }
        let resp = open(json!({"selector": "app=api"})).await.unwrap();
        assert_problem(resp, 422, "ci-run-7", "the problem is problem+json").await;

        let windows = windows_in(&client, &ns).await;
        assert_eq!(windows.len(), 1, "no second window");
        assert_eq!(windows[0].spec.reason, "e2e", "the window is unchanged");
    })
    .await;
}

#[tokio::test]
async fn a_window_planted_under_an_idempotency_keys_name_with_protection_off_is_never_the_callers()
{
    with_namespace(|client, ns| async move {
        use disruption_guard::operations::open::build_window;
        use disruption_guard::operations::ttl::TtlLimits;
        use disruption_guard::operations::types::{OpenRequest, SelectorInput};
        let op = Operator::start(&ns, &[]).await;
        let url = windows_url(&op, &ns);
        let key = "ci-run-42";
        let request = json!({"selector": "app=web", "ttl": "30m", "reason": "e2e"});
        // Someone who may create windows in the namespace plants, under the name the key maps
        // to, the window the request would open (its annotations copied, the digest included)
        // but with every protection turned off.
        let req = OpenRequest {
            selector: Some(SelectorInput::Text("app=web".into())),
            ttl: Some("30m".into()),
            reason: Some("e2e".into()),
            ..Default::default()
        };
        let limits = TtlLimits {
            default: Duration::from_secs(1800),
            max: Duration::from_secs(24 * 3600),
        };
        let mut planted = build_window(&ns, &req, Some(key), &limits).unwrap();
        planted.metadata.finalizers = None;
        let protect = &mut planted.spec.protect;
        protect.pod_disruption_budgets = false;
        protect.do_not_disrupt = false;
        protect.nodes = false;
        let windows = Api::<TestWindow>::namespaced(client.clone(), &ns);
        let planted = windows
            .create(&PostParams::default(), &planted)
            .await
            .unwrap();
        let name = planted.metadata.name.clone().unwrap();

        let resp = http()
            .post(&url)
            .header("Idempotency-Key", key)
            .json(&request)
            .send()
            .await
            .unwrap();
        assert_eq!(
            resp.status().as_u16(),
            422,
            "the planted window was answered as the caller's"
        );
        let problem: Value = resp.json().await.unwrap();
        assert_eq!(
            problem["type"],
            "https://disruption-guard.io/problems/idempotency-key-reused"
        );
        let detail = problem["detail"].as_str().unwrap();
        assert!(detail.contains(key) && detail.contains(&name), "{detail}");
        let after = windows_in(&client, &ns).await;
        assert_eq!(after.len(), 1, "no second window");
        assert!(!after[0].spec.protect.pod_disruption_budgets);

        // The window as the request asks for it, opened under the key, is a retry.
        let fresh = "ci-run-43";
        let open = || {
            http()
                .post(&url)
                .header("Idempotency-Key", fresh)
                .json(&request)
                .send()
        };
        assert_eq!(open().await.unwrap().status(), StatusCode::CREATED);
        assert_eq!(open().await.unwrap().status(), StatusCode::OK);
    })
    .await;
}

#[tokio::test]
async fn a_client_is_its_identity_or_behind_a_trusted_proxy_its_forwarded_address() {
    with_namespace(|_client, ns| async move {
        // Behind a trusted proxy (the test's loopback), X-Forwarded-For names the client.
        let op = Operator::start(
            &ns,
            &["--rate-limit=0.01", "--rate-burst=2", "--trusted-proxies=127.0.0.0/8"],
        )
        .await;
        let http = http();
        let list = |xff: &'static str| {
            http.get(windows_url(&op, &ns))
                .header("X-Forwarded-For", xff)
                .send()
        };
        let mut statuses = vec![];
        for _ in 0..3 {
            statuses.push(list("203.0.113.1").await.unwrap().status().as_u16());
        }
        assert_eq!(statuses, [200, 200, 429], "one forwarded client's bucket");
        assert_eq!(list("203.0.113.2").await.unwrap().status(), StatusCode::OK, "another's");
        drop(op);

        // Not trusted: the header is ignored, the peer is the client.
        let op = Operator::start(&ns, &["--rate-limit=0.01", "--rate-burst=2"]).await;
        let forged = |xff: &'static str| {
            http.get(windows_url(&op, &ns))
                .header("X-Forwarded-For", xff)
                .send()
        };
        assert_eq!(forged("203.0.113.1").await.unwrap().status(), StatusCode::OK);
        assert_eq!(forged("203.0.113.2").await.unwrap().status(), StatusCode::OK);
        assert_eq!(
            forged("203.0.113.3").await.unwrap().status(),
            StatusCode::TOO_MANY_REQUESTS,
            "a client cannot pick its own bucket"
        );
        drop(op);

        // Authenticated: two static tokens from one address have a bucket each.
        let tokens_file = std::env::temp_dir().join(format!("{ns}-rate-tokens.yaml"));
        std::fs::write(
            &tokens_file,
            format!(
                "tokens:\n  - name: job-a\n    token: static-token-aaaaaaaaaa\n    namespaces: [{ns}]\n  \
                 - name: job-b\n    token: static-token-bbbbbbbbbb\n    namespaces: [{ns}]\n"
            ),
        )
        .unwrap();
        let op = Operator::start_with(
            &ns,
            vec![
                format!("--namespaces={ns}"),
                format!("--static-tokens-file={}", tokens_file.display()),
                "--rate-limit=0.01".into(),
                "--rate-burst=2".into(),
            ],
        )
        .await;
        let as_job = |token: &'static str| http.get(windows_url(&op, &ns)).bearer_auth(token).send();
        let mut statuses = vec![];
        for _ in 0..3 {
            statuses.push(as_job("static-token-aaaaaaaaaa").await.unwrap().status().as_u16());
        }
        assert_eq!(statuses, [200, 200, 429], "job a's bucket");
        assert_eq!(
            as_job("static-token-bbbbbbbbbb").await.unwrap().status(),
            StatusCode::OK,
            "job b has its own bucket at the same address"
        );
        let _ = std::fs::remove_file(&tokens_file);
    })
    .await;
}

#[tokio::test]
async fn the_openapi_document_served_and_printed_equals_docs_openapi_json() {
    with_namespace(|_client, ns| async move {
        let committed =
            std::fs::read_to_string(support::repo_root().join("docs/openapi.json")).unwrap();
        let printed = std::process::Command::new(support::operator::binary())
            .arg("openapi")
            .output()
            .unwrap();
        assert!(printed.status.success());
        assert_eq!(
            String::from_utf8(printed.stdout).unwrap(),
            committed,
            "docs/openapi.json is stale: run `disruption-guard openapi > docs/openapi.json`"
        );
        let op = Operator::start(&ns, &[]).await;
        let served = http()
            .get(format!("{}/v1/openapi.json", op.api))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert_eq!(served, committed);
        let doc: Value = serde_json::from_str(&served).unwrap();
        assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
        assert!(
            doc["paths"]["/v1/namespaces/{namespace}/windows/{name}/renew"]["post"].is_object()
        );
    })
    .await;
}

/// A ServiceAccount in `ns` allowed to manage testwindows there, and a token for it.
async fn service_account_with_rbac(client: &Client, ns: &str, sa: &str) {
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    sas.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": sa}})).unwrap(),
    )
    .await
    .unwrap();
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "windows"},
        "rules": [{
            "apiGroups": ["disruption-guard.io"],
            "resources": ["testwindows"],
            "verbs": ["create", "get", "list", "patch", "delete"]
        }]
    }))
    .unwrap();
    Api::<Role>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "windows"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "windows"},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}]
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
}

#[tokio::test]
async fn service_account_and_static_tokens_are_authenticated_and_scoped_to_their_namespaces() {
    with_namespace(|client, ns| async move {
        let other = format!("{ns}-other");
        let namespaces: Api<Namespace> = Api::all(client.clone());
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": other, "labels": {"disruption-guard.io/test": "true"}}}))
                    .unwrap(),
            )
            .await
            .unwrap();
        service_account_with_rbac(&client, &ns, "ci").await;
        let tokens_file = std::env::temp_dir().join(format!("{ns}-tokens.yaml"));
        std::fs::write(
            &tokens_file,
            format!("tokens:\n  - name: outside-ci\n    token: static-token-0123456789\n    namespaces: [{ns}]\n"),
        )
        .unwrap();
        let op = Operator::start_with(
            &ns,
            vec![
                format!("--namespaces={ns},{other}"),
                format!("--static-tokens-file={}", tokens_file.display()),
            ],
        )
        .await;
        let http = http();
        let good = support::service_account_token(&ns, "ci", "disruption-guard");
        let wrong_audience = support::service_account_token(&ns, "ci", "something-else");

        let open = |ns: String, token: Option<String>| {
            let (http, url) = (http.clone(), windows_url(&op, &ns));
            async move {
                let mut req = http.post(url).json(&json!({"selector": "app=web"}));
                if let Some(t) = token {
                    req = req.bearer_auth(t);
                }
                req.send().await.unwrap()
            }
        };
        let resp = open(ns.clone(), Some(good.clone())).await;
        assert_eq!(resp.status(), StatusCode::CREATED, "{}", resp.text().await.unwrap());
        assert_problem(open(other.clone(), Some(good.clone())).await, 403, "may not create", "SA token in another namespace").await;
        let no_token = open(ns.clone(), None).await;
        assert!(no_token.headers().contains_key("www-authenticate"));
        assert_problem(no_token, 401, "bearer token", "no token").await;
        assert_problem(open(ns.clone(), Some(wrong_audience)).await, 401, "audience", "token of another audience").await;
        assert_problem(open(ns.clone(), Some("garbage".into())).await, 401, "not valid", "garbage token").await;

        // Reads are authorized too; the positive answer is cached and still right.
        for _ in 0..2 {
            let list = http.get(windows_url(&op, &ns)).bearer_auth(&good).send().await.unwrap();
            assert_eq!(list.status(), StatusCode::OK);
        }
        let list = http.get(windows_url(&op, &other)).bearer_auth(&good).send().await.unwrap();
        assert_problem(list, 403, "may not list", "SA token listing another namespace").await;

        let static_token = Some("static-token-0123456789".to_string());
        assert_eq!(open(ns.clone(), static_token.clone()).await.status(), StatusCode::CREATED);
        assert_problem(open(other.clone(), static_token).await, 403, "may not use namespace", "static token in another namespace").await;
        assert_problem(open(ns.clone(), Some("static-token-0123456788".into())).await, 401, "not valid", "near-miss static token").await;

        assert_eq!(windows_in(&client, &ns).await.len(), 2);
        assert!(windows_in(&client, &other).await.is_empty());
        let _ = namespaces.delete(&other, &DeleteParams::background()).await;
        let _ = std::fs::remove_file(&tokens_file);
    })
    .await;
}

// Needs the window controller: it is what sets the Ready condition.
#[tokio::test]
async fn an_open_with_wait_answers_once_the_window_is_ready_once_the_controller_runs() {
    with_namespace(|client, ns| async move {
        service_account_with_rbac(&client, &ns, "ci").await;
        let op = Operator::start_with(&ns, vec![format!("--namespaces={ns}")]).await;
        let token = support::service_account_token(&ns, "ci", "disruption-guard");
        let resp = http()
            .post(format!("{}?wait=true&timeout=60s", windows_url(&op, &ns)))
            .bearer_auth(token)
            .json(&json!({"selector": "app=web", "ttl": "10m"}))
            .send()
            .await
            .unwrap();
        let status = resp.status();
        let body: Value = resp.json().await.unwrap();
        assert_eq!(status, StatusCode::CREATED, "{body}");
        assert_eq!(body["ready"], true, "{body}");
        assert_eq!(body["phase"], "Active", "{body}");
    })
    .await;
}

#[tokio::test]
async fn an_open_with_a_short_wait_answers_504_with_the_windows_state_when_not_ready() {
    with_namespace(|client, ns| async move {
        // Another replica holds the Lease for an hour: this one serves the API but protects
        // nothing, so no window it opens can become Ready, however slow the machine is. (A
        // window over no pods is Ready within milliseconds, and a wait looks at the window at
        // least once, so without this a busy machine made even `timeout=1ns` see it Ready.)
        use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
        let now = MicroTime(jiff::Timestamp::now());
        let lease = Lease {
            metadata: kube::api::ObjectMeta {
                name: Some("disruption-guard".into()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some("another-replica".into()),
                lease_duration_seconds: Some(3600),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                ..Default::default()
            }),
        };
        Api::<Lease>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &lease)
            .await
            .unwrap();
        let op = Operator::replica(&ns, "follower").await;
        let resp = http()
            .post(format!("{}?wait=true&timeout=2s", windows_url(&op, &ns)))
            .json(&json!({"name": "slow"}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::GATEWAY_TIMEOUT);
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["status"], 504, "{body}");
        assert_eq!(body["window"]["name"], "slow", "{body}");
        assert!(!op.leads().await, "the other replica kept the Lease");
    })
    .await;
}

#[tokio::test]
async fn an_open_over_the_namespaces_resourcequota_is_a_403_naming_the_quota() {
    with_namespace(|client, ns| async move {
        let quota: k8s_openapi::api::core::v1::ResourceQuota = serde_json::from_value(json!({
            "metadata": {"name": "windows"},
            "spec": {"hard": {"count/testwindows.disruption-guard.io": "1"}}
        }))
        .unwrap();
        let quotas: Api<k8s_openapi::api::core::v1::ResourceQuota> =
            Api::namespaced(client.clone(), &ns);
        quotas.create(&PostParams::default(), &quota).await.unwrap();
        // Admission refuses ("status unknown for quota") until the quota controller has counted
        // TestWindows: it discovers a new CRD within 30 s and counts at its next resync (15 s in
        // the test cluster, 5 minutes by default).
        wait::until(
            "the quota controller to count TestWindows",
            Duration::from_secs(120),
            || async {
                quotas
                    .get("windows")
                    .await
                    .ok()
                    .and_then(|q| q.status?.used)
                    .is_some_and(|used| used.contains_key("count/testwindows.disruption-guard.io"))
            },
        )
        .await;
        let op = Operator::start(&ns, &[]).await;
        // Until the quota's admission cache has the count, the API asks to retry (503).
        let first = wait::for_some("the first open", Duration::from_secs(60), || async {
            let resp = http()
                .post(windows_url(&op, &ns))
                .json(&json!({"name": "first"}))
                .send()
                .await
                .unwrap();
            (resp.status() != StatusCode::SERVICE_UNAVAILABLE).then_some(resp.status())
        })
        .await;
        assert_eq!(first, StatusCode::CREATED);
        let second = http()
            .post(windows_url(&op, &ns))
            .json(&json!({"name": "second"}))
            .send()
            .await
            .unwrap();
        assert_problem(second, 403, "ResourceQuota", "an open over the quota").await;
    })
    .await;
}

/// `docs/api.md`'s reference names every operation, parameter and status of `docs/openapi.json`
/// (the document the operator serves), and no operation that is not in it.
#[test]
fn the_api_reference_lists_every_operation_parameter_and_status_of_the_openapi_document() {
    let openapi: Value = serde_json::from_str(
        &std::fs::read_to_string(support::repo_root().join("docs/openapi.json")).unwrap(),
    )
    .unwrap();
    let doc = std::fs::read_to_string(support::repo_root().join("docs/api.md")).unwrap();
    let reference = doc
        .split_once("\n## Reference\n")
        .expect("docs/api.md has a `## Reference` section")
        .1;
    let reference = reference.split("\n## ").next().unwrap();
    let sections: std::collections::BTreeMap<String, String> = reference
        .split("\n### ")
        .skip(1)
        .filter_map(|s| {
            let (heading, body) = s.split_once('\n')?;
            Some((heading.trim().to_string(), body.to_string()))
        })
        .collect();
    let mut documented = 0;
    for (path, ops) in openapi["paths"].as_object().unwrap() {
        for (method, op) in ops.as_object().unwrap() {
            let heading = format!("{} {path}", method.to_uppercase());
            let body = sections
                .get(&heading)
                .unwrap_or_else(|| panic!("docs/api.md has no `### {heading}`"));
            for param in op["parameters"].as_array().into_iter().flatten() {
                let name = param["name"].as_str().unwrap();
                assert!(
                    body.contains(&format!("| `{name}` | {} |", param["in"].as_str().unwrap())),
                    "{heading}: parameter {name} is not documented"
                );
            }
            for status in op["responses"].as_object().unwrap().keys() {
                assert!(
                    body.contains(&format!("\n| {status} | ")),
                    "{heading}: status {status} is not documented"
                );
            }
            let statuses: Vec<&str> = body
                .lines()
                .filter_map(|l| l.strip_prefix("| "))
                .filter_map(|l| l.split(' ').next())
                .filter(|c| c.len() == 3 && c.chars().all(|c| c.is_ascii_digit()))
                .collect();
            for status in statuses {
                assert!(
                    op["responses"].get(status).is_some(),
                    "{heading}: status {status} is documented but not in openapi.json"
                );
            }
            documented += 1;
        }
    }
    let operations = sections
        .keys()
        .filter(|h| {
            ["GET ", "POST ", "PUT ", "PATCH ", "DELETE "]
                .iter()
                .any(|m| h.starts_with(m))
        })
        .count();
    assert_eq!(
        operations, documented,
        "docs/api.md documents operations openapi.json lacks"
    );
}

/// A Secret `tokens` in `ns` whose `tokens.yaml` is `yaml`.
async fn put_tokens_secret(client: &Client, ns: &str, yaml: &str) {
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), ns);
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
        "metadata": {"name": "tokens"},
        "stringData": {"tokens.yaml": yaml},
    }))
    .unwrap();
    secrets
        .patch(
            "tokens",
            &kube::api::PatchParams::apply("test").force(),
            &kube::api::Patch::Apply(&secret),
        )
        .await
        .unwrap();
}

/// An operator that authenticates with the static tokens of the Secret `ns/tokens`.
async fn operator_with_tokens_secret(ns: &str) -> Operator {
    Operator::start_with(
        ns,
        vec![
            format!("--namespaces={ns}"),
            format!("--static-tokens-secret={ns}/tokens"),
        ],
    )
    .await
}

/// Waits (one reload period and a margin) until `token` lists windows with `status`.
async fn until_token_answers(op: &Operator, ns: &str, token: &str, status: u16, what: &str) {
    let limit = disruption_guard::api::static_tokens::RELOAD_EVERY + Duration::from_secs(10);
    wait::until_ok(what, limit, || async {
        let resp = http()
            .get(windows_url(op, ns))
            .bearer_auth(token)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        match resp.status().as_u16() {
            s if s == status => Ok(()),
            s => Err(format!("the token still answers {s}")),
        }
    })
    .await;
}

/// An operator reading its static tokens from the Secret `tokens` in `ns`, which lists only
/// `token`; checked to accept it before the caller changes the Secret.
async fn operator_accepting(client: &Client, ns: &str, token: &str) -> Operator {
    put_tokens_secret(
        client,
        ns,
        &format!("tokens:\n  - {{name: ci, token: {token}, namespaces: [{ns}]}}\n"),
    )
    .await;
    let op = operator_with_tokens_secret(ns).await;
    let ok = http()
        .get(windows_url(&op, ns))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), StatusCode::OK, "the static token works");
    op
}

#[tokio::test]
async fn deleting_the_static_tokens_secret_revokes_its_tokens_within_one_reload() {
    with_namespace(|client, ns| async move {
        let token = "static-token-deleted-0123";
        let op = operator_accepting(&client, &ns, token).await;
        let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), &ns);
        secrets
            .delete("tokens", &DeleteParams::default())
            .await
            .unwrap();
        until_token_answers(
            &op,
            &ns,
            token,
            401,
            "the deleted Secret's token to be refused",
        )
        .await;
        let resp = http()
            .get(windows_url(&op, &ns))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        assert_problem(resp, 401, "not valid", "a token of a deleted Secret").await;
        let metrics = op.metrics().await;
        assert!(
            metrics.contains("disruption_guard_api_static_token_reloads_total{result=\"missing\"}")
                && metrics.contains("disruption_guard_api_static_tokens 0"),
            "{metrics}"
        );
    })
    .await;
}

#[tokio::test]
async fn a_malformed_static_tokens_secret_revokes_the_previous_tokens_and_is_counted() {
    with_namespace(|client, ns| async move {
        let token = "static-token-malformed-01";
        let op = operator_accepting(&client, &ns, token).await;
        // A rotation gone wrong: the YAML no longer parses.
        put_tokens_secret(
            &client,
            &ns,
            &format!("tokens:\n  - {{name: ci, token: {token}"),
        )
        .await;
        until_token_answers(
            &op,
            &ns,
            token,
            401,
            "the malformed Secret's old token to be refused",
        )
        .await;
        let metrics = op.metrics().await;
        assert!(
            metrics
                .contains("disruption_guard_api_static_token_reloads_total{result=\"malformed\"}"),
            "{metrics}"
        );
        assert!(op.log_text().contains("every static token is revoked"));
        // Fixed, the tokens it lists work again.
        put_tokens_secret(
            &client,
            &ns,
            &format!("tokens:\n  - {{name: ci, token: {token}, namespaces: [{ns}]}}\n"),
        )
        .await;
        until_token_answers(
            &op,
            &ns,
            token,
            200,
            "the repaired Secret's token to work again",
        )
        .await;
    })
    .await;
}

#[tokio::test]
async fn an_operator_whose_static_tokens_secret_is_missing_starts_and_picks_it_up_when_created() {
    with_namespace(|client, ns| async move {
        let token = "static-token-late-012345";
        let op = operator_with_tokens_secret(&ns).await;
        let resp = http()
            .get(windows_url(&op, &ns))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        assert_problem(resp, 401, "not valid", "a token before its Secret exists").await;
        put_tokens_secret(
            &client,
            &ns,
            &format!("tokens:\n  - {{name: ci, token: {token}, namespaces: [{ns}]}}\n"),
        )
        .await;
        until_token_answers(&op, &ns, token, 200, "the created Secret's token to work").await;
    })
    .await;
}
