//! Polling helpers: wait for a condition with a deadline and a clear failure message.

use std::future::Future;
use std::time::{Duration, Instant};

/// Polls `check` every 100 ms until it is true; panics naming `what` after `limit`.
pub async fn until<F, Fut>(what: &str, limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    until_ok(what, limit, || {
        let done = check();
        async move {
            if done.await {
                Ok(())
            } else {
                Err(String::new())
            }
        }
    })
    .await;
}

/// Polls `check` every 100 ms until it is `Ok`; panics after `limit` naming `what` and the
/// state the last `Err` described.
pub async fn until_ok<F, Fut>(what: &str, limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let deadline = Instant::now() + limit;
    loop {
        let state = match check().await {
            Ok(()) => return,
            Err(state) => state,
        };
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}{}",
            if state.is_empty() {
                String::new()
            } else {
                format!("; {state}")
            }
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Polls `get` every 100 ms until it returns `Some`; panics naming `what` after `limit`.
pub async fn for_some<T, F, Fut>(what: &str, limit: Duration, mut get: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = get().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Polls `get` every 100 ms until it returns nothing; panics naming `what` and what was still
/// there after `limit`.
pub async fn until_empty<T, F, Fut>(what: &str, limit: Duration, mut get: F)
where
    T: std::fmt::Debug,
    F: FnMut() -> Fut,
    Fut: Future<Output = Vec<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        let left = get().await;
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}; still there: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
