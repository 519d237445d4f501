//! Pure Kubernetes helpers more than one part of the operator uses: reading the guard's
//! entries in `metadata.managedFields` ([`fields`]) and trimming cached objects to what the
//! decisions read ([`trim`]). No I/O; depends only on [`crate::resources`].

pub mod fields;
pub mod trim;
