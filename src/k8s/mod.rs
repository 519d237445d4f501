//! Pure Kubernetes helpers more than one part of the operator uses: reading the guard's
//! entries in `metadata.managedFields` ([`fields`]), trimming cached objects to what the
//! decisions read ([`trim`]), Go durations ([`duration`]) and whether a node is being
//! disrupted ([`signals`]). No I/O; depends only on
//! [`crate::resources`].

pub mod duration;
pub mod fields;
pub mod signals;
pub mod trim;
