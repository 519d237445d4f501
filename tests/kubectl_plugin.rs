//! The binary as the kubectl plugin `kubectl guard`: found by the real kubectl on `PATH` as
//! `kubectl-guard`, run by it against the real cluster with the user's kubeconfig (and its
//! context's namespace), and the krew manifest (plugins/guard.yaml) that installs it so.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use disruption_guard::resources::{Phase, TestWindow};
use kube::Api;
use serde_json::Value;
use support::operator::{Operator, binary};
use support::windows::{is_ready, is_released};
use support::{kubernetes_bin, repo_root, with_namespace};

/// A directory holding `kubectl-guard`, a symlink to the built binary, as a user installs it
/// by hand; and a copy of the test kubeconfig whose current context's namespace is `ns`.
fn plugin_home(ns: &str) -> (PathBuf, PathBuf) {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("plugin-{ns}"));
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let link = bin.join("kubectl-guard");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(binary(), &link).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::copy(support::kubeconfig(), &kubeconfig).unwrap();
    let set = Command::new(kubectl_path())
        .env("KUBECONFIG", &kubeconfig)
        .args(["config", "set-context", "--current", "--namespace", ns])
        .output()
        .unwrap();
    assert!(set.status.success(), "{set:?}");
    (bin, kubeconfig)
}

fn kubectl_path() -> PathBuf {
    let built = kubernetes_bin("kubectl");
    assert!(built.exists(), "kubectl is built with the test cluster");
    built
}

/// The real kubectl, finding plugins only in `bin` (and the system's own directories).
fn kubectl(bin: &Path, kubeconfig: &Path) -> Command {
    let mut cmd = Command::new(kubectl_path());
    cmd.env_clear()
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env("KUBECONFIG", kubeconfig)
        .env("HOME", bin.parent().unwrap());
    cmd
}

fn ok(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed with {}:\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).unwrap()
}

#[tokio::test]
async fn kubectl_lists_the_plugin_and_kubectl_guard_opens_and_closes_a_window_in_the_contexts_namespace()
 {
    with_namespace(|client, ns| async move {
        let _op = Operator::start(&ns, &[]).await;
        let (bin, kubeconfig) = plugin_home(&ns);
        let kubectl = || kubectl(&bin, &kubeconfig);

        let listed = stdout(&ok(kubectl().args(["plugin", "list"])));
        let link = bin.join("kubectl-guard");
        assert!(listed.contains(&link.display().to_string()), "{listed}");

        let help = stdout(&ok(kubectl().args(["guard", "open", "--help"])));
        assert!(
            help.contains("Usage: kubectl guard open [OPTIONS]"),
            "{help}"
        );

        // No -n: the window lands in the context's namespace, as kubectl's own objects would.
        let out = ok(kubectl().args([
            "guard", "open", "--name", "w", "-l", "app=web", "--ttl", "5m", "-o", "name",
        ]));
        assert_eq!(stdout(&out), "w\n");
        let windows = Api::<TestWindow>::namespaced(client.clone(), &ns);
        let window = windows.get("w").await.unwrap();
        assert!(
            is_ready(&window),
            "open waited for Ready: {:?}",
            window.status
        );

        // -l selects pods here too: the window over app=web is listed for its pods only.
        let listed = |selector: &str| {
            stdout(&ok(
                kubectl().args(["guard", "list", "-l", selector, "-o", "name"])
            ))
        };
        assert_eq!(listed("app=web"), "w\n");
        assert_eq!(listed("app in (web,db),tier=backend"), "w\n");
        assert_eq!(listed("app=db"), "");
        assert_eq!(listed("!app"), "");

        let out = ok(kubectl().args(["guard", "close", "w", "-o", "json"]));
        let view: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(view["name"], "w", "{view}");
        let window = windows.get("w").await.unwrap();
        let status = window.status.clone().unwrap_or_default();
        assert_eq!(status.phase, Phase::Closed, "{status:?}");
        assert!(
            is_released(&window),
            "close waited for the release: {status:?}"
        );
    })
    .await;
}

#[test]
fn a_usage_error_through_kubectl_names_kubectl_guard() {
    let (bin, kubeconfig) = plugin_home("usage");
    let out = kubectl(&bin, &kubeconfig)
        .args(["guard", "close"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Usage: kubectl guard close"), "{err}");
}

/// The manifest's shape as krew reads it (krew.googlecontainertools.github.com/v1alpha2), for
/// this version: every platform installs its release archive's binary as `kubectl-guard`.
#[test]
fn the_krew_manifest_installs_each_platforms_release_archive_as_kubectl_guard() {
    let text = std::fs::read_to_string(repo_root().join("plugins/guard.yaml")).unwrap();
    let manifest: Value = serde_saphyr::from_str(&text).unwrap();
    assert_eq!(
        manifest["apiVersion"],
        "krew.googlecontainertools.github.com/v1alpha2"
    );
    assert_eq!(manifest["kind"], "Plugin");
    assert_eq!(manifest["metadata"]["name"], "guard", "the file's name");
    let version = env!("CARGO_PKG_VERSION");
    let spec = &manifest["spec"];
    assert_eq!(spec["version"], format!("v{version}"));
    for field in ["shortDescription", "description", "homepage"] {
        assert!(
            spec[field].as_str().is_some_and(|s| !s.is_empty()),
            "{field}"
        );
    }
    let mut platforms = Vec::new();
    for platform in spec["platforms"].as_array().unwrap() {
        let labels = &platform["selector"]["matchLabels"];
        let (os, arch) = (
            labels["os"].as_str().unwrap(),
            labels["arch"].as_str().unwrap(),
        );
        platforms.push(format!("{os}/{arch}"));
        let archive = format!("disruption-guard-{version}-{os}-{arch}.tar.gz");
        let uri = platform["uri"].as_str().unwrap();
        assert_eq!(
            uri,
            format!(
                "https://github.com/disruption-guard/disruption-guard/releases/download/v{version}/{archive}"
            )
        );
        let sha = platform["sha256"].as_str().unwrap();
        assert!(
            sha.len() == 64 && sha.bytes().all(|b| b.is_ascii_hexdigit()),
            "{uri}: {sha}"
        );
        assert_eq!(platform["bin"], "kubectl-guard", "{uri}");
        let files = platform["files"].as_array().unwrap();
        assert!(
            files
                .iter()
                .any(|f| f["from"] == "disruption-guard" && f["to"] == "./kubectl-guard"),
            "{uri}: {files:?}"
        );
        assert!(files.iter().any(|f| f["from"] == "LICENSE"), "{uri}");
    }
    platforms.sort();
    assert_eq!(
        platforms,
        ["darwin/amd64", "darwin/arm64", "linux/amd64", "linux/arm64"]
    );
}
