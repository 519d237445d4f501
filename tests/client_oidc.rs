//! The CI client with the job's own OIDC id-token, as a real process against the real operator,
//! which accepts the real test issuer's tokens through the API server's JWT authenticator
//! (structured authentication): `--oidc github` asks the runner (a stand-in handing out the
//! issuer's tokens) for the audience, `--oidc gitlab` reads the variable `id_tokens:` fills.

mod support;

use std::time::Duration;

use disruption_guard::resources::TestWindow;
use kube::Api;
use support::authn;
use support::cli::client;
use support::operator::Operator;
use support::runner_token::RunnerTokenEndpoint;
use support::{wait, with_namespace};

#[tokio::test]
async fn the_client_opens_renews_and_closes_with_the_jobs_id_token_from_github_or_gitlab() {
    let issuer = authn::trust_shared_issuer();
    with_namespace(|kube, ns| async move {
        authn::grant_windows(&kube, &ns, &authn::user_for(&ns, "pipeline")).await;
        let op = Operator::start_with(&ns, vec![format!("--namespaces={ns}")]).await;
        let runner = RunnerTokenEndpoint::start(issuer, &ns, "pipeline");
        let windows: Api<TestWindow> = Api::namespaced(kube.clone(), &ns);

        // GitHub Actions: `run` renews every second for three seconds, then closes. RBAC
        // reaches the authorizer a moment after the binding: retry the first open.
        let out = wait::for_some(
            "run --oidc github to succeed",
            Duration::from_secs(30),
            || {
                let out = client(&op, &ns)
                    .envs(runner.env())
                    .args(["run", "--oidc", "github", "--no-wait", "--heartbeat", "1s"])
                    .args(["--ttl", "10m", "--retry-for", "0s", "--", "sleep", "3"])
                    .output()
                    .unwrap();
                async move { out.status.success().then_some(out) }
            },
        )
        .await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !stderr.contains("401") && !stderr.contains("403"),
            "{stderr}"
        );
        let asked = runner.audiences();
        assert!(!asked.is_empty(), "the runner was asked for an id-token");
        assert!(asked.iter().all(|a| a == authn::AUDIENCE), "{asked:?}");
        let list = windows.list(&Default::default()).await.unwrap().items;
        assert_eq!(list.len(), 1, "one window");
        assert!(list[0].spec.closed, "run closed its window");

        // GitLab CI: the token is in the variable the job's `id_tokens:` names.
        let token = issuer.token(&ns, "pipeline", authn::AUDIENCE, Duration::from_secs(600));
        let gitlab = |args: &[&str]| {
            client(&op, &ns)
                .env("CI_JOB_ID_TOKEN", &token)
                .args(["--oidc", "gitlab", "--oidc-token-var", "CI_JOB_ID_TOKEN"])
                .args(args)
                .output()
                .unwrap()
        };
        let open = gitlab(&["open", "--name", "gitlab-job", "--no-wait", "--ttl", "10m"]);
        assert!(
            open.status.success(),
            "{}",
            String::from_utf8_lossy(&open.stderr)
        );
        let close = gitlab(&["close", "gitlab-job"]);
        assert!(
            close.status.success(),
            "{}",
            String::from_utf8_lossy(&close.stderr)
        );
        assert!(windows.get("gitlab-job").await.unwrap().spec.closed);

        // Without the runner's variables, GitHub mode says what the job lacks.
        let out = client(&op, &ns)
            .args(["list", "--oidc", "github"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(78));
        assert!(String::from_utf8_lossy(&out.stderr).contains("id-token: write"));
    })
    .await;
}
