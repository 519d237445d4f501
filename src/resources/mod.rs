//! The Kubernetes-facing vocabulary: the `TestWindow` resource and the fixed names
//! (annotations, labels, finalizer, field managers) that everything else builds on, and the
//! Go durations its `spec.ttl` and the operator's flags are written in ([`duration`]).

pub mod digest_meta;
pub mod duration;
pub mod names;
pub mod pod_digest;
pub mod testwindow;

pub use pod_digest::PodDigest;
pub use testwindow::{
    CiInfo, Phase, Protect, ProtectedSummary, RELEASING, TestWindow, TestWindowSpec,
    TestWindowStatus, TrackedPod, Tracking, WindowReport,
};
