//! Figures, not assertions: how soon the drain watcher rolls a lone pod's Deployment out after
//! its node is disrupted, beside how soon a bare watch sees the disruption (the floor).
//!
//! Run: `DRAIN_BENCH_N=200 cargo test --test drain_bench -- --ignored --nocapture`

mod support;

use support::drain::{deploy_lone, lone, metric, signal_to_rollout};
use support::operator::Operator;
use support::stats::percentile;
use support::{create_ready_node, with_namespace};

/// `DRAIN_BENCH_N` (default 50) times, taint the node of a lone pod
/// `karpenter.sh/disrupted` and time, from just before the taint PATCH, (a) a bare node watch
/// in this process seeing the taint — the floor — and (b) a Deployment watch seeing the
/// operator's rollout patch. The pod ping-pongs between two private nodes; each round starts
/// once the previous rollout is complete and the PDB blocks again.
#[tokio::test]
#[ignore = "benchmark: prints figures"]
async fn signal_to_rollout_latency_beside_a_bare_watch() {
    let n: usize = std::env::var("DRAIN_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    with_namespace(move |client, ns| async move {
        let names = [format!("{ns}-a"), format!("{ns}-b")];
        create_ready_node(&client, &ns, &names[0]).await;
        let app = deploy_lone(&client, &ns, lone(&ns, "bench"), &names[0]).await;
        create_ready_node(&client, &ns, &names[1]).await;
        let operator = Operator::start(&ns, &[]).await;

        let (mut floor, mut rollout) = signal_to_rollout(&client, &ns, &names, &app, n).await;
        floor.sort_by(f64::total_cmp);
        rollout.sort_by(f64::total_cmp);
        println!("signal → rollout over {n} disruptions (ms, from just before the taint PATCH)");
        println!("                               p50      p99      max");
        for (label, v) in [
            ("bare watch sees the taint", &floor),
            ("watch sees the rollout patch", &rollout),
        ] {
            println!(
                "{label:<30} {:>7.1}  {:>7.1}  {:>7.1}",
                percentile(v, 50.0),
                percentile(v, 99.0),
                v[v.len() - 1]
            );
        }
        let metrics = operator.metrics().await;
        let sum = metric(
            &metrics,
            "disruption_guard_drain_signal_to_rollout_seconds_sum",
        );
        let count = metric(
            &metrics,
            "disruption_guard_drain_signal_to_rollout_seconds_count",
        );
        println!(
            "inside the operator, first seen → patch answered: mean {:.1} ms over {count} rollouts",
            sum / count * 1000.0
        );
        for line in metrics.lines().filter(|l| {
            l.starts_with("disruption_guard_drain_rollouts_total{")
                || l.starts_with("disruption_guard_drain_skips_total{")
        }) {
            println!("{line}");
        }
    })
    .await;
}
