//! One call to the API server on behalf of an HTTP request, bounded in time: an API server that
//! stopped answering (a stalled connection, a paused etcd) makes the request a 503 problem
//! after [`CALL_TIMEOUT`], so a client never hangs on it and retries instead.

use std::future::Future;
use std::time::Duration;

/// Longest one call to the API server may take before the request fails as unreachable.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// `call`, failing as unreachable (which [`super::problem::ApiError::from_kube`] makes a 503)
/// when the API server does not answer within [`CALL_TIMEOUT`].
pub async fn bounded<T>(
    call: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, kube::Error> {
    within(CALL_TIMEOUT, call).await
}

async fn within<T>(
    limit: Duration,
    call: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, kube::Error> {
    tokio::time::timeout(limit, call).await.unwrap_or_else(|_| {
        Err(kube::Error::Service(
            format!("no answer within {}s", limit.as_secs()).into(),
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operations::problem::ApiError;
    use axum::http::StatusCode;

    #[tokio::test]
    async fn an_api_server_that_does_not_answer_is_a_503_after_the_bound() {
        let hung = within(
            Duration::from_millis(10),
            std::future::pending::<Result<(), kube::Error>>(),
        );
        let err = ApiError::from_kube(hung.await.unwrap_err(), "reading window w");
        assert_eq!(err.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(err.to_string().contains("no answer within"), "{err}");
    }

    #[tokio::test]
    async fn an_answer_in_time_passes_through() {
        let ok = within(Duration::from_secs(1), async { Ok::<_, kube::Error>(7) });
        assert_eq!(ok.await.unwrap(), 7);
    }
}
