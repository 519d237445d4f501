//! A real OIDC issuer for the tests: a second kube-apiserver, used only for its ServiceAccount
//! token issuer.
//!
//! Why this one, and no mock: kube-apiserver v1.36.3 (the binary `tests/cluster/build` already
//! builds into the component cache, the same one the test cluster runs) is a complete OIDC
//! issuer. With `--service-account-issuer=https://127.0.0.1:<port>` it serves
//! `/.well-known/openid-configuration` and `/openid/v1/jwks` over TLS, exactly as EKS/GKE/AKS
//! publish their clusters' issuers, and its TokenRequest API (`kubectl create token --audience
//! … --duration …`) mints RS256 tokens with real claims: `iss`, `sub`
//! (`system:serviceaccount:<ns>:<name>`), `aud` (an array), `exp`, `nbf`, `iat`, `jti`, the
//! `kubernetes.io` claim, and `kid` in the header (base64url of the SHA-256 of the public key's
//! DER). Nothing is simulated: discovery, key publication, signing and key rotation are
//! upstream code. It costs no new component (no Dex or Hydra build) and starts in about 5 s
//! with an etcd of its own (the cached etcd binary, `--unsafe-no-fsync`, data in its directory).
//!
//! Anonymous discovery is allowed as on a public issuer: `--anonymous-auth=true` and the
//! built-in ClusterRole `system:service-account-issuer-discovery` bound to the group
//! `system:unauthenticated`. TLS: the issuer has a CA of its own ([`Issuer::ca_pem`],
//! [`Issuer::ca_file`]), not the test cluster's, so a verifier must be given it.
//!
//! Two ways to get one:
//! - [`Issuer::shared`]: one issuer per test cluster, started on first use by any test binary
//!   (a file lock orders concurrent starts) and reused afterwards; its processes are recorded
//!   in the cluster's `pids/`, so `tests/cluster/down` stops it. Its URL and keys stay the same
//!   across test binaries, which a cluster-level JWT authenticator needs. It cannot be rotated.
//! - [`Issuer::start`]: a private issuer owned by one test, stopped when dropped. Use it to
//!   rotate keys.
//!
//! Key rotation, as kube-apiserver does it: it signs with one key
//! (`--service-account-signing-key-file`) and publishes every key given with
//! `--service-account-key-file` (repeatable). [`Issuer::rotate_signing_key`] restarts the API
//! server (same port, same etcd: the URL and the ServiceAccounts stay) signing with a new key
//! while still publishing the old ones, so tokens minted before stay valid and new tokens carry
//! the new `kid`; the issuer is unreachable for the few seconds of the restart.
//! [`Issuer::drop_old_keys`] restarts it publishing only the current key: tokens signed with an
//! old key then fail verification anywhere that re-fetches the JWKS.
//!
//! Limit of the real thing: TokenRequest refuses durations under 10 minutes, and never mints an
//! expired or not-yet-valid token. Tests that need such tokens sign their own claims with the
//! issuer's real key ([`Issuer::signing_key_file`], [`Issuer::kid`]): the issuer publishes that
//! key, so only the claims are made up.

