//! Errors of the drain watcher; `category()` gives the metric and log label.

/// What can go wrong while acting on a disrupted node.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A read made right before acting failed.
    #[error("reading {what} before the rollout")]
    Recheck {
        what: &'static str,
        #[source]
        source: kube::Error,
    },
    /// The Deployment changed between the re-check and the patch (resourceVersion mismatch).
    #[error("the Deployment changed while rolling it out")]
    Conflict(#[source] kube::Error),
    /// The rollout patch failed.
    #[error("patching the Deployment")]
    Patch(#[source] kube::Error),
}

impl Error {
    /// A fixed label for metrics and Events.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Recheck { .. } => "recheck_failed",
            Self::Conflict(_) => "conflict",
            Self::Patch(_) => "patch_failed",
        }
    }
}
