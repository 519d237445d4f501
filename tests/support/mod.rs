//! Shared support for integration tests against the real local cluster.
//!
//! One cluster per test run: `KUBECONFIG` when set (the Makefile brings the cluster up),
//! otherwise `tests/cluster/up` is run once. Each test runs in its own random namespace, which
//! is dumped when the test fails and deleted afterwards.

#![allow(dead_code)]

pub mod action;
pub mod authn;
pub mod chart_identity;
pub mod cli;
pub mod drain;
pub mod examples;
pub mod faults;
pub mod fixtures;
pub mod intercept;
pub mod issuer;
pub mod karpenter;
pub mod operator;
pub mod pods;
pub mod previous;
pub mod proxy;
pub mod runner_files;
pub mod runner_token;
pub mod stats;
pub mod wait;
pub mod window_fields;
pub mod windows;

use std::future::Future;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use k8s_openapi::api::core::v1::{Namespace, Node, ServiceAccount};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use rand::Rng;

/// Label carried by every namespace a test creates.
pub const TEST_NAMESPACE_LABEL: &str = "disruption-guard.io/test";

/// Path of the kubeconfig of the shared test cluster, bringing the cluster up if needed.
pub fn kubeconfig() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        if let Some(path) = std::env::var_os("KUBECONFIG") {
            return PathBuf::from(path);
        }
        let up = repo_root().join("tests/cluster/up");
        let out = Command::new(&up)
            .output()
            .expect("running tests/cluster/up");
        assert!(
            out.status.success(),
            "tests/cluster/up failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8(out.stdout).expect("utf-8 from tests/cluster/up");
        let last = stdout
            .lines()
            .last()
            .expect("tests/cluster/up printed nothing");
        let path = last
            .strip_prefix("export KUBECONFIG=")
            .unwrap_or_else(|| panic!("unexpected last line of tests/cluster/up: {last}"));
        // SAFETY: set once, before any test spawns threads that read the environment of its
        // own, so child processes (kubectl) see the same cluster.
        unsafe { std::env::set_var("KUBECONFIG", path) };
        PathBuf::from(path)
    })
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The component cache `tests/cluster/build` fills (`DISRUPTION_GUARD_CACHE`).
pub fn cache_dir() -> PathBuf {
    std::env::var_os("DISRUPTION_GUARD_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/disruption-guard")
        })
}

/// A tool built into the cache: `<name>` in the first `<prefix>*` directory that has it.
pub fn cached_tool(prefix: &str, name: &str) -> PathBuf {
    std::fs::read_dir(cache_dir())
        .expect("the component cache (run tests/cluster/build)")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
                && p.join(name).exists()
        })
        .map(|p| p.join(name))
        .unwrap_or_else(|| panic!("{name} is not built: run tests/cluster/build --with-helm"))
}

/// A version `tests/cluster/up` chose: the `DISRUPTION_GUARD_<NAME>` variable it exports, else
/// the default pinned in `tests/cluster/lib.sh` (`DEFAULT_<NAME>_VERSION`).
pub fn cluster_version(name: &str) -> String {
    if let Ok(v) = std::env::var(format!("DISRUPTION_GUARD_{name}")) {
        return format!("v{}", v.trim_start_matches('v'));
    }
    let key = match name {
        "KUBERNETES" => "DEFAULT_K8S_VERSION=",
        other => &format!("DEFAULT_{other}_VERSION="),
    };
    let lib = std::fs::read_to_string(repo_root().join("tests/cluster/lib.sh")).expect("lib.sh");
    lib.lines()
        .find_map(|l| l.strip_prefix(key))
        .map(|v| v.trim_matches('"').to_string())
        .unwrap_or_else(|| panic!("tests/cluster/lib.sh has no {key}"))
}

/// A Kubernetes binary (kubectl, kube-apiserver, …) of the version the cluster runs.
pub fn kubernetes_bin(name: &str) -> PathBuf {
    cache_dir()
        .join(format!("kubernetes-{}", cluster_version("KUBERNETES")))
        .join(name)
}

/// kubectl built for the test cluster (falls back to `kubectl` on PATH).
pub fn kubectl() -> Command {
    let built = kubernetes_bin("kubectl");
    let mut cmd = Command::new(if built.exists() {
        built
    } else {
        PathBuf::from("kubectl")
    });
    cmd.env("KUBECONFIG", kubeconfig());
    cmd
}

