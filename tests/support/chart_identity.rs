//! Runs the operator with exactly the chart's RBAC: renders the chart's ServiceAccount, RBAC
//! and admission policy templates into the test cluster (the `spec.openedBy` policy scoped to
//! the test's namespace, as `namespaces` scopes it, so parallel installs leave each other be), mints a token for that ServiceAccount (TokenRequest,
//! via `kubectl create token`) and writes a kubeconfig that uses it. A test that passes with
//! this kubeconfig proves the chart grants enough; a missing verb fails it with a 403.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use kube::config::Kubeconfig;

/// The chart's identity in one test namespace; its cluster-scoped RBAC is deleted on drop.
pub struct ChartIdentity {
    /// Kubeconfig authenticating as the chart's ServiceAccount.
    pub kubeconfig: PathBuf,
    /// The release's full name, which the chart's ServiceAccount and ClusterRoles are named by.
    pub fullname: String,
    rendered: Vec<u8>,
}

fn helm() -> PathBuf {
    super::cached_tool("helm-v", "helm")
}

/// The release's full name in `ns`, as [`ChartIdentity::install`] names it.
pub fn fullname(ns: &str) -> String {
    format!("dg-{}-disruption-guard", &ns[ns.len().saturating_sub(8)..])
}

impl ChartIdentity {
    /// Installs the chart's ServiceAccount, RBAC (the operator's, and the ClusterRoles for
    /// users of windows), the admission policy on the operator's writes and the one on
    /// `spec.openedBy` (for `ns` only) as release `dg-<ns>` in `ns`.
    pub fn install(ns: &str) -> ChartIdentity {
        Self::install_with(ns, &[])
    }

    /// As [`ChartIdentity::install`], with more `helm template` arguments (`--set …`).
    pub fn install_with(ns: &str, values: &[&str]) -> ChartIdentity {
        Self::install_templates(ns, &[], values)
    }

    /// As [`ChartIdentity::install`], with the chart's FlowSchemas and
    /// PriorityLevelConfigurations for its ServiceAccount too (deleted on drop).
    pub fn install_with_flow_control(ns: &str) -> ChartIdentity {
        Self::install_templates(ns, &["templates/flowcontrol.yaml"], &[])
    }

    fn install_templates(ns: &str, extra: &[&str], values: &[&str]) -> ChartIdentity {
        let release = format!("dg-{}", &ns[ns.len().saturating_sub(8)..]);
        let templates: Vec<&str> = [
            "templates/serviceaccount.yaml",
            "templates/rbac.yaml",
            "templates/user-roles.yaml",
            "templates/admission-policy.yaml",
        ]
        .into_iter()
        .chain(extra.iter().copied())
        .collect();
        let mut rendered = render(&release, ns, &templates, values);
        let only_ns = format!("namespaces={{{ns}}}");
        let scoped: Vec<&str> = values.iter().copied().chain(["--set", &only_ns]).collect();
        rendered.extend(render(
            &release,
            ns,
            &["templates/testwindow-policy.yaml"],
            &scoped,
        ));
        let mut apply = super::kubectl()
            .args(["apply", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        apply.stdin.take().unwrap().write_all(&rendered).unwrap();
        assert!(
            apply.wait().unwrap().success(),
            "applying the chart's RBAC failed"
        );

        let sa = format!("{release}-disruption-guard");
        ChartIdentity {
            kubeconfig: token_kubeconfig(ns, &sa),
            fullname: sa,
            rendered,
        }
    }

    /// The identity of release `release`'s ServiceAccount, installed by `helm install` (nothing
    /// is applied or deleted here).
    pub fn of_release(ns: &str, release: &str) -> ChartIdentity {
        let fullname = format!("{release}-disruption-guard");
        ChartIdentity {
            kubeconfig: token_kubeconfig(ns, &fullname),
            fullname,
            rendered: Vec::new(),
        }
    }
}

/// `helm template` of release `release` in `ns`: only `templates`, with `values` (`--set …`).
fn render(release: &str, ns: &str, templates: &[&str], values: &[&str]) -> Vec<u8> {
    let out = Command::new(helm())
        .args(["template", release, "--namespace", ns, "--kube-version"])
        .arg(super::cluster_version("KUBERNETES").trim_start_matches('v'))
        .args(templates.iter().flat_map(|t| ["--show-only", t]))
        .args(values)
        .arg(super::repo_root().join("charts/disruption-guard"))
        .output()
        .expect("helm template");
    assert!(
        out.status.success(),
        "helm template: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Mints a token for ServiceAccount `sa` in `ns` and writes a kubeconfig that uses it.
pub fn token_kubeconfig(ns: &str, sa: &str) -> PathBuf {
    let token = super::kubectl()
        .args(["create", "token", sa, "-n", ns, "--duration=2h"])
        .output()
        .unwrap();
    assert!(
        token.status.success(),
        "kubectl create token: {}",
        String::from_utf8_lossy(&token.stderr)
    );
    let token = String::from_utf8(token.stdout).unwrap().trim().to_string();

    let admin = Kubeconfig::read_from(super::kubeconfig()).unwrap();
    let cluster = admin.clusters[0].cluster.clone().unwrap();
    let kubeconfig =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("chart-sa-{ns}.kubeconfig"));
    let yaml = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": {
            "server": cluster.server,
            "certificate-authority": cluster.certificate_authority,
        }}],
        "users": [{"name": "chart-sa", "user": {"token": token}}],
        "contexts": [{"name": "chart-sa", "context": {"cluster": "test", "user": "chart-sa", "namespace": ns}}],
        "current-context": "chart-sa",
    });
    std::fs::write(&kubeconfig, serde_json::to_vec(&yaml).unwrap()).unwrap();
    kubeconfig
}

impl Drop for ChartIdentity {
    fn drop(&mut self) {
        if self.rendered.is_empty() {
            return;
        }
        if let Ok(mut delete) = super::kubectl()
            .args(["delete", "--ignore-not-found", "--wait=false", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
        {
            let _ = delete.stdin.take().unwrap().write_all(&self.rendered);
            let _ = delete.wait();
        }
    }
}
