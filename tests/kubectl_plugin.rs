//! The binary as the kubectl plugin `kubectl guard`: found by the real kubectl on `PATH` as
//! `kubectl-guard`, run by it against the real cluster with the user's kubeconfig (and its
//! context's namespace), and the krew manifest (plugins/guard.yaml) that installs it so.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use disruption_guard::resources::{Phase, TestWindow};
use kube::Api;
use serde_json::Value;
use support::cli::{run_ok as ok, stdout};
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

/// A release as the release workflow makes it (the archive of the binary and LICENSE, its
/// SHA256SUMS, `plugins/render`'s manifest), installed by the real krew from that archive: the
/// plugin is then `kubectl guard`, from krew's own bin directory.
#[test]
fn krew_installs_the_rendered_manifest_from_a_release_archive_as_kubectl_guard() {
    let krew = tool(
        "tests/tools/go-tool",
        &["sigs.k8s.io/krew/cmd/krew", "v0.4.3", "krew"],
    );
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("krew-release");
    let _ = std::fs::remove_dir_all(&dir);
    let (staged, bin) = (dir.join("staged"), dir.join("bin"));
    std::fs::create_dir_all(&staged).unwrap();
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy(binary(), staged.join("disruption-guard")).unwrap();
    std::fs::copy(repo_root().join("LICENSE"), staged.join("LICENSE")).unwrap();
    std::os::unix::fs::symlink(&krew, bin.join("kubectl-krew")).unwrap();

    let version = "9.8.7";
    let mut sums = String::new();
    for arch in ["amd64", "arm64"] {
        let archive = format!("disruption-guard-{version}-linux-{arch}.tar.gz");
        ok(Command::new("tar")
            .arg("-czf")
            .arg(dir.join(&archive))
            .arg("-C")
            .arg(&staged)
            .args(["disruption-guard", "LICENSE"]));
        let sum = stdout(&ok(Command::new("sha256sum")
            .arg(&archive)
            .current_dir(&dir)));
        sums.push_str(&sum);
    }
    std::fs::write(dir.join("SHA256SUMS"), sums).unwrap();
    let rendered = ok(Command::new(repo_root().join("plugins/render"))
        .args([version, "SHA256SUMS"])
        .current_dir(&dir));
    std::fs::write(dir.join("guard.yaml"), &rendered.stdout).unwrap();
    let manifest = stdout(&rendered);
    assert!(
        manifest.contains(&format!("version: \"v{version}\"")),
        "{manifest}"
    );
    assert!(
        !manifest.contains(&"0".repeat(64)),
        "every checksum filled in: {manifest}"
    );

    // krew's root under the test directory; no index, no network: the manifest and archive.
    let kubeconfig = support::kubeconfig();
    let krew_cmd = |root: &str, args: &[&str]| {
        let mut cmd = kubectl(&bin, kubeconfig);
        cmd.env("KREW_ROOT", dir.join(root))
            .args(args)
            .current_dir(&dir)
            .stdin(std::process::Stdio::null());
        cmd
    };
    let archive = format!("disruption-guard-{version}-linux-{}.tar.gz", host_arch());
    let install = |manifest: &str| {
        let archive = format!("--archive={archive}");
        ["krew", "install", manifest, &archive].map(String::from)
    };
    let args = install("--manifest=guard.yaml");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    ok(&mut krew_cmd("krew", &args));
    let installed = dir.join("krew/bin/kubectl-guard");
    assert!(installed.exists(), "krew links {}", installed.display());

    let mut guard = kubectl(&dir.join("krew/bin"), kubeconfig);
    let help = stdout(&ok(guard.args(["guard", "close", "--help"])));
    assert!(help.contains("Usage: kubectl guard close"), "{help}");
    // A checksum that does not match is refused: krew checks what the manifest names.
    let host_sum = sums_of(&dir, &archive);
    let tampered = manifest.replace(&host_sum, &"a".repeat(64));
    std::fs::write(dir.join("tampered.yaml"), tampered).unwrap();
    let args = install("--manifest=tampered.yaml");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = krew_cmd("krew-tampered", &args).output().unwrap();
    assert!(!out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("checksum does not match"), "{err}");
    assert!(!dir.join("krew-tampered/bin/kubectl-guard").exists());
}

/// The checksum SHA256SUMS in `dir` gives `archive`.
fn sums_of(dir: &Path, archive: &str) -> String {
    let sums = std::fs::read_to_string(dir.join("SHA256SUMS")).unwrap();
    let line = sums.lines().find(|l| l.ends_with(archive)).unwrap();
    line.split_whitespace().next().unwrap().to_string()
}

/// The architecture of this machine in krew's (Go's) names.
fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => panic!("no release archive for {other}"),
    }
}

/// Runs a script of the repository that builds a tool and prints its path.
fn tool(script: &str, args: &[&str]) -> PathBuf {
    let out = ok(Command::new(repo_root().join(script)).args(args));
    PathBuf::from(stdout(&out).trim())
}
