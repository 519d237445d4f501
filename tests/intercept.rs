//! The eviction interception against the real cluster: the API server sends each eviction to
//! the operator's webhook (registered as the chart registers it, over TLS with the CA the
//! operator keeps and publishes in the registration), which
//! answers 429 for a lone replica on a node being disrupted while its Deployment rolls out — no
//! PDB, no window. And its bounds: what a rollout cannot save is let through at once, a rollout
//! that cannot finish is let through after `--intercept-timeout`, an eviction of a pod that is
//! gone or another one is never held, a dead operator holds nothing (fail open), and holds
//! over a requester's rate limit are let through untouched.
//!
//! Every test uses private kwok nodes (labelled `disruption-guard.io/test=<ns>`), as the drain
//! tests do. The new pods take a second or two to become Ready (kwok's ready delay), like a
//! container that starts, so a killed pod shows as samples without a ready pod.

mod support;

use std::time::{Duration, Instant};

use kube::Api;
use kube::api::PostParams;
use support::drain::{Sampler, cordon, deploy_on, drain, lone, metric, node_of, until_event};
use support::intercept::{evict, evict_as, until_cordon_seen, until_in_effect};
use support::operator::Operator;
use support::pods::ready_pods;
use support::{create_ready_node, kubectl, wait, with_namespace};

const LIMIT: Duration = Duration::from_secs(60);

#[tokio::test]
async fn kubectl_drain_without_a_pdb_kills_the_lone_pod_without_the_webhook_and_moves_it_with_zero_downtime_with_it()
 {
    with_namespace(|client, ns| async move {
        let (a, b) = (format!("{ns}-a"), format!("{ns}-b"));
        create_ready_node(&client, &ns, &a).await;
        let pod = deploy_on(&client, &ns, lone(&ns, "web").starts_in("2s"), &a).await;
        create_ready_node(&client, &ns, &b).await;

        // Without the webhook: the eviction is allowed at once, the pod dies, and the
        // replacement takes its two seconds to become Ready.
        let sampler = Sampler::start(&client, &ns, &["web"]);
        let (ok_without, secs_without, stderr) = drain(&a, "60s").await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let without = sampler.finish().await;
        assert!(ok_without, "{stderr}");
        let out = kubectl().args(["uncordon", &a]).output().unwrap();
        assert!(out.status.success());
        let moved = wait::for_some("the replacement on the other node", LIMIT, || async {
            let ready = ready_pods(&client, &ns, "web").await;
            (ready.len() == 1 && node_of(&ready[0]).as_deref() == Some(b.as_str()))
                .then(|| ready[0].clone())
        })
        .await;
        assert_ne!(moved.metadata.uid, pod.metadata.uid);

        // With the webhook (on by default; no PDB, no window): the drain of the other node
        // is held while the Deployment rolls out, then finds the old pod gone.
        let op = Operator::intercepting(&ns, &[]).await;
        let moved_name = moved.metadata.name.clone().unwrap();
        until_in_effect(&client, &op, &ns, &moved_name).await;
        // kubectl drain cordons and evicts within milliseconds; the answer reads the caches, so
        // the cordon must have reached them first (docs/interception.md, "Known limits"). The
        // drain watcher reads the same node cache: its decision for the pod on the cordoned
        // node is the evidence.
        cordon(&b);
        until_cordon_seen(&op, 0.0).await;
        let sampler = Sampler::start(&client, &ns, &["web"]);
        let (ok_with, secs_with, stderr) = drain(&b, "60s").await;
        let with = sampler.finish().await;

        println!("                        without webhook    with webhook");
        println!("drain finished          {ok_without:<18} {ok_with}");
        println!("drain seconds           {secs_without:<18.1} {secs_with:.1}");
        println!(
            "samples (100 ms)        {:<18} {}",
            without.rounds, with.rounds
        );
        println!(
            "samples w/o ready pod   {:<18} {}",
            without.downtime_samples(),
            with.downtime_samples()
        );
        assert!(
            without.downtime_samples() > 0,
            "the control must see the pod die"
        );
        assert!(ok_with, "the drain completes with the webhook: {stderr}");
        assert!(
            stderr.contains("denied the request"),
            "kubectl drain was held by the webhook: {stderr}"
        );
        assert_eq!(with.downtime_samples(), 0, "no sample without a ready pod");
        let ready = ready_pods(&client, &ns, "web").await;
        assert_eq!(ready.len(), 1);
        assert_eq!(node_of(&ready[0]).as_deref(), Some(a.as_str()));

        let metrics = op.metrics().await;
        assert!(metric(&metrics, "disruption_guard_intercept_denied_total") >= 1.0);
        assert_eq!(
            metric(
                &metrics,
                "disruption_guard_intercept_rollouts_total{result=\"rolled_out\"}"
            ),
            1.0
        );
        until_event(&client, &ns, "web", None, "RolledOutForEviction", "").await;
    })
    .await;
}

