//! Leader election over a `coordination.k8s.io/v1` Lease: every replica serves the HTTP API,
//! only the holder writes protection and rolls Deployments out.
//!
//! [`decide`] is the pure rule (who may hold the Lease now); [`Elector`] applies it with
//! optimistic concurrency (`replace` with the observed `resourceVersion`), so two replicas can
//! never both believe they hold it. A holder that cannot renew stops acting as soon as its own
//! view of the Lease expires, before any other replica may take it over.
//!
//! Hand-written, not `kube-lease-manager` (0.13, on this kube) or `kubert`'s lease (0.25, on an
//! older kube and k8s-openapi): `kube-lease-manager`'s watch keeps reporting `true` while its
//! renewals fail and it backs off, so a holder cut off from the API server would go on writing
//! past the Lease's expiry, when another replica may already hold it. Here leadership is a
//! deadline taken before each renewal request is sent, so it runs out on its own.
//!
//! A round (read, then renew) is bounded by [`round_timeout`], a third of the Lease duration:
//! a renewal the API server or the connection holds up is abandoned well before the Lease it
//! renews would run out, and counts as a failed renewal (leadership ends at the deadline
//! already taken; the next round starts on time). The elector is meant to get a client of its
//! own (the wiring builds a second connection from the same configuration), so the Lease never
//! waits behind the requests that callers of the HTTP API drive (TokenReviews, window writes).

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::PostParams;
use kube::{Api, Client};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::resources::names;

/// Settings of the election.
#[derive(Debug, Clone)]
pub struct ElectionConfig {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This replica's identity (pod name).
    pub identity: String,
    /// How long a Lease is valid without renewal.
    pub lease_duration: Duration,
    /// How often the holder renews and candidates retry.
    pub retry_period: Duration,
}

/// How long one round of the election (read the Lease, then create or renew it) may take: a
/// third of the Lease duration, so a round that started while this replica led ends, one way
/// or the other, before the Lease it renews runs out (rounds start a third apart).
pub fn round_timeout(lease_duration: Duration) -> Duration {
    (lease_duration / 3).max(Duration::from_millis(10))
}

/// What a replica should do with the Lease it observed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseDecision {
    /// Nobody holds it, or the holder let it expire: take it.
    Acquire,
    /// We hold it: renew it.
    Renew,
    /// Someone else holds a valid Lease: wait.
    Follow,
}

/// Decides from the Lease's spec (None when the Lease does not exist yet).
pub fn decide(spec: Option<&LeaseSpec>, identity: &str, now: Timestamp) -> LeaseDecision {
    let Some(spec) = spec else {
        return LeaseDecision::Acquire;
    };
    let holder = spec.holder_identity.as_deref().unwrap_or("");
    if holder == identity {
        return LeaseDecision::Renew;
    }
    if holder.is_empty() {
        return LeaseDecision::Acquire;
    }
    let renewed = spec
        .renew_time
        .as_ref()
        .or(spec.acquire_time.as_ref())
        .map(|t| t.0);
    let duration = i64::from(spec.lease_duration_seconds.unwrap_or(15));
    match renewed {
        Some(renewed) if now < renewed + jiff::SignedDuration::from_secs(duration) => {
            LeaseDecision::Follow
        }
        _ => LeaseDecision::Acquire,
    }
}

/// Whether this replica currently holds the Lease; cheap to clone and check.
#[derive(Debug, Clone)]
pub enum Leadership {
    /// A single replica without election: always the leader.
    Always,
    /// Elected: leader until the published deadline (the Lease's expiry as this replica saw it).
    Elected(watch::Receiver<Instant>),
}

impl Leadership {
    /// True while this replica may write. Evaluated against the local deadline, so a holder
    /// that failed to renew stops at once, even before the elector notices.
    pub fn is_leader(&self) -> bool {
        match self {
            Leadership::Always => true,
            Leadership::Elected(rx) => Instant::now() < *rx.borrow(),
        }
    }

    /// Waits until this replica holds the Lease.
    pub async fn acquired(&mut self) {
        while !self.is_leader() {
            let Leadership::Elected(rx) = self else {
                return;
            };
            if rx.changed().await.is_err() {
                return;
            }
        }
    }
}

/// Runs the election loop until shutdown, publishing leadership through [`Leadership`].
pub struct Elector {
    api: Api<Lease>,
    config: ElectionConfig,
    tx: watch::Sender<Instant>,
}

impl Elector {
    /// Creates an elector and the leadership handle it drives; `client` should serve the Lease
    /// only (a connection of its own).
    pub fn new(client: Client, config: ElectionConfig) -> (Self, Leadership) {
        let (tx, rx) = watch::channel(Instant::now());
        let api = Api::namespaced(client, &config.namespace);
        let elector = Self { api, config, tx };
        (elector, Leadership::Elected(rx))
    }

