//! Writes to the API server, the one way every component makes them: server-side apply and
//! merge patches as a named field manager (every manager is in [`crate::resources::names`]),
//! the API's answer codes ([`code`], [`is_conflict`]), and the one retry of a read-decide-write
//! that lost a race to another writer ([`retry_conflicts`], [`CONFLICT_ATTEMPTS`]).
//!
//! A conflict (409) means the object changed since it was read: the caller reads it again and
//! decides again, which is why the retry takes the whole attempt, not only the write.

use kube::api::PatchParams;

/// Attempts of one read-decide-write when the object keeps changing under it; after that the
/// conflict is returned and the caller's next reconcile (or the client's retry) tries again.
pub const CONFLICT_ATTEMPTS: u32 = 4;

/// The HTTP code of an API answer; `None` for a transport failure.
pub fn code(err: &kube::Error) -> Option<u16> {
    match err {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// Whether `err` is an API answer with `code`.
pub fn is_code(err: &kube::Error, code: u16) -> bool {
    self::code(err) == Some(code)
}

/// Whether `err` is a write conflict: the object changed since it was read (a resourceVersion
/// or UID precondition failed), or a create found the name taken.
pub fn is_conflict(err: &kube::Error) -> bool {
    is_code(err, 409)
}

/// Server-side apply as `manager`, taking over fields another manager holds (the operator's
/// own objects and fields).
pub fn apply_forced(manager: &str) -> PatchParams {
    PatchParams::apply(manager).force()
}

/// Server-side apply as `manager`, refused (409) where another manager holds a field.
pub fn apply(manager: &str) -> PatchParams {
    PatchParams::apply(manager)
}

/// A merge or JSON patch recorded under `manager`.
pub fn patch(manager: &str) -> PatchParams {
    PatchParams {
        field_manager: Some(manager.to_string()),
        ..PatchParams::default()
    }
}

/// Runs `attempt` (numbered from 1) again while it fails with an error `conflict` accepts, at
/// most [`CONFLICT_ATTEMPTS`] times in all, and returns the last result. Each attempt reads
/// what it needs afresh: the retry is of the whole decision, not of a stale write.
///
/// `attempt` returns a future rather than being an async closure: the futures of async
/// closures that borrow cannot yet be proven `Send`, and these run on the shared runtime.
pub async fn retry_conflicts<T, E, F>(
    conflict: impl Fn(&E) -> bool,
    mut attempt: impl FnMut(u32) -> F,
) -> Result<T, E>
where
    F: Future<Output = Result<T, E>>,
{
    let mut n = 1;
    loop {
        match attempt(n).await {
            Err(e) if n < CONFLICT_ATTEMPTS && conflict(&e) => n += 1,
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::api_error;

    #[test]
    fn codes_are_read_from_api_answers_only() {
        assert_eq!(code(&api_error(422)), Some(422));
        assert!(is_conflict(&api_error(409)));
        assert!(!is_conflict(&api_error(404)));
        let transport = kube::Error::Service("connection refused".into());
        assert_eq!(code(&transport), None);
        assert!(!is_conflict(&transport));
    }

    #[test]
    fn the_managers_are_set() {
        assert_eq!(apply("m").field_manager.as_deref(), Some("m"));
        assert!(apply_forced("m").force && !apply("m").force);
        assert_eq!(patch("m").field_manager.as_deref(), Some("m"));
    }

    #[tokio::test]
    async fn conflicts_are_retried_up_to_the_cap_and_the_last_is_returned() {
        let mut seen = vec![];
        let result: Result<(), u32> = retry_conflicts(
            |e: &u32| *e == 409,
            |n| {
                seen.push(n);
                async { Err(409) }
            },
        )
        .await;
        assert_eq!(result, Err(409));
        assert_eq!(seen, (1..=CONFLICT_ATTEMPTS).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn a_success_or_another_error_ends_the_retry() {
        let mut calls = 0;
        let ok: Result<u32, u32> = retry_conflicts(
            |e: &u32| *e == 409,
            |n| {
                calls += 1;
                async move { if n < 2 { Err(409) } else { Ok(n) } }
            },
        )
        .await;
        assert_eq!((ok, calls), (Ok(2), 2));
        let mut calls = 0;
        let other: Result<(), u32> = retry_conflicts(
            |e: &u32| *e == 409,
            |_| {
                calls += 1;
                async { Err(500) }
            },
        )
        .await;
        assert_eq!((other, calls), (Err(500), 1));
    }
}