#[tokio::test]
async fn a_replay_of_cluster_autoscalers_drain_through_policy_v1beta1_every_10s_moves_the_pod_with_zero_downtime()
 {
    // A replay of what Cluster Autoscaler 1.36 does to a node it removes (not CA itself, whose
    // module is not available here): taint ToBeDeletedByClusterAutoscaler and cordon, then
    // wait --node-delete-delay-after-taint, then evict through policy/v1beta1 every 10 s until
    // the pod is gone (at most 2 minutes).
    with_namespace(|client, ns| async move {
        let (a, b) = (format!("{ns}-a"), format!("{ns}-b"));
        create_ready_node(&client, &ns, &a).await;
        let pod = deploy_on(&client, &ns, lone(&ns, "api").starts_in("1s"), &a).await;
        let name = pod.metadata.name.clone().unwrap();
        create_ready_node(&client, &ns, &b).await;
        let op = Operator::intercepting(&ns, &[]).await;
        until_in_effect(&client, &op, &ns, &name).await;

        let now = jiff::Timestamp::now().as_second().to_string();
        let out = kubectl()
            .args([
                "taint",
                "node",
                &a,
                &format!("ToBeDeletedByClusterAutoscaler={now}:NoSchedule"),
            ])
            .output()
            .unwrap();
        assert!(out.status.success());
        cordon(&a);
        // --node-delete-delay-after-taint (5 s by default) before the first eviction.
        tokio::time::sleep(Duration::from_secs(5)).await;

        let sampler = Sampler::start(&client, &ns, &["api"]);
        let started = Instant::now();
        let mut answers = Vec::new();
        loop {
            let (code, _) = evict_as(&client, &ns, &name, "v1beta1", None).await;
            answers.push(code);
            if code != 429 || started.elapsed() > Duration::from_secs(120) {
                break;
            }
            tokio::time::sleep(Duration::from_secs(10)).await;
        }
        wait::until("a ready pod on the other node", LIMIT, || async {
            let ready = ready_pods(&client, &ns, "api").await;
            ready.len() == 1 && node_of(&ready[0]).as_deref() == Some(b.as_str())
        })
        .await;
        let samples = sampler.finish().await;
        println!(
            "answers to the replayed evictions: {answers:?} over {:.1} s; {} of {} samples without a ready pod",
            started.elapsed().as_secs_f64(),
            samples.downtime_samples(),
            samples.rounds
        );
        assert_eq!(answers[0], 429, "the first eviction is held");
        assert_eq!(
            *answers.last().unwrap(),
            404,
            "a later retry finds the pod gone (the Deployment removed it)"
        );
        assert_eq!(samples.downtime_samples(), 0);
    })
    .await;
}