    /// Whether this replica holds the Lease at `now` by its own deadline.
    fn holds(&self, now: Instant) -> bool {
        now < *self.tx.borrow()
    }

    /// Acquires and renews the Lease every retry period; releases it on shutdown.
    pub async fn run(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let mut leading = false;
        loop {
            let started = Instant::now();
            let bound = round_timeout(self.config.lease_duration);
            let round = match tokio::time::timeout(bound, self.try_once()).await {
                Ok(result) => result.map_err(|e| e.to_string()),
                Err(_) => Err(format!("no answer within {bound:?}")),
            };
            match round {
                Ok(true) => {
                    // Valid until the Lease would expire, counted from before the write.
                    let deadline = started + self.config.lease_duration;
                    self.tx.send_replace(deadline);
                    if !leading {
                        info!(lease = %self.config.name, identity = %self.config.identity, "acquired leadership");
                    }
                    leading = true;
                }
                Ok(false) => {
                    if leading {
                        warn!(lease = %self.config.name, "lost leadership");
                    }
                    self.tx.send_replace(started);
                    leading = false;
                }
                // Like a failed renewal: leadership ends at the deadline already taken.
                Err(err) => {
                    warn!(error = %err, lease = %self.config.name, "leader election round failed")
                }
            }
            // Counted from the round's start: after a round that timed out, the next one still
            // comes before the deadline the last renewal took.
            let wake = (started + self.config.retry_period).max(Instant::now());
            let deadline = *self.tx.borrow();
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep_until(wake) => {}
                // Renewals failed and the deadline comes before the next round: leadership
                // ends then, and so does what this replica exports as the leader.
                _ = tokio::time::sleep_until(deadline), if deadline < wake && self.holds(Instant::now()) => {
                    warn!(lease = %self.config.name, "leadership ran out without a renewal");
                    tokio::select! {
                        _ = shutdown.cancelled() => break,
                        _ = tokio::time::sleep_until(wake) => {}
                    }
                }
            }
        }
        self.tx.send_replace(Instant::now());
        if leading {
            let bound = round_timeout(self.config.lease_duration);
            if tokio::time::timeout(bound, self.release()).await.is_err() {
                warn!(lease = %self.config.name, "releasing the Lease took too long; it expires by itself");
            }
        }
        Ok(())
    }

    /// One round: returns whether this replica holds the Lease afterwards.
    async fn try_once(&self) -> Result<bool, kube::Error> {
        let now = Timestamp::now();
        let current = self.api.get_opt(&self.config.name).await?;
        let decision = decide(
            current.as_ref().and_then(|l| l.spec.as_ref()),
            &self.config.identity,
            now,
        );
        if decision == LeaseDecision::Follow {
            return Ok(false);
        }
        let previous = current
            .as_ref()
            .and_then(|l| l.spec.clone())
            .unwrap_or_default();
        let spec = LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(self.config.lease_duration.as_secs() as i32),
            acquire_time: match decision {
                LeaseDecision::Renew => previous.acquire_time.clone(),
                _ => Some(MicroTime(now)),
            },
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(
                previous.lease_transitions.unwrap_or(0)
                    + i32::from(decision == LeaseDecision::Acquire && current.is_some()),
            ),
            ..previous
        };
        let result = match current {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.config.name.clone()),
                        labels: Some(
                            [(
                                names::MANAGED_BY_KEY.to_string(),
                                names::MANAGED_BY_VALUE.to_string(),
                            )]
                            .into(),
                        ),
                        ..Default::default()
                    },
                    spec: Some(spec),
                };
                self.api.create(&PostParams::default(), &lease).await
            }
            Some(mut lease) => {
                lease.spec = Some(spec);
                // replace carries the observed resourceVersion: a concurrent writer gets 409.
                self.api
                    .replace(&self.config.name, &PostParams::default(), &lease)
                    .await
            }
        };
        match result {
            Ok(_) => Ok(true),
            Err(err) if super::write::is_conflict(&err) => Ok(false),
            Err(err) => Err(err),
        }
    }

    /// Gives the Lease up so another replica takes over without waiting for expiry.
    async fn release(&self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.config.name).await else {
            return;
        };
        let Some(spec) = lease.spec.as_mut() else {
            return;
        };
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.renew_time = None;
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => info!(lease = %self.config.name, "released leadership"),
            Err(err) => warn!(error = %err, "releasing the Lease failed; it expires by itself"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: Option<&str>, renewed: Timestamp, seconds: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: holder.map(str::to_string),
            renew_time: Some(MicroTime(renewed)),
            lease_duration_seconds: Some(seconds),
            ..Default::default()
        }
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    #[test]
    fn a_missing_lease_is_acquired() {
        assert_eq!(decide(None, "a", at(0)), LeaseDecision::Acquire);
    }

    #[test]
    fn the_holder_renews_its_own_lease() {
        assert_eq!(
            decide(Some(&lease(Some("a"), at(0), 15)), "a", at(100)),
            LeaseDecision::Renew
        );
    }

    #[test]
    fn a_valid_lease_of_another_replica_is_followed() {
        assert_eq!(
            decide(Some(&lease(Some("b"), at(0), 15)), "a", at(14)),
            LeaseDecision::Follow
        );
    }

    #[test]
    fn an_expired_lease_of_another_replica_is_taken_over() {
        assert_eq!(
            decide(Some(&lease(Some("b"), at(0), 15)), "a", at(15)),
            LeaseDecision::Acquire
        );
    }

    #[test]
    fn a_round_ends_well_inside_the_lease() {
        assert_eq!(
            round_timeout(Duration::from_secs(15)),
            Duration::from_secs(5)
        );
        assert!(round_timeout(Duration::from_secs(3)) < Duration::from_secs(3) / 2);
    }

    /// An API server for one Lease that answers at once, or never while `hang` is set; counts
    /// the requests it was sent.
    #[derive(Default)]
    struct LeaseServer {
        hang: std::sync::atomic::AtomicBool,
        requests: std::sync::atomic::AtomicUsize,
        lease: std::sync::Mutex<Option<Vec<u8>>>,
    }

    impl LeaseServer {
        fn requests(&self) -> usize {
            self.requests.load(std::sync::atomic::Ordering::SeqCst)
        }

        fn client(self: &std::sync::Arc<Self>) -> Client {
            use kube::client::Body;
            let server = self.clone();
            let service = tower::service_fn(move |request: http::Request<Body>| {
                let server = server.clone();
                async move {
                    server
                        .requests
                        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    if server.hang.load(std::sync::atomic::Ordering::SeqCst) {
                        std::future::pending::<()>().await;
                    }
                    let reply = |code: u16, body: Vec<u8>| {
                        http::Response::builder()
                            .status(code)
                            .body(Body::from(body))
                            .unwrap()
                    };
                    if request.method() == http::Method::GET {
                        let stored = server.lease.lock().unwrap().clone();
                        return Ok::<_, kube::Error>(match stored {
                            Some(body) => reply(200, body),
                            None => reply(
                                404,
                                serde_json::to_vec(&serde_json::json!({
                                    "kind": "Status", "apiVersion": "v1", "status": "Failure",
                                    "reason": "NotFound", "code": 404, "message": "not found"
                                }))
                                .unwrap(),
                            ),
                        });
                    }
                    let body = request.into_body().collect_bytes().await?.to_vec();
                    *server.lease.lock().unwrap() = Some(body.clone());
                    Ok(reply(200, body))
                }
            });
            Client::new(service, "default")
        }
    }

    /// Waits up to `limit` for `check`; how long it took, or None.
    async fn within(limit: Duration, check: impl Fn() -> bool) -> Option<Duration> {
        let start = Instant::now();
        while start.elapsed() < limit {
            if check() {
                return Some(start.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        None
    }

    #[tokio::test]
    async fn a_renewal_that_hangs_is_given_up_before_the_lease_runs_out() {
        let server = std::sync::Arc::new(LeaseServer::default());
        let lease = Duration::from_millis(900);
        let config = ElectionConfig {
            namespace: "ns".into(),
            name: "lease".into(),
            identity: "replica-a".into(),
            lease_duration: lease,
            retry_period: lease / 3,
        };
        let (elector, leadership) = Elector::new(server.client(), config);
        let shutdown = CancellationToken::new();
        let election = tokio::spawn(elector.run(shutdown.clone()));
        within(Duration::from_secs(2), || leadership.is_leader())
            .await
            .expect("the replica leads");

        // The API server stops answering: the hung round is abandoned and the next one sent,
        // both within the Lease duration, and leadership ends with the Lease.
        server.hang.store(true, std::sync::atomic::Ordering::SeqCst);
        let before = server.requests();
        let retried = within(lease, || server.requests() >= before + 2).await;
        assert!(
            retried.is_some(),
            "a hung round was given up and another sent within the Lease duration \
             ({} requests since the server stopped answering)",
            server.requests() - before
        );
        within(lease + lease / 3, || !leadership.is_leader())
            .await
            .expect("leadership ends with the Lease");

        // The server answers again: the next round renews at once.
        server
            .hang
            .store(false, std::sync::atomic::Ordering::SeqCst);
        within(lease, || leadership.is_leader())
            .await
            .expect("the replica leads again once the API server answers");
        shutdown.cancel();
        tokio::time::timeout(lease, election)
            .await
            .expect("the elector stops within a round")
            .unwrap()
            .unwrap();
    }

    #[test]
    fn a_released_lease_is_acquired_at_once() {
        assert_eq!(
            decide(Some(&lease(None, at(0), 15)), "a", at(1)),
            LeaseDecision::Acquire
        );
    }
}
