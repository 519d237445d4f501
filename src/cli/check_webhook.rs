//! `disruption-guard check-webhook`: proves that the API server calls the eviction webhook.
//!
//! It sends the webhook probe ([`probe`]: a dry-run eviction of a pod that does not exist)
//! through the API server, in `-n NAMESPACE`, as the kubeconfig's user (in a pod: its
//! ServiceAccount, which needs `create` on `pods/eviction` there), again every
//! [`INTERVAL`] until the webhook answers or `--timeout` passes. Exit 0 naming the replica
//! that answered; otherwise an error saying what the API server answered and what to check.
//! The chart runs it as its `helm test`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{EvictParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

use crate::intercept::probe::{self, Outcome};
use crate::resources::duration;

/// Wait between two probes.
pub const INTERVAL: Duration = Duration::from_secs(2);

/// Flags of `check-webhook` (`-n`, `--kubeconfig` and `--context` are the global ones).
#[derive(Debug, Clone, Args)]
pub struct CheckWebhookArgs {
    /// Keep probing this long while the webhook does not answer (an operator that is still
    /// starting); a refusal by the API server (RBAC) ends the check at once.
    #[arg(long, default_value = "30s", value_parser = duration::parse)]
    pub timeout: Duration,
}

/// Where the probe goes: the cluster and the namespace.
pub struct Target {
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
    /// `-n`; else the kubeconfig context's namespace, or the pod's own.
    pub namespace: Option<String>,
}

/// Runs the check; `Ok` once the webhook answered (printed on stdout).
pub async fn run(args: CheckWebhookArgs, target: Target) -> anyhow::Result<()> {
    let config = config(&target).await?;
    let namespace = target
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    let client = Client::try_from(config).context("building the Kubernetes client")?;
    let pods: Api<Pod> = Api::namespaced(client, &namespace);
    let deadline = Instant::now() + args.timeout;
    loop {
        let outcome = send(&pods).await;
        match &outcome {
            Ok(Outcome::Seen { replica }) => {
                println!(
                    "the API server calls the eviction webhook: a dry-run eviction in namespace \
                     {namespace} was answered by {replica}"
                );
                return Ok(());
            }
            Ok(Outcome::Refused { .. }) => bail!(explain(&outcome, &namespace)),
            _ if Instant::now() >= deadline => bail!(explain(&outcome, &namespace)),
            _ => tokio::time::sleep(INTERVAL).await,
        }
    }
}

/// One probe: the API server's answer, read; `Err` when it could not be asked.
async fn send(pods: &Api<Pod>) -> Result<Outcome, String> {
    // `?dryRun=All` on the request: the API server copies it into the Eviction's delete
    // options (`propagateDryRun`) before the webhooks run.
    let params = EvictParams {
        delete_options: None,
        post_options: PostParams {
            dry_run: true,
            ..PostParams::default()
        },
    };
    match pods.evict(probe::POD, &params).await {
        // A dry run of a pod that does not exist cannot succeed: something answered for it.
        Ok(status) => Ok(probe::read(200, &status.message)),
        Err(kube::Error::Api(status)) => Ok(probe::read(status.code, &status.message)),
        Err(other) => Err(format!("{other:#}")),
    }
}

/// What the last answer means, and what to check.
pub fn explain(outcome: &Result<Outcome, String>, namespace: &str) -> String {
    match outcome {
        Ok(Outcome::Seen { replica }) => format!("the webhook answered ({replica})"),
        Ok(Outcome::NotSeen) => format!(
            "the eviction webhook did not see a dry-run eviction in namespace {namespace}: the \
             API server went on to look up pod {pod} (404). Either no webhook registration \
             selects the namespace (`kubectl get validatingwebhookconfigurations -l \
             app.kubernetes.io/managed-by=disruption-guard -o yaml`: its namespaceSelector, the \
             chart's `namespaces`, the namespace label disruption-guard.io/intercept-evictions=false), \
             or the API server cannot reach the webhook and the registration fails open (the \
             operator not running, a NetworkPolicy, or on EKS with a custom CNI such as Calico \
             or Cilium in overlay mode: set `intercept.hostNetwork=true` and let the control \
             plane reach the nodes on the webhook port; see docs/eks.md)",
            pod = probe::POD
        ),
        Ok(Outcome::Refused { code, message }) => format!(
            "the API server refused the dry-run eviction in namespace {namespace} ({code}): \
             {message}; the check needs `create` on `pods/eviction` there"
        ),
        Ok(Outcome::Other { code, message }) => format!(
            "unexpected answer to the dry-run eviction in namespace {namespace} ({code}): {message}"
        ),
        Err(error) => format!("could not reach the API server: {error}"),
    }
}

/// The client's configuration: `--kubeconfig` or `--context` as kubectl reads them, else the
/// usual inference (`KUBECONFIG`, `~/.kube/config`, then the pod's ServiceAccount).
async fn config(target: &Target) -> anyhow::Result<Config> {
    let options = KubeConfigOptions {
        context: target.context.clone(),
        ..KubeConfigOptions::default()
    };
    Ok(match (&target.kubeconfig, &target.context) {
        (Some(path), _) => {
            let file = Kubeconfig::read_from(path)
                .with_context(|| format!("reading {}", path.display()))?;
            Config::from_custom_kubeconfig(file, &options).await?
        }
        (None, Some(_)) => Config::from_kubeconfig(&options).await?,
        (None, None) => Config::infer().await?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_failure_says_what_to_check() {
        let unseen = explain(&Ok(Outcome::NotSeen), "shop");
        assert!(unseen.contains("namespace shop"), "{unseen}");
        assert!(unseen.contains("intercept.hostNetwork"), "{unseen}");
        let refused = explain(
            &Ok(Outcome::Refused {
                code: 403,
                message: "forbidden".into(),
            }),
            "shop",
        );
        assert!(refused.contains("pods/eviction"), "{refused}");
        let down = explain(&Err("connection refused".into()), "shop");
        assert!(down.contains("connection refused"), "{down}");
    }
}
