//! Kubernetes Events the operator publishes, as this replica (`Runtime::reporter`).
//!
//! [`Events::publish`] queues; one task per [`Events`] writes them to the API server one after
//! another, in the order they were queued. Whoever reports — a reconcile, the drain watcher, the
//! eviction webhook — does not wait for that write: on a busy API server it costs as much as
//! the write that protects (measured at scale: a window's `Opened` Event held its next
//! reconcile, the one that finds it `Ready`, by one round trip). An Event is a report, never a
//! reason to stop: a failure to publish is logged, and when the API server falls
//! [`QUEUE`] Events behind, newer ones are dropped (and logged) rather than held in memory.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, Recorder};
use tokio::sync::mpsc;
use tracing::warn;

use super::Runtime;

/// Events waiting to be written, at most.
pub const QUEUE: usize = 1024;

pub use super::note::Note;

/// Publishes Events; cheap to clone (clones share the queue).
#[derive(Clone)]
pub struct Events {
    queue: mpsc::Sender<(ObjectReference, Note)>,
}

impl Events {
    /// Events reported as this replica, written by a task that runs until every clone is
    /// dropped (needs a Tokio runtime).
    pub fn new(runtime: &Runtime) -> Self {
        Self::writing(Recorder::new(runtime.client.clone(), runtime.reporter()))
    }

    /// Events written by `recorder`, from a task of their own.
    fn writing(recorder: Recorder) -> Self {
        let (queue, mut queued) = mpsc::channel::<(ObjectReference, Note)>(QUEUE);
        tokio::spawn(async move {
            while let Some((regarding, note)) = queued.recv().await {
                write(&recorder, &regarding, note).await;
            }
        });
        Self { queue }
    }

    /// Queues `note` about `regarding`; returns at once.
    pub fn publish(&self, regarding: &ObjectReference, note: Note) {
        match self.queue.try_send((regarding.clone(), note)) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full((regarding, note))) => warn!(
                reason = note.reason, name = ?regarding.name,
                "an Event was dropped: {QUEUE} are waiting for the API server"
            ),
            // The writer stopped: the process is shutting down.
            Err(mpsc::error::TrySendError::Closed(_)) => {}
        }
    }
}

async fn write(recorder: &Recorder, regarding: &ObjectReference, note: Note) {
    let reason = note.reason;
    let event = Event {
        type_: note.type_,
        reason: note.reason.into(),
        note: Some(note.note),
        action: note.action.into(),
        secondary: note.secondary,
    };
    if let Err(error) = recorder.publish(&event, regarding).await {
        warn!(%error, reason, name = ?regarding.name, "could not publish an Event");
    }
}

/// Reports of objects the watches could not represent are Warning Events.
impl super::refusals::Warn for Events {
    fn warn(&self, regarding: ObjectReference, note: Note) {
        self.publish(&regarding, note);
    }
}

#[cfg(test)]
mod tests {
    use kube::Client;
    use kube::client::Body;
    use kube::runtime::events::Reporter;
    use tokio::sync::mpsc::unbounded_channel;

    use super::*;
    use kube::runtime::events::EventType;

    #[tokio::test]
    async fn events_are_written_one_after_another_in_the_order_they_were_queued() {
        let (written, mut seen) = unbounded_channel::<String>();
        let server = tower::service_fn(move |request: http::Request<Body>| {
            let written = written.clone();
            async move {
                let body = request.into_body().collect_bytes().await?;
                let event: serde_json::Value = serde_json::from_slice(&body).unwrap();
                let reason = event["reason"].as_str().unwrap().to_string();
                // The earlier the Event, the slower its write: written at once, they would
                // arrive in reverse.
                let delay = match reason.as_str() {
                    "Opened" => 20,
                    "Ready" => 15,
                    "Renewed" => 10,
                    _ => 5,
                };
                tokio::time::sleep(std::time::Duration::from_millis(delay)).await;
                written.send(reason).unwrap();
                Ok::<_, kube::Error>(
                    http::Response::builder()
                        .status(201)
                        .body(Body::from(body.to_vec()))
                        .unwrap(),
                )
            }
        });
        let reporter = Reporter {
            controller: "test".into(),
            instance: None,
        };
        let events = Events::writing(Recorder::new(Client::new(server, "default"), reporter));
        let regarding = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some("p".into()),
            namespace: Some("default".into()),
            ..ObjectReference::default()
        };
        let reasons = ["Opened", "Ready", "Renewed", "Closed"];
        for reason in reasons {
            let note = Note {
                type_: EventType::Normal,
                reason,
                action: "Reconcile",
                note: reason.to_lowercase(),
                secondary: None,
            };
            events.publish(&regarding, note);
        }
        let mut order = vec![];
        for _ in reasons {
            order.push(seen.recv().await.unwrap());
        }
        assert_eq!(order, reasons);
    }
}
