//! Pure Kubernetes helpers more than one part of the operator uses: decoding what the API
//! server sends one object at a time ([`decoded`], [`stub`]), reading the guard's
//! entries in `metadata.managedFields` ([`fields`]), trimming cached objects to what the
//! decisions read ([`trim`]), whether a node is being disrupted ([`signals`]), references
//! between objects ([`references`]: an object's controller, a reference for an Event) and
//! whether a label selector selects an object ([`selector`]). No I/O; depends only on
//! [`crate::resources`].

pub mod decoded;
pub mod fields;
pub mod references;
pub mod selector;
pub mod signals;
pub mod stub;
pub mod trim;
