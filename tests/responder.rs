//! The EvictionRequest responder `disruption-guard.io/rollout` against the real 1.38
//! controllers (`evictionrequest-controller`, `imperative-eviction-responder-controller`): the
//! test acts as a requester (an EvictionRequest for a pod whose template lists the responder),
//! and the guard rolls a lone replica's Deployment out without a sample lacking a Ready pod, or
//! hands a pod a rollout cannot save over to the imperative evictor. With the gate off (the
//! default cluster) the responder idles. The chart's RBAC and admission policy are enough for
//! it: one test runs it as the chart's ServiceAccount.
//!
//! The 1.38 cluster: `DISRUPTION_GUARD_CLUSTER_DIR=$PWD/.cluster/k138 tests/cluster/up
//! --kubernetes 1.38.0-beta.0 --feature-gates EvictionRequestAPI=true`. Each test says why it
//! skips when the cluster it needs is not the one `KUBECONFIG` points to.

mod support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::{Api, Client};
use serde_json::{Value, json};
use support::chart_identity::ChartIdentity;
use support::drain::{Sampler, cordon, lone};
use support::operator::Operator;
use support::pods::ready_pods;
use support::{create_ready_node, kubectl, run_with_input, wait, with_namespace};

const LIMIT: Duration = Duration::from_secs(90);
const RESPONDER: &str = "disruption-guard.io/rollout";
const REQUESTER: &str = "test.disruption-guard.io/requester";

/// Whether the cluster serves `lifecycle.k8s.io/v1alpha1` (the gate on and the group enabled).
async fn served(client: &Client) -> bool {
    client
        .list_api_group_resources("lifecycle.k8s.io/v1alpha1")
        .await
        .is_ok_and(|l| l.resources.iter().any(|r| r.name == "evictionrequests"))
}

/// Whether a test skips, saying why: the cluster does not serve `lifecycle.k8s.io/v1alpha1`.
async fn skips(client: &Client) -> bool {
    let skip = !served(client).await;
    if skip {
        println!(
            "skipped: the cluster does not serve lifecycle.k8s.io/v1alpha1 (start it with --kubernetes 1.38.0-beta.0 --feature-gates EvictionRequestAPI=true)"
        );
    }
    skip
}

/// Two Ready nodes and a lone replica `web` whose template lists the responder: its Ready pod.
async fn lone_web_listing_the_responder(client: &Client, ns: &str) -> Pod {
    create_ready_node(client, ns, &format!("{ns}-a")).await;
    create_ready_node(client, ns, &format!("{ns}-b")).await;
    let mut web = serde_json::to_value(lone(ns, "web").starts_in("2s").build()).unwrap();
    web["metadata"]["namespace"] = json!(ns);
    apply(&listing_responder(web));
    ready_pod(client, ns, "web").await
}

fn api(client: &Client, ns: &str, kind: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("lifecycle.k8s.io", "v1alpha1", kind);
    let plural = format!("{}s", kind.to_lowercase());
    Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::from_gvk_with_plural(&gvk, &plural),
    )
}

fn apply(manifest: &Value) {
    let mut cmd = kubectl();
    cmd.args(["apply", "-f", "-"]);
    let out = run_with_input(cmd, manifest.to_string().as_bytes());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Adds the responder to a workload's pod template.
fn listing_responder(mut workload: Value) -> Value {
    workload["spec"]["template"]["spec"]["evictionResponders"] =
        json!([{"name": RESPONDER, "priority": 5000}]);
    workload
}

/// The one pod of `app=<app>`, once Ready.
async fn ready_pod(client: &Client, ns: &str, app: &str) -> Pod {
    wait::for_some("a Ready pod", LIMIT, || async {
        ready_pods(client, ns, app).await.into_iter().next()
    })
    .await
}

/// The test as a requester: an EvictionRequest for `pod`.
async fn request_eviction(client: &Client, ns: &str, pod: &Pod) -> String {
    let name = format!("evict-{}", pod.metadata.name.as_deref().unwrap());
    let request: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "lifecycle.k8s.io/v1alpha1", "kind": "EvictionRequest",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "target": {"pod": {"name": pod.metadata.name, "uid": pod.metadata.uid}},
            "requester": REQUESTER, "intent": "Eviction",
        }
    }))
    .unwrap();
    api(client, ns, "EvictionRequest")
        .create(&Default::default(), &request)
        .await
        .unwrap();
    name
}

