//! The operator running with exactly the chart's RBAC (a token of the chart's ServiceAccount):
//! proof that the ClusterRole and Role grant every verb the code uses.

mod support;

use std::time::Duration;

use support::chart_identity::ChartIdentity;
use support::operator::Operator;
use support::{wait, with_namespace};

#[tokio::test]
async fn the_operator_starts_and_takes_the_lease_as_the_charts_service_account() {
    with_namespace(|_client, ns| async move {
        let identity = ChartIdentity::install(&ns);
        let op = Operator::start_as(
            &ns,
            vec![
                format!("--namespaces={ns}"),
                "--insecure-no-auth".into(),
                "--leader-election".into(),
                format!("--leader-election-namespace={ns}"),
                "--leader-election-identity=chart-sa".into(),
            ],
            identity.kubeconfig.clone(),
        )
        .await;
        wait::until(
            "the chart's ServiceAccount to hold the Lease",
            Duration::from_secs(15),
            || async {
                op.metrics()
                    .await
                    .lines()
                    .any(|l| l.trim() == "disruption_guard_leader 1")
            },
        )
        .await;
        let log = op.log_text();
        assert!(
            !log.contains("forbidden"),
            "no request was forbidden:\n{log}"
        );
    })
    .await;
}