/// Runs `cmd` with `input` on its standard input; its status and output.
pub fn run_with_input(mut cmd: Command, input: &[u8]) -> std::process::Output {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting a command");
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

/// A client for the test cluster. Create one per test: a client is bound to its runtime.
pub async fn client() -> Client {
    let kubeconfig = Kubeconfig::read_from(kubeconfig()).expect("reading the test kubeconfig");
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("loading the test kubeconfig");
    config.read_timeout = Some(std::time::Duration::from_secs(60));
    // Tests must see 429s (PDB-blocked evictions) instead of kube retrying them.
    config.default_retry = false;
    let client = Client::try_from(config).expect("building a client");
    report_versions(&client).await;
    client
}

/// Prints, once per test binary, the versions its cluster runs: the API server's own
/// `/version`, and the Karpenter and feature gates `tests/cluster/up` chose.
async fn report_versions(client: &Client) {
    static REPORTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if REPORTED.swap(true, std::sync::atomic::Ordering::SeqCst) {
        return;
    }
    let server = match client.apiserver_version().await {
        Ok(info) => info.git_version,
        Err(e) => format!("unknown ({e})"),
    };
    let gates = std::env::var("DISRUPTION_GUARD_FEATURE_GATES").unwrap_or_default();
    eprintln!(
        "test cluster: Kubernetes {server}, Karpenter {} (if running), feature gates: {}",
        cluster_version("KARPENTER"),
        if gates.is_empty() { "defaults" } else { &gates }
    );
}

/// Runs `test` in a fresh namespace; dumps the namespace when the test fails, then deletes it.
pub async fn with_namespace<F, Fut>(test: F)
where
    F: FnOnce(Client, String) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let client = client().await;
    let ns = create_test_namespace(&client).await;
    let result = tokio::spawn(test(client.clone(), ns.clone())).await;
    if result.is_err() {
        dump_namespace(&ns);
    }
    delete_test_namespace(&client, &ns).await;
    if let Err(err) = result {
        std::panic::resume_unwind(err.into_panic());
    }
}

/// Deletes a test namespace, its nodes and its windows' finalizers.
async fn delete_test_namespace(client: &Client, ns: &str) {
    let nodes: Api<Node> = Api::all(client.clone());
    let _ = nodes
        .delete_collection(
            &DeleteParams::background(),
            &ListParams::default().labels(&format!("{TEST_NAMESPACE_LABEL}={ns}")),
        )
        .await;
    release_windows(client, ns).await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let _ = namespaces.delete(ns, &DeleteParams::background()).await;
}

/// Takes the finalizer off the windows a test left, whose operator is gone with the test, so
/// that deleting the namespace never waits on them (a namespace stuck terminating, or a window
/// that outlives its namespace, would reach every later test that lists windows cluster-wide).
async fn release_windows(client: &Client, ns: &str) {
    // Read and written as raw JSON: a window with a value a typed client cannot read (as the
    // hostile-object tests store) is released too.
    let path = format!("/apis/disruption-guard.io/v1alpha1/namespaces/{ns}/testwindows");
    let list = http::Request::get(&path).body(Vec::new()).unwrap();
    let Ok(list) = client.request::<serde_json::Value>(list).await else {
        return; // no CRD (the uninstall test removes it): no windows
    };
    let names = list["items"].as_array().cloned().unwrap_or_default();
    for w in names {
        if let Some(name) = w["metadata"]["name"].as_str() {
            let unfinalized = serde_json::json!({"metadata": {"finalizers": null}});
            let patch = http::Request::patch(format!("{path}/{name}"))
                .header("content-type", "application/merge-patch+json")
                .body(serde_json::to_vec(&unfinalized).unwrap())
                .unwrap();
            let _ = client.request::<serde_json::Value>(patch).await;
        }
    }
}

/// Creates a namespace for a test (labelled as one), once its default ServiceAccount exists.
async fn create_test_namespace(client: &Client) -> String {
    let suffix: String = rand::rng()
        .sample_iter(rand::distr::Alphanumeric)
        .take(8)
        .map(|c| char::from(c).to_ascii_lowercase())
        .collect();
    let name = format!("dg-test-{suffix}");
    let ns: Namespace = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {TEST_NAMESPACE_LABEL: "true"}}
    }))
    .expect("namespace fixture");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("creating the test namespace");
    // The ServiceAccount admission plugin refuses pods until the namespace's default
    // ServiceAccount exists.
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), &name);
    wait::until(
        "the default ServiceAccount",
        std::time::Duration::from_secs(30),
        || async { sas.get_opt("default").await.ok().flatten().is_some() },
    )
    .await;
    name
}

/// Creates a kwok node for this test only (deleted with the namespace) and waits until it is
/// Ready. Its pods can be pinned with `node_selector("disruption-guard.io/test-node", name)`.
pub async fn create_ready_node(client: &Client, ns: &str, name: &str) -> Node {
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .create(&PostParams::default(), &fixtures::kwok_node(name, ns))
        .await
        .expect("creating a kwok node");
    wait::for_some(
        "the node to become Ready",
        std::time::Duration::from_secs(30),
        || async { nodes.get(name).await.ok().filter(is_node_ready) },
    )
    .await
}

/// Whether the node's Ready condition is True.
pub fn is_node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Prints the namespace's objects and events to stderr (cargo shows it for failed tests).
pub fn dump_namespace(ns: &str) {
    let out = kubectl()
        .args(["get", "all,pdb,events,testwindows", "-n", ns, "-o", "yaml"])
        .output();
    match out {
        Ok(out) => eprintln!(
            "--- objects in namespace {ns} ---\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(err) => eprintln!("could not dump namespace {ns}: {err}"),
    }
}

/// A Kubernetes token for ServiceAccount `sa` in `ns` with `audience` (TokenRequest).
pub fn service_account_token(ns: &str, sa: &str, audience: &str) -> String {
    let out = kubectl()
        .args([
            "create",
            "token",
            sa,
            "-n",
            ns,
            "--audience",
            audience,
            "--duration=10m",
        ])
        .output()
        .expect("kubectl create token");
    assert!(
        out.status.success(),
        "kubectl create token: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}