#[tokio::test]
async fn a_surge_pod_that_never_becomes_ready_holds_the_eviction_only_until_the_timeout() {
    with_namespace(|client, ns| async move {
        let a = format!("{ns}-a");
        create_ready_node(&client, &ns, &a).await;
        // Pinned to its node: once the node is cordoned the surge pod can never be scheduled.
        let app = support::fixtures::deployment("stuck")
            .node_selector("disruption-guard.io/test-node", &a);
        let pod = deploy_on(&client, &ns, app, &a).await;
        let name = pod.metadata.name.clone().unwrap();
        // Cordoned before the operator starts, so its caches hold the signal when it is ready.
        cordon(&a);
        let op = Operator::intercepting(&ns, &["--intercept-timeout=4s"]).await;
        until_in_effect(&client, &op, &ns, &name).await;

        let started = Instant::now();
        let mut held = 0;
        let let_through = loop {
            let (code, message) = evict(&client, &ns, &name, None).await;
            if code != 429 {
                break started.elapsed();
            }
            assert!(message.contains("denied the request"), "{message}");
            held += 1;
            assert!(started.elapsed() < LIMIT, "never let through");
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        println!(
            "held {held} times, let through after {:.1} s (--intercept-timeout=4s)",
            let_through.as_secs_f64()
        );
        assert!(held > 0, "the eviction was held first");
        // The hold is dated by the rollout's `restartedAt` (RFC 3339, whole seconds, so every
        // replica agrees on it): the timeout ends up to a second before 4 s after the first hold.
        assert!(let_through >= Duration::from_secs(3), "{let_through:?}");
        let metrics = op.metrics().await;
        assert_eq!(
            metric(&metrics, "disruption_guard_intercept_timeouts_total"),
            1.0
        );
        until_event(
            &client,
            &ns,
            &name,
            Some("Warning"),
            "EvictionAllowedAfterTimeout",
            "",
        )
        .await;
    })
    .await;
}

#[tokio::test]
async fn recreate_deployments_and_evictions_of_gone_or_other_pods_are_let_through_at_once() {
    with_namespace(|client, ns| async move {
        let a = format!("{ns}-a");
        create_ready_node(&client, &ns, &a).await;
        let recreate = deploy_on(&client, &ns, lone(&ns, "recreate").recreate(), &a).await;
        let surging = deploy_on(&client, &ns, lone(&ns, "surging").starts_in("1s"), &a).await;
        cordon(&a);
        let op = Operator::intercepting(&ns, &[]).await;
        let surging_name = surging.metadata.name.clone().unwrap();
        until_in_effect(&client, &op, &ns, &surging_name).await;

        // Another pod's UID as the precondition: the webhook lets it through (the API server
        // then refuses it with 409: the precondition failed), never 429.
        let (code, message) = evict(&client, &ns, &surging_name, Some("not-its-uid")).await;
        assert_eq!(code, 409, "{message}");
        // A pod that does not exist: 404, not 429.
        let (code, message) = evict(&client, &ns, "no-such-pod", None).await;
        assert_eq!(code, 404, "{message}");
        // A Recreate Deployment cannot be saved by a rollout: evicted at once.
        let name = recreate.metadata.name.clone().unwrap();
        let (code, message) = evict(&client, &ns, &name, None).await;
        assert_eq!(code, 201, "{message}");

        let metrics = op.metrics().await;
        for reason in ["uid_mismatch", "pod_gone", "recreate"] {
            assert_eq!(
                metric(
                    &metrics,
                    &format!("disruption_guard_intercept_allowed_total{{reason=\"{reason}\"}}")
                ),
                1.0,
                "{reason}"
            );
        }
        assert_eq!(
            metric(&metrics, "disruption_guard_intercept_denied_total"),
            0.0
        );
        until_event(
            &client,
            &ns,
            &name,
            Some("Warning"),
            "EvictionRolloutSkipped",
            "(recreate)",
        )
        .await;
    })
    .await;
}

#[tokio::test]
async fn with_the_operator_killed_an_eviction_is_answered_as_without_the_guard() {
    with_namespace(|client, ns| async move {
        let a = format!("{ns}-a");
        create_ready_node(&client, &ns, &a).await;
        let pod = deploy_on(&client, &ns, lone(&ns, "web"), &a).await;
        let name = pod.metadata.name.clone().unwrap();
        cordon(&a);
        let mut op = Operator::intercepting(&ns, &[]).await;
        until_in_effect(&client, &op, &ns, &name).await;
        op.kill();
        let registered = kubectl()
            .args([
                "get",
                "validatingwebhookconfiguration",
                op.webhook().unwrap(),
            ])
            .output()
            .unwrap();
        assert!(
            registered.status.success(),
            "the registration stays while the operator is down"
        );

        let started = Instant::now();
        let (code, message) = evict(&client, &ns, &name, None).await;
        let took = started.elapsed();
        println!(
            "eviction with the webhook registered and the operator SIGKILLed: {code} in {:.0} ms",
            took.as_secs_f64() * 1000.0
        );
        assert_eq!(code, 201, "allowed, as without the guard: {message}");
        assert!(
            took < Duration::from_secs(5),
            "bounded by the webhook's timeoutSeconds (5 s)"
        );
    })
    .await;
}

/// What cert-manager's self-signed Issuer writes for a Certificate: `tls.crt`, `tls.key` and
/// `ca.crt` (the certificate itself), here made with openssl for the loopback address.
fn cert_manager_like_secret(name: &str) -> k8s_openapi::api::core::v1::Secret {
    let dir = std::env::temp_dir().join(format!("dg-cert-{name}"));
    std::fs::create_dir_all(&dir).unwrap();
    let (key, cert) = (dir.join("tls.key"), dir.join("tls.crt"));
    let out = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args([
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=disruption-guard-webhook",
        ])
        .args(["-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (key, cert) = (std::fs::read(key).unwrap(), std::fs::read(cert).unwrap());
    let bytes = |b: &[u8]| k8s_openapi::ByteString(b.to_vec());
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "type": "kubernetes.io/tls",
    }))
    .map(|mut s: k8s_openapi::api::core::v1::Secret| {
        s.data = Some(
            [("tls.crt", &cert), ("tls.key", &key), ("ca.crt", &cert)]
                .into_iter()
                .map(|(k, v)| (k.to_string(), bytes(v)))
                .collect(),
        );
        s
    })
    .unwrap()
}

