//! Leader election against the real API server: of two replicas exactly one leads, and when
//! the leader dies the other takes over within the Lease duration — also in the middle of open
//! windows, which still close and expire, written by one replica at a time; and the leader
//! keeps its Lease, renewed over a connection of its own, through a flood of made-up tokens at
//! its HTTP API.

mod support;

use std::time::{Duration, Instant};

use disruption_guard::resources::{Phase, TestWindow};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use support::drain::metric;
use support::fixtures::deployment;
use support::operator::Operator;
use support::pods::ready_pods;
use support::windows::{guard_pdbs, protected, until_released};
use support::{create_ready_node, wait, with_namespace};

/// Kills the leader with SIGKILL and returns how long the follower took to lead.
async fn kill_and_await_takeover(leader: &mut Operator, follower: &Operator) -> Duration {
    leader.kill();
    let killed = Instant::now();
    wait::until(
        "the follower to take over",
        Duration::from_secs(10),
        || async { follower.leads().await },
    )
    .await;
    killed.elapsed()
}

#[tokio::test]
async fn one_of_two_replicas_leads_and_the_other_takes_over_when_the_leader_is_killed() {
    with_namespace(|client, ns| async move {
        let mut a = Operator::replica(&ns, "replica-a").await;
        let mut b = Operator::replica(&ns, "replica-b").await;
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
            a.leads().await != b.leads().await
        })
        .await;
        let (leader, follower, follower_id) = if holder == "replica-a" {
            (&mut a, &mut b, "replica-b")
        } else {
            (&mut b, &mut a, "replica-a")
        };
        assert!(
            leader.leads().await,
            "the Lease holder reports itself leader"
        );

        let took = kill_and_await_takeover(leader, follower).await;
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
        let mut a = Operator::replica(&ns, "replica-a").await;
        wait::until("replica-a to lead", Duration::from_secs(10), || async {
            a.leads().await
        })
        .await;
        let b = Operator::replica(&ns, "replica-b").await;
        assert!(a.stop().success(), "SIGTERM stops the operator cleanly");
        let stopped = Instant::now();
        wait::until("replica-b to lead", Duration::from_secs(10), || async {
            b.leads().await
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

/// Which of two replicas holds the Lease, once exactly one says it leads.
async fn leader_of<'a>(
    a: &'a mut Operator,
    b: &'a mut Operator,
) -> (&'a mut Operator, &'a mut Operator) {
    wait::until("exactly one leader", Duration::from_secs(15), || async {
        a.leads().await != b.leads().await
    })
    .await;
    if a.leads().await { (a, b) } else { (b, a) }
}

/// Opens a window over `app=<app>` through `op`'s HTTP API and waits until it is Ready.
async fn open_via(op: &Operator, ns: &str, name: &str, app: &str, ttl: &str) {
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/namespaces/{ns}/windows?wait=true", op.api))
        .json(&json!({"name": name, "selector": format!("app={app}"), "ttl": ttl}))
        .send()
        .await
        .unwrap();
    let status = resp.status();
    assert_eq!(
        status,
        201,
        "opening {name}: {}",
        resp.text().await.unwrap()
    );
}

#[tokio::test]
async fn when_the_leader_dies_mid_window_the_other_replica_closes_and_expires_its_windows() {
    with_namespace(|client, ns| async move {
        let node = format!("{ns}-n");
        create_ready_node(&client, &ns, &node).await;
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        for app in ["closed-app", "expired-app"] {
            let d = deployment(app)
                .node_selector("disruption-guard.io/test-node", &node)
                .build();
            deployments
                .create(&PostParams::default(), &d)
                .await
                .unwrap();
        }
        let mut pods = Vec::new();
        for app in ["closed-app", "expired-app"] {
            let pod = wait::for_some("the pod to be Ready", Duration::from_secs(60), || async {
                ready_pods(&client, &ns, app).await.pop()
            })
            .await;
            pods.push(pod.metadata.name.unwrap());
        }

        let mut a = Operator::replica(&ns, "replica-a").await;
        let mut b = Operator::replica(&ns, "replica-b").await;
        let (leader, follower) = leader_of(&mut a, &mut b).await;

        // Every replica serves the API: the follower takes both opens; the leader protects.
        open_via(follower, &ns, "closed", "closed-app", "10m").await;
        open_via(follower, &ns, "expired", "expired-app", "20s").await;
        for pod in &pods {
            assert!(
                protected(&client, &ns, pod, &node).await,
                "{pod} is protected"
            );
        }
        assert_eq!(guard_pdbs(&client, &ns).await.len(), 2);
        let follower_writes = |m: &str| metric(m, "disruption_guard_window_writes_total");
        assert_eq!(
            follower_writes(&follower.metrics().await),
            0.0,
            "the follower wrote nothing while the other replica held the Lease"
        );
        assert!(follower_writes(&leader.metrics().await) > 0.0);

        let took = kill_and_await_takeover(leader, follower).await;
        eprintln!("takeover mid-window after SIGKILL of the leader: {took:?} (lease duration 3s)");
        assert!(
            took < Duration::from_secs(3 + 2),
            "takeover within the Lease duration plus one retry"
        );

        // Closing through the new leader's API releases the first window's protection...
        let resp = reqwest::Client::new()
            .delete(format!(
                "{}/v1/namespaces/{ns}/windows/closed?wait=true",
                follower.api
            ))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
        let windows: Api<TestWindow> = Api::namespaced(client.clone(), &ns);
        let phase = |w: TestWindow| w.status.map(|s| s.phase);
        assert_eq!(
            phase(windows.get("closed").await.unwrap()),
            Some(Phase::Closed)
        );
        // ...while the second window, opened before the failover, is still protected until its
        // TTL runs out, then the new leader releases it as Expired.
        assert!(
            protected(&client, &ns, &pods[1], &node).await,
            "the open window still protects"
        );
        wait::until(
            "the short window to expire",
            Duration::from_secs(60),
            || async { phase(windows.get("expired").await.unwrap()) == Some(Phase::Expired) },
        )
        .await;
        until_released(&client, &ns, &pods[0], &node, Duration::from_secs(30)).await;
        until_released(&client, &ns, &pods[1], &node, Duration::from_secs(30)).await;
        assert!(
            follower_writes(&follower.metrics().await) > 0.0,
            "the new leader wrote the release"
        );
    })
    .await;
}

/// Requests with made-up bearer tokens, each from an address of its own (through
/// `X-Forwarded-For`, the operator trusting loopback as its proxy, as behind an Ingress), so
/// the per-address rate limit lets each through to a TokenReview: `workers` at a time until
/// `until` or `max` requests. Returns the count per HTTP status (0: no answer).
async fn flood(
    api: &str,
    ns: &str,
    workers: usize,
    max: usize,
    until: Instant,
) -> std::collections::BTreeMap<u16, usize> {
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let tasks: Vec<_> = (0..workers)
        .map(|_| {
            let (client, sent) = (client.clone(), sent.clone());
            let url = format!("{api}/v1/namespaces/{ns}/windows");
            tokio::spawn(async move {
                let mut counts = std::collections::BTreeMap::<u16, usize>::new();
                while Instant::now() < until
                    && sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < max
                {
                    let token = format!("{:032x}", fastrand::u128(..));
                    let from = format!(
                        "10.{}.{}.{}",
                        fastrand::u8(..),
                        fastrand::u8(..),
                        fastrand::u8(1..)
                    );
                    let status = client
                        .get(&url)
                        .bearer_auth(token)
                        .header("X-Forwarded-For", from)
                        .send()
                        .await
                        .map(|r| r.status().as_u16())
                        .unwrap_or(0);
                    *counts.entry(status).or_default() += 1;
                }
                counts
            })
        })
        .collect();
    let mut total = std::collections::BTreeMap::new();
    for task in tasks {
        for (status, n) in task.await.unwrap() {
            *total.entry(status).or_default() += n;
        }
    }
    total
}

#[tokio::test]
async fn the_leader_keeps_its_lease_through_a_flood_of_bad_tokens() {
    with_namespace(|client, ns| async move {
        // As the chart installs it: its ServiceAccount, RBAC and flow-control objects.
        let identity = support::chart_identity::ChartIdentity::install_with_flow_control(&ns);
        let op = Operator::start_as(
            &ns,
            vec![
                format!("--namespaces={ns}"),
                "--leader-election".into(),
                format!("--leader-election-namespace={ns}"),
                "--leader-election-identity=replica-a".into(),
                "--lease-duration-seconds=3".into(),
                "--trusted-proxies=127.0.0.1".into(),
            ],
            identity.kubeconfig.clone(),
        )
        .await;
        wait::until("the replica to lead", Duration::from_secs(15), || async {
            op.leads().await
        })
        .await;

        let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
        let flood_for = Duration::from_secs(12);
        let until = Instant::now() + flood_for;
        let (api, flooded) = (op.api.clone(), ns.clone());
        let flooding = tokio::spawn(async move { flood(&api, &flooded, 32, 20_000, until).await });
        // Every 250 ms while it lasts: who holds the Lease, how old its renewal is, whether the
        // replica says it leads.
        let mut renewals = std::collections::BTreeSet::new();
        let (mut oldest, mut samples, mut not_leading) = (Duration::ZERO, 0, 0);
        while Instant::now() < until {
            let lease = leases.get("disruption-guard").await.unwrap();
            let spec = lease.spec.unwrap();
            assert_eq!(spec.holder_identity.as_deref(), Some("replica-a"));
            let renewed = spec.renew_time.unwrap().0;
            let age = jiff::Timestamp::now().duration_since(renewed);
            oldest = oldest.max(Duration::try_from(age).unwrap_or_default());
            renewals.insert(renewed);
            not_leading += usize::from(!op.leads().await);
            samples += 1;
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let answers = flooding.await.unwrap();
        let sent: usize = answers.values().sum();
        eprintln!(
            "flood of {sent} requests with made-up tokens in {flood_for:?}, answers {answers:?}; \
             Lease renewed {} times, oldest renewal seen {oldest:?} (lease 3s), \
             not leading in {not_leading} of {samples} samples",
            renewals.len()
        );
        assert!(
            answers.get(&401).copied().unwrap_or(0) >= 1000,
            "the flood reached the TokenReview: {answers:?}"
        );
        assert!(
            oldest < Duration::from_secs(3),
            "the Lease was never left to expire (oldest renewal seen {oldest:?})"
        );
        assert_eq!(not_leading, 0, "the replica led throughout");
        // Renewed every second: at least one renewal per two seconds of flood.
        assert!(
            renewals.len() as u64 >= flood_for.as_secs() / 2,
            "renewTime kept moving: {} renewals",
            renewals.len()
        );
    })
    .await;
}

#[tokio::test]
async fn the_lease_is_renewed_over_a_connection_of_its_own() {
    with_namespace(|_client, ns| async move {
        // Without election: every watch, read and write over one HTTP/2 connection.
        let single = Operator::start(&ns, &[]).await;
        wait::until(
            "one API server connection",
            Duration::from_secs(10),
            || async { single.api_server_connections() == 1 },
        )
        .await;
        // With election: that one, and the Lease's.
        let elected = Operator::replica(&ns, "replica-a").await;
        wait::until("the replica to lead", Duration::from_secs(15), || async {
            elected.leads().await
        })
        .await;
        wait::until(
            "two API server connections, one for the Lease",
            Duration::from_secs(10),
            || async { elected.api_server_connections() == 2 },
        )
        .await;
    })
    .await;
}
