//! The operation a route asks for: the RBAC verb on `testwindows` for Kubernetes tokens, mapped
//! to a `CITrust` grant for CI id-tokens. Its own file so that both kinds of authorization
//! ([`super::auth`], [`super::oidc`]) can name it without using each other.

/// The RBAC verb a route needs on `testwindows`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verb {
    /// Open a window.
    Create,
    /// Read one window.
    Get,
    /// List windows.
    List,
    /// Renew a window.
    Patch,
    /// Close a window.
    Delete,
}

impl Verb {
    /// The verb as RBAC spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Create => "create",
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
        }
    }
}