#[tokio::test]
async fn with_a_certificate_kept_by_cert_manager_the_webhook_serves_it_and_never_writes_it() {
    with_namespace(|client, ns| async move {
        let (a, b) = (format!("{ns}-a"), format!("{ns}-b"));
        create_ready_node(&client, &ns, &a).await;
        let pod = deploy_on(&client, &ns, lone(&ns, "web").starts_in("1s"), &a).await;
        let name = pod.metadata.name.clone().unwrap();
        create_ready_node(&client, &ns, &b).await;
        let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), &ns);
        // The Secret the chart names (its RBAC lets the operator read only that one).
        let secret_name = format!("{}-webhook-tls", support::chart_identity::fullname(&ns));
        let written = secrets
            .create(
                &PostParams::default(),
                &cert_manager_like_secret(&secret_name),
            )
            .await
            .unwrap();
        cordon(&a);
        let op = Operator::intercepting(&ns, &["--intercept-external-certificate"]).await;
        until_in_effect(&client, &op, &ns, &name).await;

        let (code, message) = evict(&client, &ns, &name, None).await;
        println!("eviction answered {code} over TLS with cert-manager's certificate: {message}");
        assert_eq!(code, 429, "{message}");
        let now = secrets.get(&secret_name).await.unwrap();
        assert_eq!(
            now.metadata.resource_version, written.metadata.resource_version,
            "the operator never writes a Secret kept elsewhere"
        );
    })
    .await;
}

#[tokio::test]
async fn over_the_rate_limit_an_eviction_is_let_through_untouched_and_counted() {
    with_namespace(|client, ns| async move {
        let a = format!("{ns}-a");
        create_ready_node(&client, &ns, &a).await;
        let pod = deploy_on(&client, &ns, lone(&ns, "web"), &a).await;
        let name = pod.metadata.name.clone().unwrap();
        cordon(&a);
        // One hold per second per requester (address, user, namespace), no burst: the same
        // user's second eviction within a second is over the limit.
        let op = Operator::intercepting(
            &ns,
            &["--intercept-rate-limit=1", "--intercept-rate-burst=1"],
        )
        .await;
        // The dry runs it sends are allowed from the caches and take no token.
        until_in_effect(&client, &op, &ns, &name).await;

        let (first, message) = evict(&client, &ns, &name, None).await;
        assert_eq!(
            first, 429,
            "within the limit the eviction is held: {message}"
        );
        let (second, message) = evict(&client, &ns, &name, None).await;
        assert_eq!(
            second, 201,
            "over the limit the eviction goes through, as without the guard: {message}"
        );
        let text = op.metrics().await;
        assert!(
            metric(
                &text,
                "disruption_guard_intercept_allowed_total{reason=\"rate_limited\"}"
            ) >= 1.0,
            "counted: {text}"
        );
    })
    .await;
}

/// The Deployment annotations that record one disruption of a node.
async fn disruption_records(client: &kube::Client, ns: &str, app: &str) -> Vec<String> {
    let d = Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(client.clone(), ns)
        .get(app)
        .await
        .unwrap();
    d.metadata
        .annotations
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| {
            k == "disruption-guard.io/rolled-out-for-node"
                || k == "disruption-guard.io/eviction-held-since"
        })
        .map(|(k, v)| format!("{k}={v}"))
        .collect()
}

