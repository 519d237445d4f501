//! One tenant's flood of evictions against the real cluster, and what it must not do: switch
//! the interception off for everyone else. The API server calls the webhook for every eviction,
//! of pods that exist or not, before it looks the pod up, and every review comes from the API
//! server's own address; so the webhook answers the reviews that cannot concern a lone replica
//! from its caches at no cost, and keys its rate limit by the requester (address, user,
//! namespace): a tenant's flood drains its own bucket and nobody else's.
//!
//! The limit is scaled down from its default (200 a second, bursts of 1,000) to 1 a second,
//! bursts of 5, so that a flood of a few hundred evictions is many times over it.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use support::drain::{Sampler, cordon, deploy_on, lone, metric, until_ready_elsewhere};
use support::fixtures::deployment;
use support::intercept::{evict, until_cordon_seen, until_in_effect};
use support::operator::Operator;
use support::{TEST_NAMESPACE_LABEL, create_ready_node, kubectl, wait, with_namespace};

const LIMIT: Duration = Duration::from_secs(60);
/// Evictions the tenant sends: of pods that do not exist, and of its own lone replica.
const FLOOD: usize = 320;
/// Evictions sent at once.
const AT_ONCE: usize = 8;

/// A namespace of the tenant's, deleted on drop.
struct TenantNamespace(String);

impl Drop for TenantNamespace {
    fn drop(&mut self) {
        let _ = kubectl()
            .args(["delete", "namespace", &self.0, "--wait=false"])
            .output();
    }
}

/// Creates namespace `name` (labelled as a test's) with a ServiceAccount `evictor` that may
/// read and evict pods there and nothing else, and returns a client authenticated as it.
async fn tenant(client: &kube::Client, name: &str) -> (TenantNamespace, kube::Client) {
    let ns: Namespace = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {TEST_NAMESPACE_LABEL: "true"}}
    }))
    .unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let guard = TenantNamespace(name.to_string());
    let rbac = format!(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: evictor, namespace: {name}}}\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: evictor, namespace: {name}}}\n\
         rules:\n- {{apiGroups: [''], resources: [pods], verbs: [get, list]}}\n\
         - {{apiGroups: [''], resources: [pods/eviction], verbs: [create]}}\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: evictor, namespace: {name}}}\n\
         roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: evictor}}\n\
         subjects:\n- {{kind: ServiceAccount, name: evictor, namespace: {name}}}\n"
    );
    let mut apply = kubectl();
    apply.args(["apply", "-f", "-"]);
    let out = support::run_with_input(apply, rbac.as_bytes());
    assert!(
        out.status.success(),
        "applying the tenant's RBAC: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let kubeconfig = support::chart_identity::token_kubeconfig(name, "evictor");
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig).unwrap(),
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    let mut config = config;
    // Its 429s are answers to count, not to retry.
    config.default_retry = false;
    (guard, kube::Client::try_from(config).unwrap())
}

