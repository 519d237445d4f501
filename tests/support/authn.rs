//! The test cluster's structured authentication configuration (`--authentication-config`,
//! written by `tests/cluster/up`): a test makes the cluster's API server trust the shared test
//! issuer ([`super::issuer::Issuer::shared`]) with a JWT authenticator, the way a platform team
//! makes its clusters trust a CI provider. TokenReview then accepts the issuer's tokens and
//! maps them to the user `<USER_PREFIX><sub>`, which RBAC and SubjectAccessReview know.
//!
//! kube-apiserver watches the file and reloads it when it changes; the new configuration is in
//! force once the metric `apiserver_authentication_config_controller_last_config_info` carries
//! the SHA-256 of the file, which is what [`trust_shared_issuer`] waits for.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use super::issuer::Issuer;

/// Prefix of the user names the API server gives the issuer's tokens.
pub const USER_PREFIX: &str = "test-issuer:";

/// The audience the JWT authenticator requires: the operator's (`--token-audience` default).
pub const AUDIENCE: &str = "disruption-guard";

/// The user the API server maps a token of the shared issuer's ServiceAccount `ns/name` to.
pub fn user_for(ns: &str, name: &str) -> String {
    format!("{USER_PREFIX}{}", Issuer::subject(ns, name))
}

/// Makes the test cluster's API server trust the shared issuer (once per test binary; the
/// configuration is the same for every binary, so concurrent ones agree) and returns it.
pub fn trust_shared_issuer() -> &'static Issuer {
    static DONE: OnceLock<&'static Issuer> = OnceLock::new();
    DONE.get_or_init(|| {
        let issuer = Issuer::shared();
        let config = serde_json::json!({
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "AuthenticationConfiguration",
            "jwt": [{
                "issuer": {
                    "url": issuer.url(),
                    "audiences": [AUDIENCE],
                    "certificateAuthority": issuer.ca_pem(),
                },
                "claimMappings": {"username": {"claim": "sub", "prefix": USER_PREFIX}},
            }],
        });
        let text = serde_json::to_string_pretty(&config).unwrap() + "\n";
        let path = config_path();
        if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
            let tmp = path.with_extension("tmp");
            std::fs::write(&tmp, &text).expect("writing the authentication configuration");
            std::fs::rename(&tmp, &path).expect("replacing the authentication configuration");
        }
        wait_until_applied(&text, Duration::from_secs(90));
        issuer
    })
}

/// The file `tests/cluster/up` points `--authentication-config` at.
pub fn config_path() -> PathBuf {
    super::kubeconfig()
        .parent()
        .expect("the kubeconfig lives in the cluster's state directory")
        .join("authentication-config.yaml")
}

fn wait_until_applied(text: &str, limit: Duration) {
    let hash = sha256_hex(text);
    let started = Instant::now();
    loop {
        let out = super::kubectl()
            .args(["get", "--raw", "/metrics"])
            .output()
            .expect("kubectl get --raw /metrics");
        let metrics = String::from_utf8_lossy(&out.stdout);
        let applied = metrics.lines().any(|l| {
            l.starts_with("apiserver_authentication_config_controller_last_config_info")
                && l.contains(&format!("hash=\"sha256:{hash}\""))
        });
        if applied {
            eprintln!(
                "the API server applied the authentication configuration after {:?}",
                started.elapsed()
            );
            return;
        }
        assert!(
            started.elapsed() < limit,
            "the API server did not apply the authentication configuration in {limit:?}; \
             reloads: {}",
            metrics
                .lines()
                .filter(|l| l.starts_with("apiserver_authentication_config_controller"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn sha256_hex(text: &str) -> String {
    use std::io::Write;
    let mut child = Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("sha256sum");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8(out.stdout).unwrap()[..64].to_string()
}

/// Lets `user` open, read and close windows in `ns`, and waits until the API server's
/// authorizer knows it (RBAC reaches it through an informer).
pub async fn grant_windows(client: &kube::Client, ns: &str, user: &str) {
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "ci-windows"},
        "rules": [{
            "apiGroups": ["disruption-guard.io"],
            "resources": ["testwindows"],
            "verbs": ["create", "get", "list", "patch", "delete"]
        }]
    }))
    .unwrap();
    Api::<Role>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "ci-windows"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "ci-windows"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let can_i = || {
        super::kubectl()
            .args([
                "auth",
                "can-i",
                "create",
                "testwindows.disruption-guard.io",
                "-n",
                ns,
            ])
            .args(["--as", user])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let started = Instant::now();
    while !can_i() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "RBAC did not let {user} create testwindows in {ns} within 30 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