/// Status condition `type_` of `obj` when it is True: its reason.
fn true_condition(obj: &DynamicObject, type_: &str) -> Option<String> {
    obj.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_ && c["status"] == "True")
        .map(|c| c["reason"].as_str().unwrap_or_default().to_string())
}

/// The guard's entry in the pod's Eviction.
async fn our_entry(client: &Client, ns: &str, pod: &str) -> Option<Value> {
    let list = api(client, ns, "Eviction")
        .list(&Default::default())
        .await
        .ok()?;
    list.items
        .iter()
        .filter(|e| e.data["spec"]["target"]["pod"]["name"] == pod)
        .flat_map(|e| {
            e.data["status"]["responders"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .find(|r| r["name"] == RESPONDER)
}

async fn until_evicted(client: &Client, ns: &str, request: &str) -> String {
    let api = api(client, ns, "EvictionRequest");
    wait::for_some("the EvictionRequest ends TargetEvicted", LIMIT, || async {
        let obj = api.get(request).await.ok()?;
        if let Some(reason) = true_condition(&obj, "Failed") {
            panic!(
                "the EvictionRequest failed: {reason}: {:?}",
                obj.data["status"]
            );
        }
        true_condition(&obj, "TargetEvicted")
    })
    .await
}

#[tokio::test]
async fn a_lone_replica_listing_the_responder_is_rolled_out_with_zero_downtime() {
    with_namespace(|client, ns| async move {
        if skips(&client).await {
            return;
        }
        let op = Operator::start(&ns, &["--respond-evictions"]).await;
        let pod = lone_web_listing_the_responder(&client, &ns).await;

        let sampler = Sampler::start(&client, &ns, &["web"]);
        let request = request_eviction(&client, &ns, &pod).await;
        let reason = until_evicted(&client, &ns, &request).await;
        let samples = sampler.finish().await;
        let entry = our_entry(&client, &ns, pod.metadata.name.as_deref().unwrap())
            .await
            .expect("the guard's entry");
        println!(
            "TargetEvicted reason {reason}; samples {}, without a ready pod {}; entry {entry}",
            samples.rounds,
            samples.downtime_samples()
        );
        assert_eq!(samples.downtime_samples(), 0, "{samples:?}");
        assert!(entry["completionTime"].is_string(), "{entry}");
        assert!(entry["heartbeatTime"].is_string(), "{entry}");
        let d = Api::<Deployment>::namespaced(client.clone(), &ns)
            .get("web")
            .await
            .unwrap();
        let restarted = d
            .spec
            .unwrap()
            .template
            .metadata
            .unwrap()
            .annotations
            .unwrap_or_default();
        assert!(
            restarted.contains_key("kubectl.kubernetes.io/restartedAt"),
            "{restarted:?}"
        );
        let ready = ready_pods(&client, &ns, "web").await;
        assert_eq!(ready.len(), 1);
        assert_ne!(ready[0].metadata.uid, pod.metadata.uid);
        let metrics = op.metrics().await;
        assert!(
            metrics.contains("disruption_guard_respond_responses_total{outcome=\"completed\"} 1"),
            "{metrics}"
        );
    })
    .await;
}

#[tokio::test]
async fn the_responder_rolls_out_with_only_the_charts_rbac() {
    with_namespace(|client, ns| async move {
        if skips(&client).await {
            return;
        }
        // The chart's ServiceAccount, RBAC and admission policy with the responder enabled; the
        // operator as the chart starts it (leader election, the chart's flags for the responder).
        let identity = ChartIdentity::install_with(&ns, &["--set", "respond.enabled=true"]);
        let op = Operator::start_as(
            &ns,
            vec![
                format!("--namespaces={ns}"),
                "--insecure-no-auth".into(),
                "--respond-evictions".into(),
                "--leader-election".into(),
                format!("--leader-election-namespace={ns}"),
                "--leader-election-identity=chart-sa".into(),
            ],
            identity.kubeconfig.clone(),
        )
        .await;
        let pod = lone_web_listing_the_responder(&client, &ns).await;

        let request = request_eviction(&client, &ns, &pod).await;
        until_evicted(&client, &ns, &request).await;
        let entry = our_entry(&client, &ns, pod.metadata.name.as_deref().unwrap())
            .await
            .expect("the guard's entry");
        assert!(entry["completionTime"].is_string(), "{entry}");
        assert!(
            restarted_at(&client, &ns, "web").await.is_some(),
            "the responder rolled the Deployment out"
        );
        let log = op.log_text();
        assert!(
            !log.to_lowercase().contains("forbidden"),
            "a request was forbidden:\n{log}"
        );
    })
    .await;
}

/// The Deployment's `restartedAt`, when set.
async fn restarted_at(client: &Client, ns: &str, name: &str) -> Option<String> {
    let d = Api::<Deployment>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .ok()?;
    d.spec?
        .template
        .metadata?
        .annotations?
        .get("kubectl.kubernetes.io/restartedAt")
        .cloned()
}

/// The controller interrupts a responder only after 20 minutes without a heartbeat
/// (`ResponderHeartbeatTimeout`, a constant: no flag sets it), too long for a test; what a test
/// can show is that a guard killed mid-response and started again picks the response up from
/// the Eviction: no second rollout, heartbeats again, completes.
#[tokio::test]
async fn a_guard_killed_mid_response_resumes_it_after_a_restart() {
    with_namespace(|client, ns| async move {
        if skips(&client).await {
            return;
        }
        create_ready_node(&client, &ns, &format!("{ns}-a")).await;
        let mut op = Operator::start(&ns, &["--respond-evictions"]).await;
        // The new pod takes 30 s to become Ready: longer than one heartbeat interval.
        let mut web = serde_json::to_value(lone(&ns, "web").build()).unwrap();
        web["metadata"]["namespace"] = json!(ns);
        apply(&listing_responder(web));
        let pod = ready_pod(&client, &ns, "web").await;
        let slow = json!({"spec": {"template": {"metadata": {"annotations":
            {"pod-ready.stage.kwok.x-k8s.io/delay": "30s"}}}}});
        let patched = kubectl()
            .args([
                "patch",
                "deployment",
                "web",
                "-n",
                &ns,
                "--type=merge",
                "-p",
                &slow.to_string(),
            ])
            .output()
            .unwrap();
        assert!(patched.status.success());
        // That patch rolled out by itself: wait for its pod, the one the request targets.
        let pod = wait::for_some("the slow template's pod Ready", LIMIT, || async {
            let ready = ready_pods(&client, &ns, "web").await;
            (ready.len() == 1 && ready[0].metadata.uid != pod.metadata.uid)
                .then(|| ready[0].clone())
        })
        .await;
        let name = pod.metadata.name.clone().unwrap();
        let sampler = Sampler::start(&client, &ns, &["web"]);
        let request = request_eviction(&client, &ns, &pod).await;
        let first = wait::for_some("the first progress report", LIMIT, || async {
            our_entry(&client, &ns, &name).await?["heartbeatTime"]
                .as_str()
                .map(String::from)
        })
        .await;
        let rolled = restarted_at(&client, &ns, "web")
            .await
            .expect("the rollout");
        op.kill();
        op.restart().await;
        let later = wait::for_some("a heartbeat from the restarted guard", LIMIT, || async {
            let entry = our_entry(&client, &ns, &name).await?;
            let beat = entry["heartbeatTime"].as_str()?.to_string();
            (beat > first).then_some(entry)
        })
        .await;
        let reason = until_evicted(&client, &ns, &request).await;
        let samples = sampler.finish().await;
        println!("first heartbeat {first}; after the restart {later}; TargetEvicted {reason}");
        assert_eq!(
            restarted_at(&client, &ns, "web").await.as_deref(),
            Some(rolled.as_str())
        );
        assert_eq!(samples.downtime_samples(), 0, "{samples:?}");
        let entry = our_entry(&client, &ns, &name)
            .await
            .expect("the guard's entry");
        assert!(entry["completionTime"].is_string(), "{entry}");
    })
    .await;
}

/// A withdrawn request (its only requester says `Withdrawn`) stops the response: the guard
/// counts it and writes nothing more, not even a completion.
#[tokio::test]
async fn a_withdrawn_request_stops_the_response() {
    with_namespace(|client, ns| async move {
        if skips(&client).await {
            return;
        }
        let node = format!("{ns}-a");
        create_ready_node(&client, &ns, &node).await;
        let op = Operator::start(&ns, &["--respond-evictions"]).await;
        let mut web = serde_json::to_value(lone(&ns, "web").build()).unwrap();
        web["metadata"]["namespace"] = json!(ns);
        apply(&listing_responder(web));
        let pod = ready_pod(&client, &ns, "web").await;
        let name = pod.metadata.name.clone().unwrap();
        // The only node is cordoned: the rollout's new pod stays Pending, the response open.
        cordon(&node);
        let request = request_eviction(&client, &ns, &pod).await;
        wait::for_some("the first progress report", LIMIT, || async {
            our_entry(&client, &ns, &name).await?["heartbeatTime"]
                .as_str()
                .map(String::from)
        })
        .await;
        let withdraw = json!({"spec": {"intent": "Withdrawn"}});
        api(&client, &ns, "EvictionRequest")
            .patch(
                &request,
                &Default::default(),
                &kube::api::Patch::Merge(&withdraw),
            )
            .await
            .unwrap();
        wait::until("the guard counts the withdrawal", LIMIT, || async {
            op.metrics()
                .await
                .contains("disruption_guard_respond_responses_total{outcome=\"withdrawn\"} 1")
        })
        .await;
        let entry = our_entry(&client, &ns, &name)
            .await
            .expect("the guard's entry");
        assert!(entry.get("completionTime").is_none(), "{entry}");
        assert!(
            op.log_text()
                .contains("EvictionRequest withdrawn: response stopped")
        );
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        assert!(
            pods.get_opt(&name).await.unwrap().is_some(),
            "the pod stays"
        );
    })
    .await;
}

#[tokio::test]
async fn a_statefulset_pod_is_handed_over_to_the_imperative_evictor() {
    with_namespace(|client, ns| async move {
        if skips(&client).await {
            return;
        }
        create_ready_node(&client, &ns, &format!("{ns}-a")).await;
        let op = Operator::start(&ns, &["--respond-evictions"]).await;
        let db = json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "db", "namespace": ns},
            "spec": {
                "replicas": 1, "serviceName": "db",
                "selector": {"matchLabels": {"app": "db"}},
                "template": {
                    "metadata": {"labels": {"app": "db"}},
                    "spec": {
                        "nodeSelector": {"disruption-guard.io/test": ns},
                        "terminationGracePeriodSeconds": 0,
                        "containers": [{"name": "app", "image": "registry.invalid/db:1"}]
                    }
                }
            }
        });
        apply(&listing_responder(db));
        let pod = ready_pod(&client, &ns, "db").await;
        let request = request_eviction(&client, &ns, &pod).await;
        until_evicted(&client, &ns, &request).await;
        let entry = our_entry(&client, &ns, "db-0")
            .await
            .expect("the guard's entry");
        let message = entry["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("stepping aside") && message.contains("statefulset"),
            "{entry}"
        );
        assert!(entry["completionTime"].is_string(), "{entry}");
        let metrics = op.metrics().await;
        assert!(
            metrics
                .contains("disruption_guard_respond_responses_total{outcome=\"stepped_aside\"} 1"),
            "{metrics}"
        );
    })
    .await;
}

