//! Kubernetes Events the operator publishes, as this replica (`Runtime::reporter`). A failure
//! to publish is logged and otherwise ignored: an Event is a report, never a reason to stop.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};
use tracing::warn;

use super::Runtime;

/// Publishes Events; cheap to clone.
#[derive(Clone)]
pub struct Events {
    recorder: Recorder,
}

/// One Event: what it is about, its type, reason, action and note.
#[derive(Debug, Clone)]
pub struct Note {
    /// `Normal` or `Warning`.
    pub type_: EventType,
    /// The Event's reason (`RolledOutForDrain`, …).
    pub reason: &'static str,
    /// The Event's action (`RolloutOnDrain`, …).
    pub action: &'static str,
    /// A sentence for people.
    pub note: String,
    /// A second object the Event concerns.
    pub secondary: Option<ObjectReference>,
}

impl Events {
    /// Events reported as this replica.
    pub fn new(runtime: &Runtime) -> Self {
        Self {
            recorder: Recorder::new(runtime.client.clone(), runtime.reporter()),
        }
    }

    /// Publishes `note` about `regarding`.
    pub async fn publish(&self, regarding: &ObjectReference, note: Note) {
        let reason = note.reason;
        let event = Event {
            type_: note.type_,
            reason: note.reason.into(),
            note: Some(note.note),
            action: note.action.into(),
            secondary: note.secondary,
        };
        if let Err(error) = self.recorder.publish(&event, regarding).await {
            warn!(%error, reason, name = ?regarding.name, "could not publish an Event");
        }
    }
}