#[tokio::test]
async fn a_second_drain_of_the_same_node_holds_the_returned_pod_again_and_rolls_out_anew_with_zero_downtime()
 {
    with_namespace(|client, ns| async move {
        let (a, b) = (format!("{ns}-a"), format!("{ns}-b"));
        create_ready_node(&client, &ns, &a).await;
        let pod = deploy_on(&client, &ns, lone(&ns, "web").starts_in("2s"), &a).await;
        create_ready_node(&client, &ns, &b).await;
        let op = Operator::intercepting(&ns, &[]).await;
        until_in_effect(&client, &op, &ns, pod.metadata.name.as_deref().unwrap()).await;
        let rollouts = || async {
            metric(
                &op.metrics().await,
                "disruption_guard_intercept_rollouts_total{result=\"rolled_out\"}",
            )
        };
        let saw_cordon = |count: f64| until_cordon_seen(&op, count);
        let decisions = || async {
            metric(
                &op.metrics().await,
                "disruption_guard_drain_decisions_total{decision=\"ignore\"}",
            )
        };

        // First drain of a: held, rolled out, the pod moves to b.
        let before = decisions().await;
        cordon(&a);
        saw_cordon(before).await;
        let sampler = Sampler::start(&client, &ns, &["web"]);
        let (ok, _, stderr) = drain(&a, "60s").await;
        let first = sampler.finish().await;
        assert!(ok && stderr.contains("denied the request"), "{stderr}");
        assert_eq!(first.downtime_samples(), 0);
        assert_eq!(rollouts().await, 1.0);
        assert!(!disruption_records(&client, &ns, "web").await.is_empty());

        // a comes back; its disruption is over, and so are its records.
        let out = kubectl().args(["uncordon", &a]).output().unwrap();
        assert!(out.status.success());
        wait::until_empty(
            "the records of a's first disruption to end after the uncordon",
            Duration::from_secs(30),
            || disruption_records(&client, &ns, "web"),
        )
        .await;

        // The pod returns to a: b is cordoned while it is replaced, then uncordoned.
        cordon(&b);
        let on_b = ready_pods(&client, &ns, "web").await;
        assert_eq!(node_of(&on_b[0]).as_deref(), Some(b.as_str()));
        let out = kubectl()
            .args([
                "delete",
                "pod",
                "-n",
                &ns,
                on_b[0].metadata.name.as_deref().unwrap(),
            ])
            .output()
            .unwrap();
        assert!(out.status.success());
        let back = wait::for_some("the pod back on a", LIMIT, || async {
            let ready = ready_pods(&client, &ns, "web").await;
            (ready.len() == 1 && node_of(&ready[0]).as_deref() == Some(a.as_str()))
                .then(|| ready[0].clone())
        })
        .await;
        let out = kubectl().args(["uncordon", &b]).output().unwrap();
        assert!(out.status.success());
        wait::until_empty(
            "the cordon of b to leave no record",
            Duration::from_secs(30),
            || disruption_records(&client, &ns, "web"),
        )
        .await;

        // Second drain of a: held again, a new rollout, no gap.
        let before = decisions().await;
        cordon(&a);
        saw_cordon(before).await;
        let sampler = Sampler::start(&client, &ns, &["web"]);
        let (ok, secs, stderr) = drain(&a, "60s").await;
        let second = sampler.finish().await;
        println!(
            "second drain: finished {ok} in {secs:.1} s, {} of {} samples without a ready pod",
            second.downtime_samples(),
            second.rounds
        );
        assert!(ok, "{stderr}");
        assert!(
            stderr.contains("denied the request"),
            "the returned pod was held again: {stderr}"
        );
        assert_eq!(rollouts().await, 2.0, "a new rollout for the second drain");
        assert_eq!(
            second.downtime_samples(),
            0,
            "no sample without a ready pod"
        );
        let ready = ready_pods(&client, &ns, "web").await;
        assert_eq!(ready.len(), 1);
        assert_ne!(ready[0].metadata.uid, back.metadata.uid);
        assert_eq!(node_of(&ready[0]).as_deref(), Some(b.as_str()));
    })
    .await;
}

/// A ValidatingAdmissionPolicy that refuses every change of a pod template of the
/// Deployments in `ns` (as a policy engine might): the rollout patch fails, a metadata patch
/// goes through. Cluster-scoped: removed by the returned guard.
struct FrozenTemplates(String);

