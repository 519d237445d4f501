//! What a tenant's large metadata costs the operator, against the real API server: a thousand
//! PodDisruptionBudgets in one namespace, each carrying 250 KB of annotations (the API server
//! allows 256 KB per object), a quarter of a gigabyte in all. The operator's caches keep only
//! the labels and annotations it reads, so its resident memory stays flat: measured before,
//! once its watch has seen every PDB, and after a restart has listed them, beside the bytes the
//! tenant stored (what a cache that kept them would hold).

mod support;

use std::time::{Duration, Instant};

use disruption_guard::resources::TestWindow;
use futures::StreamExt;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use support::operator::{Operator, ensure_crd};
use support::windows::{lone_pod_on_private_node, until_ready, window};
use support::{wait, with_namespace};

/// PDBs the tenant writes.
const PDBS: usize = 1000;
/// Bytes of annotations on each.
const ANNOTATION_BYTES: usize = 250_000;
/// How much the operator's resident memory may grow over its own baseline (MiB); keeping the
/// annotations would take about 240.
const FLAT_MIB: u64 = 20;

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

#[tokio::test]
async fn a_thousand_pdbs_with_250_kb_of_annotations_each_leave_the_operators_memory_flat() {
    ensure_crd();
    with_namespace(|client, ns| async move {
        let (_, _pod) = lone_pod_on_private_node(&client, &ns, "app").await;
        let mut operator = Operator::start(&ns, &[]).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (baseline, _) = operator.rss_kib();

        let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns);
        let note = "x".repeat(ANNOTATION_BYTES);
        let started = Instant::now();
        futures::stream::iter(0..PDBS)
            .map(|i| {
                let pdbs = pdbs.clone();
                // The last one covers the lone pod: a window reports it reused once the
                // operator's PDB cache holds it, and so every PDB created before it.
                let app = if i == PDBS - 1 { "app".to_string() } else { format!("none-{i}") };
                let pdb: PodDisruptionBudget = serde_json::from_value(json!({
                    "metadata": {"name": format!("big-{i:04}"), "annotations": {"note": note}},
                    "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": app}}},
                }))
                .unwrap();
                async move { pdbs.create(&PostParams::default(), &pdb).await.expect("creating a PDB") }
            })
            .buffer_unordered(4)
            .collect::<Vec<_>>()
            .await;
        let created = started.elapsed();

        support::windows::open(&client, &ns, &window("w", "app", "10m", json!({}))).await;
        let last = format!("big-{:04}", PDBS - 1);
        let windows: Api<TestWindow> = Api::namespaced(client.clone(), &ns);
        wait::until("the window to report the last PDB reused", Duration::from_secs(60), || async {
            windows.get("w").await.ok().and_then(|w| w.status).is_some_and(|s| {
                s.protected.reused_pdbs.contains(&last)
            })
        })
        .await;
        let (watched, watched_peak) = operator.rss_kib();

        operator.restart().await;
        until_ready(&client, &ns, "w", Duration::from_secs(60)).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (listed, listed_peak) = operator.rss_kib();

        let stored = (PDBS * ANNOTATION_BYTES) as u64 / 1024;
        eprintln!(
            "tenant memory: {PDBS} PDBs × {ANNOTATION_BYTES} bytes of annotations ({:.0} MiB stored, created in {created:.1?})\n\
             | operator RSS | MiB |\n|---|---|\n\
             | before the PDBs | {:.1} |\n\
             | after its watch saw them (peak) | {:.1} ({:.1}) |\n\
             | after a restart listed them (peak) | {:.1} ({:.1}) |",
            mib(stored),
            mib(baseline),
            mib(watched),
            mib(watched_peak),
            mib(listed),
            mib(listed_peak),
        );
        let flat = FLAT_MIB * 1024;
        assert!(
            watched < baseline + flat,
            "the watch kept the annotations: {:.1} MiB over a baseline of {:.1}",
            mib(watched.saturating_sub(baseline)),
            mib(baseline)
        );
        assert!(
            listed < baseline + flat,
            "the list kept the annotations: {:.1} MiB over a baseline of {:.1}",
            mib(listed.saturating_sub(baseline)),
            mib(baseline)
        );
    })
    .await;
}
