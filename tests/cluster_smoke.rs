//! Smoke tests proving the local test cluster is real: scheduling, readiness, PDB status, the
//! Eviction API, garbage collection and `kubectl drain` all behave as in a real cluster.

mod support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, EvictParams, PostParams};
use kube::{Api, Client};
use support::fixtures::{deployment, pdb_max_unavailable_zero};
use support::pods::ready_pod;
use support::{wait, with_namespace};

const LIMIT: Duration = Duration::from_secs(30);

async fn pdb_settled(client: &Client, ns: &str, name: &str, expected_healthy: i32) {
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), ns);
    wait::until(
        "the disruption controller to compute the PDB status",
        LIMIT,
        || async {
            let Ok(pdb) = pdbs.get(name).await else {
                return false;
            };
            let Some(status) = pdb.status else {
                return false;
            };
            status.observed_generation == pdb.metadata.generation
                && status.current_healthy == expected_healthy
        },
    )
    .await;
}

#[tokio::test]
async fn a_one_replica_deployment_gets_a_pod_scheduled_on_a_kwok_node_that_becomes_ready() {
    with_namespace(|client, ns| async move {
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        deployments
            .create(&PostParams::default(), &deployment("web").build())
            .await
            .unwrap();

        let pod = ready_pod(&client, &ns, "web").await;
        let node_name = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .expect("scheduled");
        let node = Api::<Node>::all(client.clone())
            .get(&node_name)
            .await
            .unwrap();
        let annotations = node.metadata.annotations.unwrap_or_default();
        assert_eq!(
            annotations.get("kwok.x-k8s.io/node").map(String::as_str),
            Some("fake")
        );
        assert!(
            pod.status.and_then(|s| s.pod_ip).is_some(),
            "kwok assigns a pod IP"
        );
        assert!(
            pod.metadata
                .owner_references
                .unwrap_or_default()
                .iter()
                .any(|o| o.kind == "ReplicaSet"),
            "the pod comes from a ReplicaSet the deployment controller made"
        );
    })
    .await;
}

#[tokio::test]
async fn eviction_is_refused_with_429_under_a_max_unavailable_zero_pdb_and_allowed_without() {
    with_namespace(|client, ns| async move {
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns);
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        deployments
            .create(&PostParams::default(), &deployment("api").build())
            .await
            .unwrap();
        let pod = ready_pod(&client, &ns, "api").await;
        pdbs.create(
            &PostParams::default(),
            &pdb_max_unavailable_zero("api", "api"),
        )
        .await
        .unwrap();
        pdb_settled(&client, &ns, "api", 1).await;
        let pdb = pdbs.get("api").await.unwrap();
        assert_eq!(pdb.status.unwrap().disruptions_allowed, 0);

        let name = pod.metadata.name.clone().unwrap();
        match pods.evict(&name, &EvictParams::default()).await {
            Err(kube::Error::Api(status)) => assert_eq!(status.code, 429, "{status:?}"),
            other => panic!("expected 429 from the Eviction API, got {other:?}"),
        }

        pdbs.delete("api", &DeleteParams::default()).await.unwrap();
        wait::until("the eviction to be allowed", LIMIT, || async {
            pods.evict(&name, &EvictParams::default()).await.is_ok()
        })
        .await;
        wait::until("the evicted pod to go", LIMIT, || async {
            pods.get_opt(&name)
                .await
                .unwrap()
                .is_none_or(|p| p.metadata.deletion_timestamp.is_some())
        })
        .await;
    })
    .await;
}

#[tokio::test]
async fn deleting_an_owner_makes_garbage_collection_delete_its_dependent() {
    with_namespace(|client, ns| async move {
        let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
        let owner: ConfigMap =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "owner"}})).unwrap();
        let owner = configmaps
            .create(&PostParams::default(), &owner)
            .await
            .unwrap();
        let dependent: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "dependent",
                "ownerReferences": [{
                    "apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                    "uid": owner.metadata.uid.unwrap()
                }]
            }
        }))
        .unwrap();
        configmaps
            .create(&PostParams::default(), &dependent)
            .await
            .unwrap();

        configmaps
            .delete("owner", &DeleteParams::background())
            .await
            .unwrap();
        wait::until(
            "the garbage collector to delete the dependent",
            LIMIT,
            || async { configmaps.get_opt("dependent").await.unwrap().is_none() },
        )
        .await;
    })
    .await;
}

#[tokio::test]
async fn kubectl_drain_blocks_on_the_pdb_and_finishes_once_the_pdb_is_gone() {
    with_namespace(|client, ns| async move {
        let node = format!("{ns}-n0");
        support::create_ready_node(&client, &ns, &node).await;
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns);
        let app = deployment("db")
            .node_selector("disruption-guard.io/test-node", &node)
            .build();
        deployments
            .create(&PostParams::default(), &app)
            .await
            .unwrap();
        ready_pod(&client, &ns, "db").await;
        pdbs.create(
            &PostParams::default(),
            &pdb_max_unavailable_zero("db", "db"),
        )
        .await
        .unwrap();
        pdb_settled(&client, &ns, "db", 1).await;

        let blocked = support::kubectl()
            .args([
                "drain",
                &node,
                "--ignore-daemonsets",
                "--delete-emptydir-data",
                "--timeout=5s",
            ])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&blocked.stderr);
        assert!(
            !blocked.status.success(),
            "drain must not finish while the PDB blocks it"
        );
        assert!(
            stderr.contains("disruption budget"),
            "drain reports the PDB: {stderr}"
        );

        let drain = tokio::task::spawn_blocking(move || {
            support::kubectl()
                .args([
                    "drain",
                    &node,
                    "--ignore-daemonsets",
                    "--delete-emptydir-data",
                    "--timeout=60s",
                ])
                .output()
                .unwrap()
        });
        tokio::time::sleep(Duration::from_secs(2)).await;
        pdbs.delete("db", &DeleteParams::default()).await.unwrap();
        let out = drain.await.unwrap();
        assert!(
            out.status.success(),
            "drain finishes once the PDB is gone: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    })
    .await;
}
