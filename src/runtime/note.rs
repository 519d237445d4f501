//! One Event as the components describe it: its type, reason, action and note (the runtime's
//! Event writer, [`super::events::Events`], publishes it).

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::EventType;

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
