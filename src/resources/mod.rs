//! The Kubernetes-facing vocabulary: the `TestWindow` and `CITrust` resources and the fixed names
//! (annotations, labels, finalizer, field managers) that everything else builds on, and the
//! Go durations its `spec.ttl` and the operator's flags are written in ([`duration`]).

pub mod citrust;
pub mod digest_meta;
pub mod duration;
pub mod names;
pub mod pod_digest;
pub mod testwindow;
pub mod window_status;

pub use citrust::{Bounds, CITrust, CITrustSpec, Grant};
pub use pod_digest::PodDigest;
pub use testwindow::{CiInfo, OpenedBy, Protect, TestWindow, TestWindowSpec};
pub use window_status::{
    Phase, ProtectedSummary, RELEASING, TestWindowStatus, TrackedPod, Tracking, WindowReport,
};
