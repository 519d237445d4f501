//! Fuzzes the HTTP API of a real operator from its own OpenAPI document with schemathesis
//! (`tests/fuzz/schemathesis.sh`): no request may produce a 5xx or crash the server.

mod support;

use std::process::Command;

use support::operator::Operator;
use support::{repo_root, with_namespace};

#[tokio::test]
async fn schemathesis_finds_no_server_error_in_the_api() {
    with_namespace(|_client, ns| async move {
        let op = Operator::start(&ns, &["--rate-limit=0"]).await;
        let st = Command::new(repo_root().join("tests/fuzz/install"))
            .output()
            .expect("tests/fuzz/install");
        assert!(
            st.status.success(),
            "installing schemathesis: {}",
            String::from_utf8_lossy(&st.stderr)
        );
        let st = String::from_utf8(st.stdout).unwrap().trim().to_string();
        let max_time = std::env::var("FUZZ_SECONDS").unwrap_or_else(|_| "60".into());
        let out = tokio::task::spawn_blocking({
            let (ns, api) = (ns.clone(), op.api.clone());
            move || {
                Command::new(repo_root().join("tests/fuzz/schemathesis.sh"))
                    .env("NAMESPACE", ns)
                    .env("SERVER", api)
                    .env("ST", st)
                    .env("MAX_TIME", max_time)
                    .output()
                    .expect("running schemathesis")
            }
        })
        .await
        .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let summary: Vec<&str> = stdout.lines().rev().take(12).collect();
        eprintln!(
            "schemathesis:\n{}",
            summary.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
        assert!(
            out.status.success(),
            "schemathesis found failures:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // The process is still serving after the fuzzing.
        let health = reqwest::get(format!("{}/healthz", op.admin)).await.unwrap();
        assert!(health.status().is_success());
    })
    .await;
}
