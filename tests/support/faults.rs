//! Faults of the test cluster's own processes, for the chaos tests: the kube-apiserver killed
//! and started again with the same command line, etcd paused and resumed. Only for the
//! cluster `tests/cluster/up` runs (its pid files are next to its kubeconfig).

use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The local test cluster's processes.
pub struct Cluster {
    state: PathBuf,
}

impl Cluster {
    /// The cluster whose kubeconfig the tests use, when `tests/cluster/up` runs it.
    pub fn local() -> Option<Cluster> {
        let state = super::kubeconfig().parent()?.to_path_buf();
        state
            .join("pids/kube-apiserver")
            .exists()
            .then_some(Cluster { state })
    }

    fn pid(&self, component: &str) -> u32 {
        std::fs::read_to_string(self.state.join("pids").join(component))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    fn signal(&self, component: &str, signal: &str) {
        let ok = Command::new("kill")
            .args([signal, &self.pid(component).to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {signal} {component}");
    }

    /// Kills the kube-apiserver (SIGKILL). It starts again with the same command line when
    /// the returned guard is dropped (also when the test fails meanwhile).
    pub fn kill_api_server(&self) -> ApiServerDown<'_> {
        let pid = self.pid("kube-apiserver");
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
        let argv: Vec<String> = cmdline
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        self.signal("kube-apiserver", "-KILL");
        // Wait until the process is gone, so its port is free.
        while std::path::Path::new(&format!("/proc/{pid}")).exists() {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        ApiServerDown {
            cluster: self,
            argv,
        }
    }

    /// Starts the kube-apiserver with `argv`, detached and logging where `tests/cluster/up`
    /// has it log, and records its pid so `tests/cluster/down` stops it.
    fn start_api_server(&self, argv: &[String]) {
        use std::os::unix::process::CommandExt;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.state.join("logs/kube-apiserver.log"))
            .unwrap();
        let child = Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .process_group(0)
            .spawn()
            .expect("starting the kube-apiserver again");
        std::fs::write(
            self.state.join("pids/kube-apiserver"),
            child.id().to_string(),
        )
        .unwrap();
        // Reaped when it exits (killed by a later fault, or by tests/cluster/down).
        std::thread::spawn(move || {
            let mut child = child;
            let _ = child.wait();
        });
    }

    /// Pauses etcd (SIGSTOP: the API server's reads from its watch cache go on, writes wait)
    /// until the returned guard is dropped (also when the test fails meanwhile).
    pub fn pause_etcd(&self) -> EtcdPaused<'_> {
        self.signal("etcd", "-STOP");
        EtcdPaused { cluster: self }
    }
}

/// A killed kube-apiserver; dropping this starts it again.
pub struct ApiServerDown<'a> {
    cluster: &'a Cluster,
    argv: Vec<String>,
}

impl Drop for ApiServerDown<'_> {
    fn drop(&mut self) {
        self.cluster.start_api_server(&self.argv);
    }
}

/// A paused etcd; dropping this resumes it (SIGCONT).
pub struct EtcdPaused<'a> {
    cluster: &'a Cluster,
}

impl Drop for EtcdPaused<'_> {
    fn drop(&mut self) {
        self.cluster.signal("etcd", "-CONT");
    }
}
