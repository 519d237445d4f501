//! Pure Kubernetes helpers more than one part of the operator uses: decoding what the API
//! server sends one object at a time ([`decoded`], [`stub`]), reading the guard's
//! entries in `metadata.managedFields` ([`fields`]), trimming cached objects to what the
//! decisions read ([`trim`]), whether a node is being disrupted ([`signals`]), how a Deployment rolls ([`strategy`]), what a rollout can save
//! ([`workload`]) and the rollout the guard writes, as data ([`rollout`]). No I/O; depends only
//! on [`crate::resources`].

pub mod decoded;
pub mod fields;
pub mod rollout;
pub mod signals;
pub mod strategy;
pub mod stub;
pub mod trim;
pub mod workload;
