//! The Helm chart: `helm lint`, `helm template` through kubeconform `--strict` (schemas taken
//! from the test cluster's own OpenAPI document) for every values file in
//! `tests/chart/values/`, and a real `helm install` into the test cluster.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use support::repo_root;

fn tool(name: &str) -> PathBuf {
    support::cached_tool("helm-v", name)
}

fn chart() -> PathBuf {
    repo_root().join("charts/disruption-guard")
}

fn values_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo_root().join("tests/chart/values"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(files.len() >= 3, "several values files are checked");
    files
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// kubeconform schemas generated once from the test cluster's /openapi/v2.
fn schemas() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("kubeconform-schemas");
        let openapi = run(support::kubectl().args(["get", "--raw", "/openapi/v2"])).stdout;
        let mut generator = Command::new("python3")
            .arg(repo_root().join("tests/chart/openapi-to-jsonschema.py"))
            .arg(&dir)
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        generator.stdin.take().unwrap().write_all(&openapi).unwrap();
        assert!(
            generator.wait().unwrap().success(),
            "generating schemas failed"
        );
        dir
    })
}

#[test]
fn helm_lint_passes_for_every_values_file() {
    for values in values_files() {
        run(Command::new(tool("helm"))
            .arg("lint")
            .arg("--strict")
            .arg(chart())
            .arg("-f")
            .arg(&values));
    }
}

#[test]
fn every_rendered_values_file_passes_kubeconform_strict() {
    for values in values_files() {
        let rendered = run(Command::new(tool("helm"))
            .args([
                "template",
                "guard",
                "--namespace",
                "disruption-guard",
                "--include-crds",
                "--kube-version",
                "1.36.3",
            ])
            .arg(chart())
            .arg("-f")
            .arg(&values))
        .stdout;
        let file = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "rendered-{}",
            values.file_name().unwrap().to_string_lossy()
        ));
        std::fs::write(&file, &rendered).unwrap();
        // prometheus-operator kinds have no schema in a cluster without its CRDs.
        let out = run(Command::new(tool("kubeconform"))
            .args([
                "-strict",
                "-summary",
                "-output",
                "text",
                "-skip",
                "ServiceMonitor,PrometheusRule",
            ])
            .arg("-schema-location")
            .arg(format!(
                "{}/{{{{ .ResourceKind }}}}{{{{ .KindSuffix }}}}.json",
                schemas().display()
            ))
            .arg(&file));
        let summary = String::from_utf8_lossy(&out.stdout);
        eprintln!("{}: {summary}", values.display());
        assert!(summary.contains("Invalid: 0, Errors: 0"), "{summary}");
    }
}

#[test]
fn kubeconform_rejects_a_manifest_with_an_unknown_field() {
    // Proves the strict schemas bite: the same check as above on a broken Deployment.
    let file = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("broken.yaml");
    std::fs::write(
        &file,
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  replicas: 1\n  replicaz: 2\n  selector: {matchLabels: {a: b}}\n  template:\n    metadata: {labels: {a: b}}\n    spec: {containers: [{name: c, image: i}]}\n",
    )
    .unwrap();
    let out = Command::new(tool("kubeconform"))
        .args(["-strict", "-summary"])
        .arg("-schema-location")
        .arg(format!(
            "{}/{{{{ .ResourceKind }}}}{{{{ .KindSuffix }}}}.json",
            schemas().display()
        ))
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success(), "kubeconform must reject replicaz");
}

#[tokio::test]
async fn helm_install_with_default_values_succeeds_in_the_test_cluster() {
    support::with_namespace(|_client, ns| async move {
        let release = format!("guard-{}", &ns[ns.len() - 8..]);
        run(Command::new(tool("helm"))
            .args([
                "install",
                &release,
                "--namespace",
                &ns,
                "--wait",
                "--timeout",
                "60s",
            ])
            .arg(chart())
            .env("KUBECONFIG", support::kubeconfig()));
        let pods = run(support::kubectl().args(["get", "pods", "-n", &ns, "-o", "name"])).stdout;
        assert_eq!(
            String::from_utf8_lossy(&pods).lines().count(),
            2,
            "two operator replicas by default"
        );
        run(Command::new(tool("helm"))
            .args(["uninstall", &release, "--namespace", &ns, "--wait"])
            .env("KUBECONFIG", support::kubeconfig()));
        let left = support::kubectl()
            .args(["get", "clusterrole", &format!("{release}-disruption-guard")])
            .output()
            .unwrap();
        assert!(!left.status.success(), "uninstall removes the ClusterRole");
    })
    .await;
}
