//! Errors of the window controller. Metric and Event labels come from [`Error::category`],
//! a fixed vocabulary, never from object names or `Debug` output.

use crate::runtime::write::code;

/// Every value [`Error::category`] can take, so the error counter exports each at 0 from the
/// start.
pub const CATEGORIES: [&str; 11] = [
    "write_conflict",
    "write_forbidden",
    "write_not_found",
    "write_invalid",
    "write_api",
    "write_transport",
    "status_conflict",
    "status",
    "finalizer_conflict",
    "finalizer",
    "delete",
];

/// What can go wrong while reconciling a window.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A protection write (annotation, PDB) failed.
    #[error("writing {what}: {source}")]
    Write {
        what: String,
        #[source]
        source: kube::Error,
    },
    /// Writing the window's status failed.
    #[error("writing the window status: {0}")]
    Status(#[source] kube::Error),
    /// Adding or removing the finalizer failed.
    #[error("updating the window finalizer: {0}")]
    Finalizer(#[source] kube::Error),
    /// Deleting a window past its retention failed.
    #[error("deleting the window after its retention: {0}")]
    Delete(#[source] kube::Error),
}

impl Error {
    /// A short, fixed label for metrics and Events.
    pub fn category(&self) -> &'static str {
        match self {
            Error::Write { source, .. } => match code(source) {
                Some(409) => "write_conflict",
                Some(403) => "write_forbidden",
                Some(404) => "write_not_found",
                Some(422) => "write_invalid",
                Some(_) => "write_api",
                None => "write_transport",
            },
            Error::Status(source) if code(source) == Some(409) => "status_conflict",
            Error::Status(_) => "status",
            Error::Finalizer(source) if code(source) == Some(409) => "finalizer_conflict",
            Error::Finalizer(_) => "finalizer",
            Error::Delete(_) => "delete",
        }
    }

    /// Whether the error is a write conflict (retried quickly).
    pub fn is_conflict(&self) -> bool {
        self.category().ends_with("conflict")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::api_error;

    #[test]
    fn every_category_is_in_the_fixed_list() {
        let transport = || kube::Error::Service("connection refused".into());
        let mut errors = vec![];
        for code in [403, 404, 409, 422, 500] {
            errors.push(Error::Write {
                what: "a PDB".into(),
                source: api_error(code),
            });
            errors.push(Error::Status(api_error(code)));
            errors.push(Error::Finalizer(api_error(code)));
            errors.push(Error::Delete(api_error(code)));
        }
        errors.push(Error::Write {
            what: "a PDB".into(),
            source: transport(),
        });
        errors.push(Error::Status(transport()));
        let mut seen = std::collections::BTreeSet::new();
        for err in &errors {
            assert!(
                CATEGORIES.contains(&err.category()),
                "{} is not in CATEGORIES",
                err.category()
            );
            seen.insert(err.category());
        }
        // Every listed category is one some error has.
        let unseen: Vec<_> = CATEGORIES.iter().filter(|c| !seen.contains(*c)).collect();
        assert!(unseen.is_empty(), "never produced: {unseen:?}");
    }
}