#[tokio::test]
async fn with_the_gate_off_the_responder_idles_and_nothing_changes() {
    with_namespace(|client, ns| async move {
        if served(&client).await {
            println!("skipped: the cluster serves lifecycle.k8s.io/v1alpha1; this test needs the default cluster (gate off)");
            return;
        }
        let op = Operator::start(&ns, &["--respond-evictions"]).await;
        wait::until("the responder's idle line", LIMIT, || async {
            op.log_text().contains("EvictionRequest responder idle")
        })
        .await;
        assert!(!op.log_text().contains("EvictionRequest responder started"));
        let metrics = op.metrics().await;
        assert!(metrics.contains("disruption_guard_respond_responses_total{outcome=\"completed\"} 0"), "{metrics}");
    })
    .await;
}

/// A pod manifest in `ns`, pinned to the test's kwok nodes.
fn bare_pod(ns: &str, name: &str, home: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "nodeSelector": {"disruption-guard.io/test": home},
            "containers": [{"name": "app", "image": "registry.invalid/app:1"}]
        }
    })
}

/// The responders `kubectl create` (server-side dry run when `dry`) leaves on `pod`.
fn created_responders(pod: &Value, dry: bool) -> Value {
    let mut cmd = kubectl();
    cmd.args(["create", "-o", "json", "-f", "-"]);
    if dry {
        cmd.arg("--dry-run=server");
    }
    let out = run_with_input(cmd, pod.to_string().as_bytes());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let created: Value = serde_json::from_slice(&out.stdout).unwrap();
    created["spec"]["evictionResponders"].clone()
}

