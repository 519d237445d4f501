//! Pure Kubernetes helpers more than one part of the operator uses: reading the guard's
//! entries in `metadata.managedFields` ([`fields`]), trimming cached objects to what the
//! decisions read ([`trim`]) and Go durations ([`duration`]). No I/O; depends only on
//! [`crate::resources`].

pub mod duration;
pub mod fields;
pub mod trim;
