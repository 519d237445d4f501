//! The window controller on an older TestWindow CRD, as after `helm upgrade` (Helm never upgrades
//! CRDs): the installed status schema lacks `readyAt`, so the API server refuses the operator's
//! server-side apply of the status as a whole; the operator replaces the status instead, the API
//! server drops the field it does not know, and the window still opens, becomes Ready with every
//! other field written, and releases its protection when closed.
//!
//! Its own test binary: the CRD is cluster-wide and every other test relies on the real one
//! (test binaries run one after another). The real CRD is applied again at the end, also when
//! the test fails.

mod support;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use disruption_guard::resources::Phase;
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use support::fixtures::deployment;
use support::operator::{Operator, apply_crd, binary, ensure_crd};
use support::pods::ready_pod;
use support::windows::{
    close, open, protected, until_ready, until_released, until_status_released, window,
};
use support::{create_ready_node, kubectl, with_namespace};

const LIMIT: Duration = Duration::from_secs(30);

/// The CRD the binary generates.
fn generated_crd() -> String {
    let out = Command::new(binary()).arg("crd").output().unwrap();
    assert!(out.status.success(), "disruption-guard crd failed");
    String::from_utf8(out.stdout).unwrap()
}

/// `crd` without `readyAt` in the status schema: the CRD of a release that did not write it.
fn without_ready_at(crd: &str) -> String {
    let mut lines = crd.lines().peekable();
    let mut out = Vec::new();
    let mut removed = 0;
    while let Some(line) = lines.next() {
        if line.trim() != "readyAt:" {
            out.push(line);
            continue;
        }
        removed += 1;
        let indent = line.len() - line.trim_start().len();
        while lines
            .peek()
            .is_some_and(|l| l.len() - l.trim_start().len() > indent)
        {
            lines.next();
        }
    }
    assert_eq!(removed, 1, "one readyAt in the CRD's schema");
    out.join("\n") + "\n"
}

/// Whether the API server now serves the status schema with `readyAt`: a server-side dry run
/// of a TestWindow with `status.readyAt`, validated strictly, is refused for an unknown field
/// once the API server serves a schema without it (the same schema its apply checks).
fn serves_ready_at() -> bool {
    let probe = json!({
        "apiVersion": "disruption-guard.io/v1alpha1",
        "kind": "TestWindow",
        "metadata": {"name": "schema-probe", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "probe"}}, "ttl": "1m"},
        "status": {"readyAt": "2026-01-01T00:00:00Z"},
    });
    let mut create = kubectl()
        .args([
            "create",
            "--dry-run=server",
            "--validate=strict",
            "-o",
            "name",
            "-f",
            "-",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl create");
    create
        .stdin
        .take()
        .unwrap()
        .write_all(probe.to_string().as_bytes())
        .unwrap();
    let out = create.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() || stderr.contains("readyAt"),
        "the dry run failed for another reason: {stderr}"
    );
    out.status.success()
}

/// Waits until the API server serves the schema with `readyAt` (`true`) or without it.
fn until_served(with_ready_at: bool) {
    let deadline = Instant::now() + LIMIT;
    while serves_ready_at() != with_ready_at {
        assert!(
            Instant::now() < deadline,
            "the API server did not switch to the new schema"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Puts the real CRD back when dropped: at the end of the test, and when it panics.
struct RealCrdAfterwards;

impl Drop for RealCrdAfterwards {
    fn drop(&mut self) {
        let restored = std::panic::catch_unwind(|| {
            apply_crd(generated_crd().as_bytes());
            until_served(true);
        });
        if let Err(panic) = restored {
            if std::thread::panicking() {
                eprintln!("could not put the real CRD back (the next test binary applies it)");
            } else {
                std::panic::resume_unwind(panic);
            }
        }
    }
}

#[tokio::test]
async fn a_window_on_a_crd_without_ready_at_becomes_ready_with_every_other_field_and_is_released() {
    // The harness installs the real CRD once per test binary, before the first operator starts:
    // do it now, so that it does not replace the older one below.
    ensure_crd();
    let _restore = RealCrdAfterwards;
    apply_crd(without_ready_at(&generated_crd()).as_bytes());
    until_served(false);

    with_namespace(|client, ns| async move {
        let op = Operator::start(&ns, &[]).await;
        let node = format!("{ns}-n");
        create_ready_node(&client, &ns, &node).await;
        let web = deployment("web")
            .node_selector("disruption-guard.io/test-node", &node)
            .build();
        Api::<Deployment>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &web)
            .await
            .unwrap();
        let pod = ready_pod(&client, &ns, "web").await.metadata.name.unwrap();

        open(&client, &ns, &window("w", "web", "10m", json!({}))).await;
        let w = until_ready(&client, &ns, "w", LIMIT).await;
        let status = w.status.clone().unwrap();
        assert_eq!(status.phase, Phase::Active);
        assert!(status.opened_at.is_some(), "{status:?}");
        assert!(status.expires_at.is_some(), "{status:?}");
        assert_eq!(status.observed_generation, w.metadata.generation);
        assert_eq!(
            (status.protected.pods, status.protected.nodes),
            (1, 1),
            "{status:?}"
        );
        assert_eq!(status.protected.pdbs.len(), 1, "{status:?}");
        assert_eq!(
            status.ready_at, None,
            "the older schema has no readyAt: the API server dropped it"
        );
        assert!(protected(&client, &ns, &pod, &node).await);
        let log = op.log_text();
        assert!(
            log.contains("the installed TestWindow CRD is older than this operator"),
            "the operator says why fields are missing:\n{log}"
        );

        close(&client, &ns, "w").await;
        until_status_released(&client, &ns, "w", LIMIT).await;
        until_released(&client, &ns, &pod, &node, LIMIT).await;
    })
    .await;
}
