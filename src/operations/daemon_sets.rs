//! Who may protect DaemonSet pods (`protect.daemonSets`). A DaemonSet runs a pod on every node,
//! so a window that protects its pods holds every node of the cluster until it ends: the admin
//! names who may ask for that (`--allow-daemon-sets-for`). A window opened under a CITrust is
//! decided by that trust's `bounds.daemonSets`, which the HTTP API checked when it opened the
//! window (the trust is recorded in `spec.openedBy.trust`, which only the operator may write).
//! Anybody else needs their identity name on the list, or the list to hold `*`.
//!
//! One decision for both ways in: the HTTP API refuses such an open with a 403 naming the
//! field, and the window controller gives a window created some other way (kubectl, the CI
//! client's direct mode) no protection and `Ready=False` with reason [`REFUSED`].

use crate::resources::OpenedBy;

/// The `Ready` reason of a window refused by [`DaemonSetPolicy::admits`].
pub const REFUSED: &str = "DaemonSetsNotAllowed";

/// Who may open windows with `protect.daemonSets` (`--allow-daemon-sets-for`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DaemonSetPolicy {
    /// Identity names as `spec.openedBy.name` records them, or `*` for everyone.
    allowed: Vec<String>,
}

impl DaemonSetPolicy {
    /// The policy allowing `allowed` (identity names, or `*`); empty entries are ignored.
    pub fn new(allowed: &[String]) -> Self {
        Self {
            allowed: allowed
                .iter()
                .map(|a| a.trim().to_string())
                .filter(|a| !a.is_empty())
                .collect(),
        }
    }

    /// Whether a window opened by `opened_by` (None: created without the HTTP API) may protect
    /// DaemonSet pods; the refusal, naming the field, when not.
    pub fn admits(&self, opened_by: Option<&OpenedBy>) -> Result<(), String> {
        if self.allowed.iter().any(|a| a == "*") {
            return Ok(());
        }
        match opened_by {
            // Granted by a CITrust, whose bounds.daemonSets the API checked at the open.
            Some(by) if by.trust.is_some() => Ok(()),
            Some(by) if self.allowed.contains(&by.name) => Ok(()),
            Some(by) => Err(format!(
                "protect.daemonSets: {} may not protect DaemonSet pods, which would hold every \
                 node they run on (--allow-daemon-sets-for)",
                by.name
            )),
            None => Err(
                "protect.daemonSets: a window created without the disruption-guard API may not \
                 protect DaemonSet pods unless --allow-daemon-sets-for is `*`"
                    .to_string(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn by(name: &str, trust: Option<&str>) -> OpenedBy {
        OpenedBy {
            name: name.into(),
            trust: trust.map(str::to_string),
            ..Default::default()
        }
    }

    #[test]
    fn by_default_nobody_but_a_ci_trust_may_protect_daemon_set_pods() {
        let policy = DaemonSetPolicy::default();
        let err = policy
            .admits(Some(&by("system:serviceaccount:shop:ci", None)))
            .unwrap_err();
        assert!(err.starts_with("protect.daemonSets: "), "{err}");
        assert!(err.contains("system:serviceaccount:shop:ci"), "{err}");
        assert!(
            policy
                .admits(None)
                .unwrap_err()
                .starts_with("protect.daemonSets: ")
        );
        assert_eq!(
            policy.admits(Some(&by("oidc:https://ci#repo", Some("shop/main")))),
            Ok(())
        );
    }

    #[test]
    fn named_identities_may_and_a_star_lets_everyone() {
        let policy = DaemonSetPolicy::new(&["static:platform".into(), " ".into()]);
        assert_eq!(policy.admits(Some(&by("static:platform", None))), Ok(()));
        assert!(policy.admits(Some(&by("static:platforms", None))).is_err());
        assert!(policy.admits(None).is_err());
        let everyone = DaemonSetPolicy::new(&["*".into()]);
        assert_eq!(everyone.admits(None), Ok(()));
        assert_eq!(everyone.admits(Some(&by("anyone", None))), Ok(()));
    }
}