#[tokio::test]
async fn one_tenants_flood_of_evictions_leaves_another_namespaces_lone_replica_held_and_moved_with_zero_downtime()
 {
    with_namespace(|client, ns| async move {
        let tenant_ns = format!("{ns}-tenant");
        let (_tenant_ns, tenant_client) = tenant(&client, &tenant_ns).await;
        let (a, b) = (format!("{ns}-a"), format!("{ns}-b"));
        create_ready_node(&client, &ns, &a).await;
        let victim = deploy_on(&client, &ns, lone(&ns, "web").starts_in("2s"), &a).await;
        let victim = victim.metadata.name.clone().unwrap();
        // The tenant's own lone replica, pinned to the node that will be cordoned: its
        // replacement cannot be scheduled, so its evictions are held (until the tenant's bucket
        // is empty) for as long as the flood lasts.
        let pinned = deployment("noise").node_selector("disruption-guard.io/test-node", &a);
        let own = deploy_on(&client, &tenant_ns, pinned, &a).await;
        let own = own.metadata.name.clone().unwrap();
        create_ready_node(&client, &ns, &b).await;
        let both = format!("{ns},{tenant_ns}");
        let op = Operator::intercepting_in(
            &ns,
            Some(&both),
            &["--intercept-rate-limit=1", "--intercept-rate-burst=5"],
        )
        .await;
        until_in_effect(&client, &op, &ns, &victim).await;
        cordon(&a);
        until_cordon_seen(&op, 0.0).await;

        // The tenant floods: evictions of pods that do not exist, and every tenth one of its
        // own lone replica on the cordoned node (held until its bucket is empty, then let
        // through; gone after that), AT_ONCE at a time.
        let sent = Arc::new(AtomicUsize::new(0));
        let flood = {
            let (sent, tenant_ns, own) = (sent.clone(), tenant_ns.clone(), own.clone());
            tokio::spawn(async move {
                let mut codes = std::collections::BTreeMap::<u16, usize>::new();
                for round in 0..FLOOD / AT_ONCE {
                    let batch = (0..AT_ONCE).map(|i| {
                        let n = round * AT_ONCE + i;
                        let pod = if n.is_multiple_of(10) {
                            own.clone()
                        } else {
                            format!("ghost-{n}")
                        };
                        let (client, ns) = (tenant_client.clone(), tenant_ns.clone());
                        async move { evict(&client, &ns, &pod, None).await.0 }
                    });
                    for code in futures::future::join_all(batch).await {
                        *codes.entry(code).or_default() += 1;
                    }
                    sent.fetch_add(AT_ONCE, Ordering::SeqCst);
                }
                codes
            })
        };
        // Well into the flood, a real eviction of another namespace's lone replica.
        wait::until("a third of the flood sent", LIMIT, || async {
            sent.load(Ordering::SeqCst) >= FLOOD / 3
        })
        .await;
        let sampler = Sampler::start(&client, &ns, &["web"]);
        let (code, message) = evict(&client, &ns, &victim, None).await;
        let codes = flood.await.unwrap();
        until_ready_elsewhere(&client, &ns, "web", &a, LIMIT).await;
        wait::until("the held pod to go", LIMIT, || async {
            let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), &ns);
            pods.get_opt(&victim).await.unwrap().is_none()
        })
        .await;
        let samples = sampler.finish().await;

        let metrics = op.metrics().await;
        let allowed = |reason: &str| {
            metric(
                &metrics,
                &format!("disruption_guard_intercept_allowed_total{{reason=\"{reason}\"}}"),
            )
        };
        println!("tenant's evictions by answer: {codes:?}");
        println!(
            "reviews {}, allowed pod_gone {}, rate_limited {}, denied {}",
            metric(&metrics, "disruption_guard_intercept_reviews_total"),
            allowed("pod_gone"),
            allowed("rate_limited"),
            metric(&metrics, "disruption_guard_intercept_denied_total"),
        );
        println!(
            "victim's eviction: {code}; samples {} without a ready pod {}",
            samples.rounds,
            samples.downtime_samples()
        );
        assert_eq!(
            code, 429,
            "the other namespace's eviction is held despite the flood: {message}"
        );
        assert_eq!(codes.values().sum::<usize>(), FLOOD);
        assert!(
            allowed("pod_gone") >= (FLOOD * 8 / 10) as f64,
            "the ghosts were answered from the cache"
        );
        assert!(
            allowed("rate_limited") >= 1.0,
            "the tenant went over its own limit"
        );
        assert_eq!(
            samples.downtime_samples(),
            0,
            "no sample without a ready pod"
        );
        assert!(
            metric(
                &metrics,
                "disruption_guard_intercept_rollouts_total{result=\"rolled_out\"}"
            ) >= 1.0
        );
        let _ = Api::<Namespace>::all(client.clone())
            .delete(&tenant_ns, &DeleteParams::background())
            .await;
    })
    .await;
}
