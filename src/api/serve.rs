//! The API's HTTP/1 server, with the limits that keep a flood of connections from taking the
//! process down: at most `--max-connections` open at once (further clients wait in the
//! listen queue of the kernel, as Go's `netutil.LimitListener` makes them), and a connection
//! whose request headers are not complete `--header-read-timeout` after it opened, or after
//! its previous answer, is closed (a slowloris client, or one that connects and sends nothing).
//! One client address holds at most `--max-connections-per-address` of them; a connection
//! beyond that is answered 429 at once and closed.
//!
//! The limits are the operator's one limited server ([`crate::runtime::limited_server`]),
//! shared with the eviction webhook; what is the API's own is the refusal (a problem body) and
//! its metrics.

use std::sync::Arc;

use axum::Router;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::ApiMetrics;
use crate::runtime::limited_server::{
    self, ConnectionCounts, ConnectionEvents, Port, Protocols, Timeout,
};

pub use crate::runtime::limited_server::ConnectionLimits;

/// The problem body a connection over its address's share is answered with.
const TOO_MANY_FROM_ADDRESS: &str = r#"{"type":"https://disruption-guard.io/problems/too-many-connections","title":"Too many connections","status":429,"detail":"this client address has --max-connections-per-address connections open already; close some, or raise the limit"}"#;

/// The whole HTTP response with [`TOO_MANY_FROM_ADDRESS`].
fn too_many_from_address() -> String {
    format!(
        "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/problem+json\r\n\
         connection: close\r\nretry-after: 1\r\ncontent-length: {}\r\n\r\n{TOO_MANY_FROM_ADDRESS}",
        TOO_MANY_FROM_ADDRESS.len()
    )
}

impl ConnectionEvents for ApiMetrics {
    fn counts(&self) -> &ConnectionCounts {
        &self.connections
    }
    fn timed_out(&self, ended: Timeout) {
        if ended == Timeout::HeaderRead {
            self.header_read_timeouts.inc();
        }
    }
}

/// Serves `router` on `listener` within `limits` until `shutdown`; requests in flight then get
/// [`CONNECTION_DRAIN`](crate::runtime::shutdown::CONNECTION_DRAIN) to finish.
pub async fn serve_on(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    metrics: Arc<ApiMetrics>,
    shutdown: CancellationToken,
) {
    metrics.connection_limit.set(limits.max_connections as i64);
    let port = Port {
        name: "API",
        limits,
        protocols: Protocols::Http1,
        refusal: Some(Arc::from(too_many_from_address().into_bytes())),
        events: metrics,
    };
    let close = shutdown.clone();
    limited_server::serve(
        listener,
        router,
        port,
        shutdown,
        |tcp, _| async move { Some(tcp) },
        move || close.clone().cancelled_owned(),
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::too_many_from_address;

    #[test]
    fn the_refusal_is_a_whole_http_response_with_a_problem_body() {
        let response = too_many_from_address();
        let (head, body) = response.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 429 "), "{head}");
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(length, body.len());
        let problem: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(problem["status"], 429);
    }
}