#[tokio::test]
async fn the_charts_admission_policy_lists_the_responder_in_labelled_namespaces_only() {
    with_namespace(|client, ns| async move {
        if !served(&client).await {
            println!("skipped: pods carry spec.evictionResponders only with the EvictionRequestAPI gate on");
            return;
        }
        let fullname = format!("dg-{}", &ns[ns.len().saturating_sub(8)..]);
        let helm = support::cached_tool("helm-v", "helm");
        let out = std::process::Command::new(helm)
            .args(["template", "guard", "--namespace", &ns, "--kube-version", "1.38.0"])
            .arg(support::repo_root().join("charts/disruption-guard"))
            .args(["--set", "respond.enabled=true", "--set", &format!("fullnameOverride={fullname}")])
            .args(["--show-only", "templates/eviction-responder-policy.yaml"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let mut cmd = kubectl();
        cmd.args(["apply", "-f", "-"]);
        let applied = run_with_input(cmd, &out.stdout);
        assert!(applied.status.success(), "{}", String::from_utf8_lossy(&applied.stderr));

        let other = format!("{ns}-other");
        let made = kubectl().args(["create", "namespace", &other]).output().unwrap();
        assert!(made.status.success());
        let labelled = kubectl()
            .args(["label", "namespace", &ns, "disruption-guard.io/eviction-responder=true"])
            .output()
            .unwrap();
        assert!(labelled.status.success());
        // The policy takes effect within a few seconds of its creation.
        wait::until("the policy in effect", LIMIT, || async {
            created_responders(&bare_pod(&ns, "probe", &ns), true).is_array()
        })
        .await;
        let here = created_responders(&bare_pod(&ns, "here", &ns), false);
        let elsewhere = created_responders(&bare_pod(&other, "elsewhere", &ns), false);
        let _ = kubectl().args(["delete", "namespace", &other, "--wait=false"]).output();
        for kind in ["mutatingadmissionpolicybinding", "mutatingadmissionpolicy"] {
            let name = format!("{fullname}-eviction-responder");
            let _ = kubectl().args(["delete", kind, &name]).output();
        }
        println!("labelled namespace: {here}; elsewhere: {elsewhere}");
        assert_eq!(here, json!([{"name": RESPONDER, "priority": 5000}]));
        assert!(elsewhere.is_null(), "{elsewhere}");
    })
    .await;
}