use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A running OIDC issuer (a kube-apiserver's ServiceAccount token issuer).
pub struct Issuer {
    /// Where its PKI, keys, etcd data, kubeconfig and logs live.
    dir: PathBuf,
    /// Where its PID files live (the cluster's `pids/` for the shared issuer).
    pids: PathBuf,
    port: u16,
    etcd_port: u16,
    /// The private issuer's processes, killed on drop.
    owned: Option<Owned>,
}

struct Owned {
    etcd: Child,
    apiserver: Child,
}

/// Name of the ClusterRoleBinding that lets anyone read discovery and the JWKS.
const DISCOVERY_BINDING: &str = "oidc-discovery-anonymous";

impl Issuer {
    /// The issuer shared by every test of this cluster (started on first use).
    pub fn shared() -> &'static Issuer {
        static SHARED: OnceLock<Issuer> = OnceLock::new();
        SHARED.get_or_init(|| {
            let state = super::kubeconfig()
                .parent()
                .expect("the kubeconfig lives in the cluster's state directory")
                .to_path_buf();
            let dir = state.join("issuer");
            fs::create_dir_all(&dir).expect("creating the issuer's directory");
            let pids = state.join("pids");
            fs::create_dir_all(&pids).expect("creating the cluster's pids directory");
            let lock = File::create(dir.join("lock")).expect("creating the issuer's lock file");
            lock.lock().expect("locking the issuer's directory");
            if let Some(running) = Issuer::running(&dir, &pids) {
                return running;
            }
            Issuer::boot(dir, pids, false)
        })
    }

    /// A private issuer for one test, stopped (and its directory removed) when dropped.
    pub fn start() -> Issuer {
        let dir = std::env::temp_dir().join(format!(
            "dg-issuer-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
        fs::create_dir_all(&dir).expect("creating the issuer's directory");
        let pids = dir.join("pids");
        fs::create_dir_all(&pids).unwrap();
        Issuer::boot(dir, pids, true)
    }

    /// The issuer URL (`iss`), e.g. `https://127.0.0.1:40123`.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// PEM of the CA that signed the issuer's serving certificate.
    pub fn ca_pem(&self) -> String {
        fs::read_to_string(self.ca_file()).expect("reading the issuer's CA")
    }

    /// Path of the CA certificate file (PEM).
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("pki/ca.crt")
    }

    /// A token for ServiceAccount `ns/name` (created in the issuer if missing), for `audience`,
    /// valid for `duration` (at least 10 minutes: the TokenRequest API refuses less).
    pub fn token(&self, ns: &str, name: &str, audience: &str, duration: Duration) -> String {
        self.ensure_service_account(ns, name);
        let out = self
            .kubectl()
            .args(["create", "token", name, "-n", ns, "--audience", audience])
            .arg(format!("--duration={}s", duration.as_secs()))
            .output()
            .expect("kubectl create token");
        assert!(
            out.status.success(),
            "kubectl create token against the issuer: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    /// The `sub` of the tokens minted for ServiceAccount `ns/name`.
    pub fn subject(ns: &str, name: &str) -> String {
        format!("system:serviceaccount:{ns}:{name}")
    }

    /// The decoded header and claims of a JWT (not verified: for assertions only).
    pub fn decode(token: &str) -> (serde_json::Value, serde_json::Value) {
        use base64::Engine;
        let part = |s: &str| -> serde_json::Value {
            let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(s)
                .expect("base64url JWT part");
            serde_json::from_slice(&bytes).expect("JSON JWT part")
        };
        let mut parts = token.split('.');
        let header = part(parts.next().expect("JWT header"));
        let claims = part(parts.next().expect("JWT claims"));
        (header, claims)
    }

    /// GETs `path` (e.g. `/openid/v1/jwks`) from the issuer anonymously, as any verifier would,
    /// trusting only the issuer's CA; returns the JSON body.
    pub fn get_anonymously(&self, path: &str) -> serde_json::Value {
        let out = Command::new("curl")
            .args(["-sS", "--fail-with-body", "--max-time", "5", "--cacert"])
            .arg(self.ca_file())
            .arg(format!("{}{path}", self.url()))
            .output()
            .expect("curl");
        assert!(
            out.status.success(),
            "GET {path} from the issuer: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("JSON from the issuer")
    }

    /// Path of the private key the issuer signs with now (PEM, RSA 2048, RS256).
    pub fn signing_key_file(&self) -> PathBuf {
        self.key_file(self.current_key(), "key")
    }

    /// The `kid` of the key the issuer signs with now, as its JWKS and token headers show it.
    pub fn kid(&self) -> String {
        let public = self.key_file(self.current_key(), "pub");
        let script = "openssl pkey -pubin -in \"$1\" -outform DER | openssl dgst -sha256 -binary \
                      | basenc --base64url | tr -d '=\\n'";
        let out = Command::new("sh")
            .args(["-c", script, "kid"])
            .arg(&public)
            .output()
            .expect("openssl computes the kid");
        assert!(out.status.success(), "computing the kid failed");
        String::from_utf8(out.stdout).unwrap()
    }

    /// Restarts the issuer signing with a new key while it still publishes the old ones.
    pub fn rotate_signing_key(&mut self) {
        let next = self.current_key() + 1;
        new_signing_key(&self.dir, next);
        let mut published = self.published_keys();
        published.push(next);
        self.write_keys(next, &published);
        self.restart_apiserver();
    }

    /// Restarts the issuer publishing only the key it signs with now.
    pub fn drop_old_keys(&mut self) {
        let current = self.current_key();
        self.write_keys(current, &[current]);
        self.restart_apiserver();
    }

    /// kubectl (the cached one) talking to the issuer as its administrator.
    pub fn kubectl(&self) -> Command {
        let mut cmd = Command::new(k8s_bin("kubectl"));
        cmd.env("KUBECONFIG", self.dir.join("kubeconfig"));
        cmd
    }

    /// The issuer that runs in `dir` already, if its processes live and it answers.
    fn running(dir: &Path, pids: &Path) -> Option<Issuer> {
        let ports = fs::read_to_string(dir.join("ports")).ok()?;
        let (api, etcd) = ports.trim().split_once(' ')?;
        let issuer = Issuer {
            dir: dir.to_path_buf(),
            pids: pids.to_path_buf(),
            port: api.parse().ok()?,
            etcd_port: etcd.parse().ok()?,
            owned: None,
        };
        let alive = ["issuer-etcd", "issuer-apiserver"]
            .iter()
            .all(|p| pid_alive(&pids.join(p)));
        (alive && issuer.ready()).then_some(issuer)
    }

    // The shared issuer's processes outlive the test binary on purpose (it is reused by the next
    // one); `tests/cluster/down` stops them by their PID files. A private one's are waited for
    // on drop.
    #[allow(clippy::zombie_processes)]
    fn boot(dir: PathBuf, pids: PathBuf, owned: bool) -> Issuer {
        for p in ["issuer-etcd", "issuer-apiserver"] {
            kill_pid_file(&pids.join(p));
        }
        make_pki(&dir);
        if !dir.join("keys/current").exists() {
            new_signing_key(&dir, 1);
        }
        let [port, etcd_port, peer_port] = free_ports();
        fs::write(dir.join("ports"), format!("{port} {etcd_port}\n")).unwrap();
        let mut issuer = Issuer {
            dir,
            pids,
            port,
            etcd_port,
            owned: None,
        };
        if !issuer.dir.join("keys/published").exists() {
            issuer.write_keys(1, &[1]);
        }
        let _ = fs::remove_dir_all(issuer.dir.join("etcd"));
        let etcd = issuer.spawn(
            "issuer-etcd",
            Command::new(etcd_bin()).args([
                "--name=issuer".to_string(),
                format!("--data-dir={}", issuer.dir.join("etcd").display()),
                format!("--listen-client-urls=http://127.0.0.1:{etcd_port}"),
                format!("--advertise-client-urls=http://127.0.0.1:{etcd_port}"),
                format!("--listen-peer-urls=http://127.0.0.1:{peer_port}"),
                format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}"),
                format!("--initial-cluster=issuer=http://127.0.0.1:{peer_port}"),
                "--unsafe-no-fsync".to_string(),
                "--log-level=warn".to_string(),
            ]),
        );
        let apiserver = issuer.spawn_apiserver();
        if owned {
            issuer.owned = Some(Owned { etcd, apiserver });
        }
        issuer.write_kubeconfig();
        issuer.wait_ready(Duration::from_secs(60));
        let bound = issuer
            .kubectl()
            .args([
                "create",
                "clusterrolebinding",
                DISCOVERY_BINDING,
                "--clusterrole=system:service-account-issuer-discovery",
                "--group=system:unauthenticated",
            ])
            .output()
            .expect("kubectl create clusterrolebinding");
        assert!(
            bound.status.success(),
            "binding anonymous discovery on the issuer: {}",
            String::from_utf8_lossy(&bound.stderr)
        );
        issuer
    }

    fn spawn_apiserver(&self) -> Child {
        let pki = self.dir.join("pki");
        let port = self.port;
        let mut args = vec![
            format!("--etcd-servers=http://127.0.0.1:{}", self.etcd_port),
            "--bind-address=127.0.0.1".to_string(),
            "--advertise-address=127.0.0.1".to_string(),
            format!("--secure-port={port}"),
            "--authorization-mode=RBAC".to_string(),
            "--anonymous-auth=true".to_string(),
            "--endpoint-reconciler-type=none".to_string(),
            "--service-cluster-ip-range=10.97.0.0/16".to_string(),
            format!("--tls-cert-file={}", pki.join("server.crt").display()),
            format!(
                "--tls-private-key-file={}",
                pki.join("server.key").display()
            ),
            format!("--client-ca-file={}", pki.join("ca.crt").display()),
            format!("--service-account-issuer={}", self.url()),
            format!("--service-account-jwks-uri={}/openid/v1/jwks", self.url()),
            format!(
                "--service-account-signing-key-file={}",
                self.signing_key_file().display()
            ),
        ];
        for n in self.published_keys() {
            args.push(format!(
                "--service-account-key-file={}",
                self.key_file(n, "pub").display()
            ));
        }
        self.spawn(
            "issuer-apiserver",
            Command::new(k8s_bin("kube-apiserver")).args(args),
        )
    }

    // Only a private issuer is restarted (rotation takes `&mut`), and it waits on drop.
    #[allow(clippy::zombie_processes)]
    fn restart_apiserver(&mut self) {
        match self.owned.as_mut() {
            Some(owned) => {
                let _ = owned.apiserver.kill();
                let _ = owned.apiserver.wait();
            }
            None => kill_pid_file(&self.pids.join("issuer-apiserver")),
        }
        let child = self.spawn_apiserver();
        if let Some(owned) = self.owned.as_mut() {
            owned.apiserver = child;
        }
        self.wait_ready(Duration::from_secs(60));
    }

    /// Starts `cmd` in its own process group (a test's Ctrl-C does not reach it), logging to
    /// `logs/<name>.log`, and records its PID in `pids/<name>`.
    fn spawn(&self, name: &str, cmd: &mut Command) -> Child {
        use std::os::unix::process::CommandExt;
        fs::create_dir_all(self.dir.join("logs")).unwrap();
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("logs/{name}.log")))
            .unwrap();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e}"));
        fs::write(self.pids.join(name), child.id().to_string()).unwrap();
        child
    }

    /// Whether discovery answers anonymously (the last thing [`Issuer::boot`] sets up).
    fn ready(&self) -> bool {
        let out = Command::new("curl")
            .args(["-sf", "--max-time", "2", "--cacert"])
            .arg(self.ca_file())
            .arg(format!("{}/.well-known/openid-configuration", self.url()))
            .output();
        matches!(out, Ok(out) if out.status.success())
    }

    /// Waits until the API server is ready (its `/readyz`, as the administrator).
    fn wait_ready(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            let ok = self
                .kubectl()
                .args(["get", "--raw", "/readyz"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the issuer's kube-apiserver was not ready after {limit:?} (logs: {})",
                self.dir.join("logs").display()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn write_kubeconfig(&self) {
        let pki = self.dir.join("pki");
        let kubeconfig = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: issuer\n  cluster:\n    server: {}\n    \
             certificate-authority: {}\nusers:\n- name: admin\n  user:\n    client-certificate: {}\n    \
             client-key: {}\ncontexts:\n- name: issuer\n  context: {{cluster: issuer, user: admin}}\n\
             current-context: issuer\n",
            self.url(),
            pki.join("ca.crt").display(),
            pki.join("server.crt").display(),
            pki.join("server.key").display(),
        );
        fs::write(self.dir.join("kubeconfig"), kubeconfig).unwrap();
    }

    fn ensure_service_account(&self, ns: &str, name: &str) {
        let manifest = format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n---\napiVersion: v1\n\
             kind: ServiceAccount\nmetadata: {{name: {name}, namespace: {ns}}}\n"
        );
        let mut apply = self.kubectl();
        apply.args(["apply", "-f", "-"]);
        let out = super::run_with_input(apply, manifest.as_bytes());
        assert!(
            out.status.success(),
            "creating ServiceAccount {ns}/{name} in the issuer: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn key_file(&self, n: u32, ext: &str) -> PathBuf {
        self.dir.join(format!("keys/sa-{n}.{ext}"))
    }

    fn current_key(&self) -> u32 {
        fs::read_to_string(self.dir.join("keys/current"))
            .expect("the issuer's current key")
            .trim()
            .parse()
            .unwrap()
    }

    fn published_keys(&self) -> Vec<u32> {
        fs::read_to_string(self.dir.join("keys/published"))
            .unwrap_or_default()
            .split_whitespace()
            .map(|n| n.parse().unwrap())
            .collect()
    }

    fn write_keys(&self, current: u32, published: &[u32]) {
        let list: Vec<String> = published.iter().map(u32::to_string).collect();
        fs::write(self.dir.join("keys/published"), list.join(" ")).unwrap();
        fs::write(self.dir.join("keys/current"), current.to_string()).unwrap();
    }
}

impl Drop for Issuer {
    fn drop(&mut self) {
        if let Some(mut owned) = self.owned.take() {
            for child in [&mut owned.apiserver, &mut owned.etcd] {
                let _ = child.kill();
                let _ = child.wait();
            }
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

fn k8s_bin(name: &str) -> PathBuf {
    super::kubernetes_bin(name)
}

fn etcd_bin() -> PathBuf {
    super::cached_tool("etcd-", "etcd")
}

/// The issuer's CA and one certificate that serves it (SAN 127.0.0.1, localhost) and
/// authenticates its administrator (`O=system:masters`), as the test cluster's PKI does.
fn make_pki(dir: &Path) {
    let pki = dir.join("pki");
    if pki.join("server.crt").exists() {
        return;
    }
    fs::create_dir_all(&pki).unwrap();
    let script = r#"set -e
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 \
  -subj "/CN=disruption-guard-test-issuer-ca" 2>/dev/null
printf '%s\n' 'basicConstraints=CA:FALSE' 'keyUsage=digitalSignature,keyEncipherment' \
  'extendedKeyUsage=serverAuth,clientAuth' 'subjectAltName=DNS:localhost,IP:127.0.0.1' >server.ext
openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr \
  -subj "/O=system:masters/CN=issuer-admin" 2>/dev/null
openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt \
  -days 3650 -extfile server.ext 2>/dev/null
"#;
    let status = Command::new("sh")
        .args(["-c", script])
        .current_dir(&pki)
        .status()
        .expect("openssl makes the issuer's PKI");
    assert!(status.success(), "creating the issuer's PKI failed");
}

/// Creates signing key number `n` (`keys/sa-<n>.key` and its public half `.pub`).
fn new_signing_key(dir: &Path, n: u32) {
    let keys = dir.join("keys");
    fs::create_dir_all(&keys).unwrap();
    let script = format!(
        "set -e; openssl genrsa -out sa-{n}.key 2048 2>/dev/null; \
         openssl rsa -in sa-{n}.key -pubout -out sa-{n}.pub 2>/dev/null"
    );
    let status = Command::new("sh")
        .args(["-c", &script])
        .current_dir(&keys)
        .status()
        .expect("openssl makes a signing key");
    assert!(status.success(), "creating a signing key failed");
}

fn free_ports() -> [u16; 3] {
    let listeners: Vec<_> = (0..3)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let ports: Vec<u16> = listeners
        .iter()
        .map(|l| l.local_addr().unwrap().port())
        .collect();
    [ports[0], ports[1], ports[2]]
}

fn pid_alive(file: &Path) -> bool {
    fs::read_to_string(file)
        .ok()
        .and_then(|p| p.trim().parse::<i32>().ok())
        .is_some_and(|pid| unsafe { libc::kill(pid, 0) } == 0)
}

/// Stops the process whose PID is in `file` (TERM, then KILL after 5 s) and waits for it
/// (10 s at most).
fn kill_pid_file(file: &Path) {
    let Some(pid) = fs::read_to_string(file)
        .ok()
        .and_then(|p| p.trim().parse::<i32>().ok())
    else {
        return;
    };
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let start = Instant::now();
    while unsafe { libc::kill(pid, 0) } == 0 && start.elapsed() < Duration::from_secs(10) {
        if start.elapsed() > Duration::from_secs(5) {
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = fs::remove_file(file);
}
