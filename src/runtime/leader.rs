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
    /// Creates an elector and the leadership handle it drives.
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
            match self.try_once().await {
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
                Err(err) => {
                    warn!(error = %err, lease = %self.config.name, "leader election round failed")
                }
            }
            let wake = Instant::now() + self.config.retry_period;
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
            self.release().await;
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
    fn a_released_lease_is_acquired_at_once() {
        assert_eq!(
            decide(Some(&lease(None, at(0), 15)), "a", at(1)),
            LeaseDecision::Acquire
        );
    }
}
