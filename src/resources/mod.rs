//! The Kubernetes-facing vocabulary: the `TestWindow` and `CITrust` resources and the fixed names
//! (annotations, labels, finalizer, field managers) that everything else builds on.

pub mod citrust;
pub mod digest_meta;
pub mod names;
pub mod pod_digest;
pub mod testwindow;

pub use citrust::{Bounds, CITrust, CITrustSpec, Grant};
pub use pod_digest::PodDigest;
pub use testwindow::{
    CiInfo, OpenedBy, Phase, Protect, ProtectedSummary, RELEASING, TestWindow, TestWindowSpec,
    TestWindowStatus, TrackedPod, Tracking, WindowReport,
};
