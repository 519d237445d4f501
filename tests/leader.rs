//! Leader election against the real API server: of two replicas exactly one leads, and when
//! the leader dies the other takes over within the Lease duration.

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use support::operator::Operator;
use support::{wait, with_namespace};

fn is_leader(metrics: &str) -> bool {
    metrics
        .lines()
        .any(|l| l.trim() == "disruption_guard_leader 1")
}

async fn replica(ns: &str, identity: &str) -> Operator {
    Operator::start(
        ns,
        &[
            "--leader-election",
            &format!("--leader-election-namespace={ns}"),
            &format!("--leader-election-identity={identity}"),
            "--lease-duration-seconds=3",
        ],
    )
    .await
}

#[tokio::test]
async fn one_of_two_replicas_leads_and_the_other_takes_over_when_the_leader_is_killed() {
    with_namespace(|client, ns| async move {
        let mut a = replica(&ns, "replica-a").await;
        let mut b = replica(&ns, "replica-b").await;
        let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);

        let holder = wait::for_some("a Lease holder", Duration::from_secs(15), || async {
            leases
                .get_opt("disruption-guard")
                .await
                .ok()??
                .spec?
                .holder_identity
        })
        .await;
        // Both views agree: exactly one replica says it leads, and it is the Lease holder.
        wait::until("exactly one leader", Duration::from_secs(10), || async {
            is_leader(&a.metrics().await) != is_leader(&b.metrics().await)
        })
        .await;
        let (leader, follower, follower_id) = if holder == "replica-a" {
            (&mut a, &mut b, "replica-b")
        } else {
            (&mut b, &mut a, "replica-a")
        };
        assert!(
            is_leader(&leader.metrics().await),
            "the Lease holder reports itself leader"
        );

        leader.kill();
        let killed = Instant::now();
        wait::until(
            "the follower to take over",
            Duration::from_secs(10),
            || async { is_leader(&follower.metrics().await) },
        )
        .await;
        let took = killed.elapsed();
        let lease = leases.get("disruption-guard").await.unwrap();
        assert_eq!(
            lease.spec.unwrap().holder_identity.as_deref(),
            Some(follower_id)
        );
        eprintln!("takeover after SIGKILL of the leader: {took:?} (lease duration 3s)");
        assert!(
            took < Duration::from_secs(3 + 2),
            "takeover within the Lease duration plus one retry"
        );
    })
    .await;
}

#[tokio::test]
async fn a_stopping_leader_releases_the_lease_so_the_follower_takes_over_at_once() {
    with_namespace(|_client, ns| async move {
        let mut a = replica(&ns, "replica-a").await;
        wait::until("replica-a to lead", Duration::from_secs(10), || async {
            is_leader(&a.metrics().await)
        })
        .await;
        let b = replica(&ns, "replica-b").await;
        assert!(a.stop().success(), "SIGTERM stops the operator cleanly");
        let stopped = Instant::now();
        wait::until("replica-b to lead", Duration::from_secs(10), || async {
            is_leader(&b.metrics().await)
        })
        .await;
        eprintln!(
            "takeover after SIGTERM of the leader: {:?}",
            stopped.elapsed()
        );
        assert!(
            stopped.elapsed() < Duration::from_secs(3),
            "a released Lease is taken before it would expire"
        );
    })
    .await;
}