impl FrozenTemplates {
    fn apply(ns: &str) -> FrozenTemplates {
        let name = format!("{ns}-frozen-templates");
        let manifest = format!(
            r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: {name}}}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - apiGroups: [apps]
        apiVersions: [v1]
        operations: [UPDATE]
        resources: [deployments]
  validations:
    - expression: object.spec.template == oldObject.spec.template
      message: pod templates are frozen here
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: {name}}}
spec:
  policyName: {name}
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels: {{kubernetes.io/metadata.name: {ns}}}
"#
        );
        let mut child = kubectl()
            .args(["apply", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write as _;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(manifest.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        FrozenTemplates(name)
    }
}

impl Drop for FrozenTemplates {
    fn drop(&mut self) {
        for kind in [
            "validatingadmissionpolicybinding",
            "validatingadmissionpolicy",
        ] {
            let _ = kubectl()
                .args(["delete", kind, &self.0, "--ignore-not-found"])
                .output();
        }
    }
}

#[tokio::test]
async fn a_held_eviction_is_let_through_on_time_although_the_operator_restarts_every_20s_and_the_rollout_patch_keeps_failing()
 {
    with_namespace(|client, ns| async move {
        let a = format!("{ns}-a");
        create_ready_node(&client, &ns, &a).await;
        let pod = deploy_on(&client, &ns, lone(&ns, "frozen").starts_in("1s"), &a).await;
        let name = pod.metadata.name.clone().unwrap();
        let _policy = FrozenTemplates::apply(&ns);
        // The policy is in force once a template change is refused (a server-side dry run
        // goes through admission and changes nothing).
        wait::until("the policy to refuse template changes", LIMIT, || async {
            let out = kubectl()
                .args([
                    "patch",
                    "--dry-run=server",
                    "-n",
                    &ns,
                    "deployment/frozen",
                    "-p",
                    r#"{"spec":{"template":{"metadata":{"annotations":{"probe":"1"}}}}}"#,
                ])
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stderr).contains("pod templates are frozen")
        })
        .await;
        cordon(&a);
        let timeout = Duration::from_secs(45);
        let mut op = Operator::intercepting(&ns, &["--intercept-timeout=45s"]).await;
        until_in_effect(&client, &op, &ns, &name).await;

        // Evictions every 2 s, as a drainer retries; the operator is killed and started again
        // every 20 s between two of them (never while one is under review: a dead webhook
        // fails open, which is another test's subject).
        let started = Instant::now();
        let mut last_restart = Instant::now();
        let (mut held, mut restarts) = (0, 0);
        let mut first_hold = None;
        let let_through = loop {
            if last_restart.elapsed() >= Duration::from_secs(20) {
                op.restart().await;
                until_in_effect(&client, &op, &ns, &name).await;
                restarts += 1;
                last_restart = Instant::now();
            }
            let (code, message) = evict(&client, &ns, &name, None).await;
            if code != 429 {
                assert_eq!(code, 201, "{message}");
                break first_hold.map(|t: Instant| t.elapsed());
            }
            assert!(message.contains("denied the request"), "{message}");
            first_hold.get_or_insert_with(Instant::now);
            held += 1;
            assert!(
                started.elapsed() < Duration::from_secs(150),
                "still held after {:?} ({held} denies, {restarts} restarts): the hold outlived \
                 --intercept-timeout=45s",
                started.elapsed()
            );
            tokio::time::sleep(Duration::from_secs(2)).await;
        };
        let let_through = let_through.expect("the eviction was held first");
        println!(
            "held {held} times over {restarts} restarts, let through {:.1} s after the first \
             hold (--intercept-timeout=45s)",
            let_through.as_secs_f64()
        );
        assert!(restarts >= 2, "the hold spanned restarts");
        // Not before the timeout (the record is dated by the operator's first deny, a moment
        // before this test saw it), and not later than a retry plus a restart after it.
        assert!(
            let_through >= timeout - Duration::from_secs(1),
            "{let_through:?}"
        );
        assert!(
            let_through <= timeout + Duration::from_secs(12),
            "{let_through:?}"
        );
        let records = disruption_records(&client, &ns, "frozen").await;
        assert!(
            records
                .iter()
                .any(|r| r.starts_with("disruption-guard.io/eviction-held-since=")),
            "{records:?}"
        );
        assert!(
            !records
                .iter()
                .any(|r| r.starts_with("disruption-guard.io/rolled-out-for-node=")),
            "the rollout patch never went through: {records:?}"
        );
    })
    .await;
}
