//! An upgrade with windows open: the last landed version (one field manager and one PDB owner
//! reference per window) is replaced by this one with the same flags, as a chart upgrade
//! replaces the operator's image. The windows keep their protection through the upgrade,
//! every object is adopted by the namespace's manager and the per-window managers are released,
//! and closing the windows releases exactly what they protected.

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use serde_json::json;
use support::operator::Operator;
use support::windows::{
    close, guard_managers, is_ready, lone_pod_on_private_node, open, protected, until_ready,
    until_released, window,
};
use support::{previous, wait, with_namespace};

const LIMIT: Duration = Duration::from_secs(30);

#[tokio::test]
async fn an_upgrade_keeps_open_windows_protected_then_releases_exactly() {
    let old_binary = previous::binary();
    with_namespace(|client, ns| async move {
        let args = vec![
            format!("--namespaces={ns}"),
            "--insecure-no-auth".to_string(),
        ];
        let mut old = Operator::start_program(old_binary, &ns, "previous", args).await;
        let (node, pod) = lone_pod_on_private_node(&client, &ns, "api").await;
        let pod = pod.metadata.name.unwrap();
        let a = open(&client, &ns, &window("a", "api", "10m", json!({}))).await;
        let b = open(&client, &ns, &window("b", "api", "10m", json!({}))).await;
        until_ready(&client, &ns, "a", LIMIT).await;
        until_ready(&client, &ns, "b", LIMIT).await;
        let mut per_window: Vec<String> = [&a, &b]
            .iter()
            .map(|w| format!("disruption-guard/{}", w.metadata.uid.clone().unwrap()))
            .collect();
        per_window.sort();
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns);
        wait::until(
            "the previous version's per-window managers",
            LIMIT,
            || async {
                let mut on_pod = guard_managers(&pods.get(&pod).await.unwrap().metadata);
                on_pod.sort();
                let owners = pdbs
                    .get("api-dg")
                    .await
                    .map(|p| p.metadata.owner_references);
                on_pod == per_window && owners.is_ok_and(|o| o.is_some_and(|o| o.len() == 2))
            },
        )
        .await;
        old.kill();

        // The new version takes over; protection is checked all along until every object is
        // held by the namespace's manager alone.
        let _new = Operator::start(&ns, &[]).await;
        let ours = vec![format!("disruption-guard/{ns}")];
        let nodes: Api<Node> = Api::all(client.clone());
        let started = Instant::now();
        loop {
            assert!(
                protected(&client, &ns, &pod, &node).await,
                "pod and node protected"
            );
            let pdb = pdbs
                .get("api-dg")
                .await
                .expect("the PDB stays through the upgrade");
            let adopted = guard_managers(&pods.get(&pod).await.unwrap().metadata) == ours
                && guard_managers(&nodes.get(&node).await.unwrap().metadata) == ours
                && guard_managers(&pdb.metadata) == ours
                && pdb.metadata.owner_references.unwrap_or_default().is_empty();
            if adopted {
                break;
            }
            assert!(started.elapsed() < LIMIT, "adopted within {LIMIT:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        eprintln!(
            "adopted {:?} after the new version started",
            started.elapsed()
        );
        let windows =
            Api::<disruption_guard::resources::TestWindow>::namespaced(client.clone(), &ns);
        assert!(is_ready(&windows.get("a").await.unwrap()));
        assert!(is_ready(&windows.get("b").await.unwrap()));

        // One window closes: the other still wants everything. Then the last one: nothing of
        // the guard is left.
        close(&client, &ns, "a").await;
        wait::until("a released", LIMIT, || async {
            windows
                .get("a")
                .await
                .unwrap()
                .status
                .is_some_and(|s| s.is_released())
        })
        .await;
        assert!(
            protected(&client, &ns, &pod, &node).await,
            "b's protection stays"
        );
        assert!(pdbs.get("api-dg").await.is_ok());
        close(&client, &ns, "b").await;
        until_released(&client, &ns, &pod, &node, LIMIT).await;
    })
    .await;
}
