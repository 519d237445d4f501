//! The Helm chart: `helm lint`, `helm template` through kubeconform `--strict` (schemas taken
//! from the test cluster's own OpenAPI document, and for the prometheus-operator kinds from
//! their CRDs in the pinned prometheus-operator Go module) for every values file in
//! `tests/chart/values/`, the values schema refusing bad values, the generated values table and
//! dashboard picture being current, what the defaults render, a real `helm install` into the
//! test cluster (directly and as the subchart of an umbrella chart) and a `helm upgrade` from
//! the previous chart that changes the CRD. The metric-name checks of the dashboard and alerts
//! live in `tests/chart/metrics.rs`.
//!
//! The `TestWindow` CRD is cluster-wide and shared with every other test, which installs it
//! with `disruption-guard crd` (`support::operator::ensure_crd`). Tests that install the chart
//! with its CRD therefore take the CRD over (`helm install --take-ownership`, as a user
//! upgrading from 0.1.0 does once) and run one at a time ([`crd_lock`]).

mod support;

// The metric-name checks sit beside the chart's fixtures in tests/chart/. A crate root resolves
// `mod metrics;` next to itself (tests/metrics.rs, which Cargo would build as a test binary of
// its own), so the one submodule of this crate is named by its path.
#[path = "chart/metrics.rs"]
mod metrics;

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

/// `helm` against the test cluster.
fn helm() -> Command {
    let mut cmd = Command::new(tool("helm"));
    cmd.env("KUBECONFIG", support::kubeconfig());
    cmd
}

const CRD: &str = "customresourcedefinition/testwindows.disruption-guard.io";

/// Held by every test that installs or upgrades the chart with its CRD: Helm takes the one
/// cluster-wide CRD over, and the upgrade test changes its schema for a while.
async fn crd_lock() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    LOCK.lock().await
}

/// The CRD as the API server has it, or `None` when it is not installed.
fn installed_crd() -> Option<serde_json::Value> {
    let out = support::kubectl()
        .args(["get", CRD, "-o", "json", "--ignore-not-found"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (!out.stdout.is_empty()).then(|| serde_json::from_slice(&out.stdout).unwrap())
}

/// The release that owns the installed CRD (`meta.helm.sh/release-name`), if any.
fn crd_owner() -> Option<String> {
    installed_crd()?["metadata"]["annotations"]["meta.helm.sh/release-name"]
        .as_str()
        .map(str::to_string)
}

/// The prometheus-operator release whose CRDs (ServiceMonitor, PodMonitor, PrometheusRule) the rendered
/// chart is checked against, and the Go module checksum that pins its content.
const PROMETHEUS_OPERATOR: &str = "github.com/prometheus-operator/prometheus-operator@v0.85.0";
const PROMETHEUS_OPERATOR_SUM: &str = "h1:M5xLCLEoaW2IJfnuCwFzzpL+jSVQu3KGT84Pye+fW8s=";

/// The cert-manager release whose CRDs (Issuer, Certificate) the chart's webhook certificate
/// option (`intercept.certManager`) is checked against, and its Go module checksum.
const CERT_MANAGER: &str = "github.com/cert-manager/cert-manager@v1.21.2";
const CERT_MANAGER_SUM: &str = "h1:UWgoYM+KLNtRlqmoWOKjKBOBUPVHeepQ6/ac3ERJW68=";

/// CRDs from a Go module (downloaded through the Go module proxy into the module cache,
/// checksum verified): `files` under `dir` of the module, as one JSON list.
fn module_crds(module: &str, sum: &str, dir: &str, files: &[&str]) -> Vec<u8> {
    let out = run(Command::new("go")
        .args(["mod", "download", "-json", module])
        .current_dir(env!("CARGO_TARGET_TMPDIR")));
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(info["Sum"], sum, "{module} is not the pinned module");
    let dir = Path::new(info["Dir"].as_str().unwrap()).join(dir);
    let crds: Vec<serde_json::Value> = files
        .iter()
        .map(|file| {
            let path = dir.join(file);
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
            serde_saphyr::from_str(&text).unwrap()
        })
        .collect();
    serde_json::to_vec(&crds).unwrap()
}

/// The ServiceMonitor, PodMonitor and PrometheusRule CRDs, as JSON.
fn monitoring_crds() -> Vec<u8> {
    module_crds(
        PROMETHEUS_OPERATOR,
        PROMETHEUS_OPERATOR_SUM,
        "example/prometheus-operator-crd",
        &[
            "monitoring.coreos.com_servicemonitors.yaml",
            "monitoring.coreos.com_podmonitors.yaml",
            "monitoring.coreos.com_prometheusrules.yaml",
        ],
    )
}

/// cert-manager's Issuer and Certificate CRDs, as JSON.
fn cert_manager_crds() -> Vec<u8> {
    module_crds(
        CERT_MANAGER,
        CERT_MANAGER_SUM,
        "deploy/crds",
        &[
            "cert-manager.io_issuers.yaml",
            "cert-manager.io_certificates.yaml",
        ],
    )
}

/// Runs tests/chart/openapi-to-jsonschema.py with `args`, feeding it `input`.
fn generate_schemas(args: &[&std::ffi::OsStr], input: &[u8]) {
    let mut generator = Command::new("python3")
        .arg(repo_root().join("tests/chart/openapi-to-jsonschema.py"))
        .args(args)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    generator.stdin.take().unwrap().write_all(input).unwrap();
    assert!(
        generator.wait().unwrap().success(),
        "generating schemas failed"
    );
}

/// kubeconform schemas generated once from the test cluster's /openapi/v2 and the
/// prometheus-operator and cert-manager CRDs.
fn schemas() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("kubeconform-schemas");
        let openapi = run(support::kubectl().args(["get", "--raw", "/openapi/v2"])).stdout;
        generate_schemas(&[dir.as_os_str()], &openapi);
        generate_schemas(&["--crds".as_ref(), dir.as_os_str()], &monitoring_crds());
        generate_schemas(&["--crds".as_ref(), dir.as_os_str()], &cert_manager_crds());
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
        let out = run(Command::new(tool("kubeconform"))
            .args(["-strict", "-summary", "-output", "text"])
            .arg("-schema-location")
            .arg(format!(
                "{}/{{{{ .ResourceKind }}}}{{{{ .KindSuffix }}}}.json",
                schemas().display()
            ))
            .arg(&file));
        let summary = String::from_utf8_lossy(&out.stdout);
        eprintln!("{}: {summary}", values.display());
        assert!(
            summary.contains("Invalid: 0, Errors: 0, Skipped: 0"),
            "{summary}"
        );
    }
}

#[test]
fn kubeconform_rejects_a_manifest_with_an_unknown_field() {
    // Proves the strict schemas bite: the same check as above on a broken Deployment and a
    // broken PrometheusRule (an alert with `fore:` instead of `for:`).
    for (name, manifest) in [
        (
            "replicaz",
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  replicas: 1\n  replicaz: 2\n  selector: {matchLabels: {a: b}}\n  template:\n    metadata: {labels: {a: b}}\n    spec: {containers: [{name: c, image: i}]}\n",
        ),
        (
            "fore",
            "apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nmetadata: {name: x}\nspec:\n  groups:\n    - name: g\n      rules:\n        - {alert: A, expr: up == 0, fore: 5m}\n",
        ),
    ] {
        let file = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("broken-{name}.yaml"));
        std::fs::write(&file, manifest).unwrap();
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
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(!out.status.success(), "kubeconform must reject {name}");
        assert!(
            text.contains(&format!("additional properties '{name}' not allowed")),
            "{text}"
        );
    }
}

/// `helm template` of the chart with `values` (YAML text) and extra arguments.
fn template(values: &str, extra: &[&str]) -> Output {
    let file = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "values-{:016x}.yaml",
        values
            .bytes()
            .fold(0xcbf29ce484222325u64, |h, b| (h ^ u64::from(b))
                .wrapping_mul(0x100000001b3))
    ));
    std::fs::write(&file, values).unwrap();
    Command::new(tool("helm"))
        .args(["template", "guard", "--namespace", "guard-system"])
        .args(["--kube-version", "1.36.3"])
        .arg(chart())
        .arg("-f")
        .arg(&file)
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn the_values_schema_refuses_a_wrong_type_with_a_clear_message() {
    for (values, expect) in [
        ("replicas: \"two\"\n", "replicas"),
        (
            "leaderElection: {enabled: \"yes\"}\n",
            "leaderElection/enabled",
        ),
        ("api: {port: 70000}\n", "api/port"),
        ("image: {pullPolicy: Sometimes}\n", "pullPolicy"),
        ("replica: 3\n", "replica"),
        ("serviceMonitor: {interval: soon}\n", "interval"),
        ("crds: {enabled: \"yes\"}\n", "crds/enabled"),
        ("image: {digest: latest}\n", "digest"),
        ("prometheusRule: {groupBy: [a-b]}\n", "groupBy"),
        ("podMonitor: {scrapeTimeout: soon}\n", "scrapeTimeout"),
        ("extraArgs: [1]\n", "extraArgs"),
        // A LabelSelector, not kubectl's text: what a webhook's namespaceSelector takes.
        (
            "intercept: {namespaceSelector: kubernetes.io/metadata.name=shop}\n",
            "intercept/namespaceSelector",
        ),
        (
            "drain: {namespaceSelector: {matchExpressions: [{key: team, operator: In}]}}\n",
            "drain/namespaceSelector/matchExpressions/0",
        ),
        (
            "drain: {namespaceSelector: {matchExpressions: [{key: team, operator: Exists, values: [a]}]}}\n",
            "drain/namespaceSelector/matchExpressions/0/values",
        ),
        (
            "intercept: {namespaceSelector: {matchLabels: {trial: true}}}\n",
            "intercept/namespaceSelector/matchLabels/trial",
        ),
    ] {
        let out = template(values, &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "helm template accepted {values:?}");
        assert!(
            stderr.contains("values don't meet the specifications of the schema")
                && stderr.contains(expect),
            "the refusal of {values:?} does not name {expect}: {stderr}"
        );
        eprintln!("{}: {}", values.trim(), stderr.trim());
    }
    // helm lint refuses the same way.
    let file = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("replicas-two.yaml");
    std::fs::write(&file, "replicas: \"two\"\n").unwrap();
    let lint = Command::new(tool("helm"))
        .args(["lint", "--strict"])
        .arg(chart())
        .arg("-f")
        .arg(&file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&lint.stdout);
    assert!(!lint.status.success(), "helm lint accepted replicas: two");
    assert!(text.contains("replicas"), "{text}");
}

/// The objects `helm template` renders for `values` (extra arguments after them), or a panic
/// with Helm's error.
fn rendered(values: &str, extra: &[&str]) -> Vec<serde_json::Value> {
    let out = template(values, extra);
    assert!(
        out.status.success(),
        "helm template with {values:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_saphyr::from_slice_multiple::<serde_json::Value>(&out.stdout)
        .expect("helm template's YAML")
        .into_iter()
        .filter(|doc| !doc.is_null())
        .collect()
}

/// The one object of `kind` (named `name` when given) among `objects`.
fn find<'a>(
    objects: &'a [serde_json::Value],
    kind: &str,
    name: Option<&str>,
) -> &'a serde_json::Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && name.is_none_or(|n| o["metadata"]["name"] == n))
        .unwrap_or_else(|| panic!("no {kind} {name:?} rendered"))
}

#[test]
fn the_defaults_install_anywhere_and_pin_no_node() {
    let objects = rendered("{}\n", &[]);
    let pod = &find(&objects, "Deployment", None)["spec"]["template"];
    // GKE admits system-cluster-critical outside kube-system only under a ResourceQuota.
    assert!(pod["spec"]["priorityClassName"].is_null(), "{pod:#}");
    // Two replicas and their PDB keep the operator up; do-not-disrupt would pin two nodes.
    assert!(
        pod["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"].is_null(),
        "{pod:#}"
    );
    assert_eq!(
        pod["spec"]["nodeSelector"],
        serde_json::json!({"kubernetes.io/os": "linux"})
    );
    assert_eq!(pod["spec"]["securityContext"]["runAsUser"], 65532);
    assert_eq!(
        pod["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystem"],
        true
    );
    let spec = &find(&objects, "Deployment", None)["spec"];
    assert_eq!(spec["strategy"]["rollingUpdate"]["maxUnavailable"], 0);
    assert_eq!(spec["revisionHistoryLimit"], 3);
    assert_eq!(pod["spec"]["terminationGracePeriodSeconds"], 30);

    // In kube-system, where every cluster admits it, the operator gets the critical class.
    let objects = rendered("{}\n", &["--namespace", "kube-system"]);
    let pod = &find(&objects, "Deployment", None)["spec"]["template"]["spec"];
    assert_eq!(pod["priorityClassName"], "system-cluster-critical");
    let objects = rendered("priorityClassName: platform-high\n", &[]);
    let pod = &find(&objects, "Deployment", None)["spec"]["template"]["spec"];
    assert_eq!(pod["priorityClassName"], "platform-high");
}

#[test]
fn the_pod_and_container_settings_come_from_values() {
    let values =
        std::fs::read_to_string(repo_root().join("tests/chart/values/everything.yaml")).unwrap();
    let objects = rendered(&values, &[]);
    let deployment = find(&objects, "Deployment", None);
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(
        container["image"],
        "ghcr.io/disruption-guard/disruption-guard@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    );
    let args = container["args"].as_array().unwrap();
    assert_eq!(
        args.last().unwrap(),
        "--retention=2h",
        "extraArgs come last"
    );
    assert!(
        container["env"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "DISRUPTION_GUARD_HTTP2" && e["value"] == "true")
    );
    assert_eq!(
        container["envFrom"][0]["configMapRef"]["name"],
        "guard-extra-env"
    );
    assert_eq!(
        deployment["spec"]["strategy"]["rollingUpdate"]["maxSurge"],
        "25%"
    );
    assert_eq!(deployment["spec"]["revisionHistoryLimit"], 5);
    assert_eq!(pod["terminationGracePeriodSeconds"], 60);
    // extraObjects, objects and strings alike, go through tpl.
    let extra = find(&objects, "ConfigMap", Some("guard-disruption-guard-extra"));
    assert_eq!(extra["data"]["note"], "installed with release guard");
    let extra = find(&objects, "ConfigMap", Some("guard-extra-string"));
    assert_eq!(extra["data"]["replicas"], "3");

    // OpenShift: the UID and group left to the restricted SCC.
    let objects = rendered(
        "podSecurityContext: {runAsUser: null, runAsGroup: null, fsGroup: null}\n",
        &[],
    );
    let pod = &find(&objects, "Deployment", None)["spec"]["template"]["spec"];
    assert_eq!(
        pod["securityContext"],
        serde_json::json!({"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}})
    );
    // A parent chart's `global` is accepted (umbrella charts, ArgoCD app-of-apps).
    rendered(
        "global: {imageRegistry: registry.example.com, storageClass: fast}\n",
        &[],
    );
}

#[test]
fn the_crd_is_the_generated_one_kept_on_uninstall_and_can_be_left_out() {
    let file: serde_json::Value = serde_saphyr::from_str(
        &std::fs::read_to_string(chart().join("files/testwindows.crd.yaml")).unwrap(),
    )
    .unwrap();
    let objects = rendered("{}\n", &[]);
    let crd = find(&objects, "CustomResourceDefinition", None);
    // Helm's fromYaml/toYaml round trip writes `minimum: 0.0` as `0`: the same JSON number.
    fn numbers_as_f64(v: &serde_json::Value) -> serde_json::Value {
        match v {
            serde_json::Value::Number(n) => serde_json::json!(n.as_f64().unwrap()),
            serde_json::Value::Array(a) => a.iter().map(numbers_as_f64).collect(),
            serde_json::Value::Object(o) => o
                .iter()
                .map(|(k, v)| (k.clone(), numbers_as_f64(v)))
                .collect(),
            other => other.clone(),
        }
    }
    assert_eq!(
        numbers_as_f64(&crd["spec"]),
        numbers_as_f64(&file["spec"]),
        "the template changes nothing in the spec"
    );
    assert_eq!(crd["metadata"]["name"], file["metadata"]["name"]);
    assert_eq!(
        crd["metadata"]["annotations"]["helm.sh/resource-policy"],
        "keep"
    );
    assert_eq!(
        crd["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "Helm"
    );

    let objects = rendered("crds: {keep: false}\n", &[]);
    let crd = find(&objects, "CustomResourceDefinition", None);
    assert!(crd["metadata"]["annotations"].is_null(), "{crd:#}");
    let objects = rendered("crds: {enabled: false}\n", &[]);
    assert!(
        !objects
            .iter()
            .any(|o| o["kind"] == "CustomResourceDefinition"),
        "crds.enabled: false renders no CRD"
    );
}

#[test]
fn the_user_roles_grant_the_verbs_the_api_checks() {
    let objects = rendered("{}\n", &[]);
    let rules = |name: &str| find(&objects, "ClusterRole", Some(name))["rules"].clone();
    // src/api/auth.rs: create (open), get, list, patch (renew), delete (close); watch for the
    // CLI's direct mode.
    assert_eq!(
        rules("guard-disruption-guard-ci"),
        serde_json::json!([{
            "apiGroups": ["disruption-guard.io"],
            "resources": ["testwindows"],
            "verbs": ["create", "get", "list", "watch", "patch", "delete"]
        }])
    );
    let labels =
        |name: &str| find(&objects, "ClusterRole", Some(name))["metadata"]["labels"].clone();
    let view = labels("guard-disruption-guard-view");
    let edit = labels("guard-disruption-guard-edit");
    for (labels, role, expect) in [
        (&view, "view", "true"),
        (&view, "edit", "true"),
        (&view, "admin", "true"),
        (&edit, "edit", "true"),
        (&edit, "admin", "true"),
    ] {
        assert_eq!(
            labels[format!("rbac.authorization.k8s.io/aggregate-to-{role}")],
            expect
        );
    }
    assert!(edit["rbac.authorization.k8s.io/aggregate-to-view"].is_null());
    let objects = rendered(
        "rbac: {ciRole: false, aggregateToDefaultRoles: false}\n",
        &[],
    );
    let roles: Vec<&serde_json::Value> = objects
        .iter()
        .filter(|o| o["kind"] == "ClusterRole")
        .map(|o| &o["metadata"]["name"])
        .collect();
    assert_eq!(
        roles,
        [
            "guard-disruption-guard",
            "guard-disruption-guard-namespaced"
        ]
    );
}

#[test]
fn the_charts_webhook_registration_is_the_one_the_operator_builds_without_a_ca() {
    use disruption_guard::intercept::registration::{self, Endpoint, Registration};
    let everything =
        std::fs::read_to_string(repo_root().join("tests/chart/values/everything.yaml")).unwrap();
    for values in [
        "{}\n".to_string(),
        "namespaces: [shop, payments]\n".to_string(),
        trial_values(),
        everything,
    ] {
        let objects = rendered(&values, &[]);
        let chart = find(
            &objects,
            "ValidatingWebhookConfiguration",
            Some("guard-disruption-guard"),
        );
        // What the operator would build from the flags the chart gives it.
        let args = operator_args(&values);
        let flag = |name: &str| {
            args.iter()
                .find_map(|a| a.strip_prefix(&format!("--{name}=")))
                .map(str::to_string)
        };
        let namespaces: Vec<String> = flag("namespaces")
            .map(|n| n.split(',').map(str::to_string).collect())
            .unwrap_or_default();
        let selector = flag("intercept-namespace-selector")
            .map(|text| {
                disruption_guard::operations::selector::parse(
                    &disruption_guard::operations::types::SelectorInput::Text(text),
                )
                .unwrap()
                .into()
            })
            .unwrap_or_default();
        let built = registration::build(
            &Registration {
                name: "guard-disruption-guard".into(),
                namespace_selector: selector,
                ..Registration::new(
                    Endpoint::Service {
                        namespace: "guard-system".into(),
                        name: "guard-disruption-guard".into(),
                        port: 443,
                    },
                    Some("system:serviceaccount:guard-system:guard-disruption-guard".into()),
                    namespaces,
                )
            },
            "",
        );
        let mut built = serde_json::to_value(built).unwrap();
        // The CA is the operator's to publish (its only write to the registration).
        built["webhooks"][0]["clientConfig"]
            .as_object_mut()
            .unwrap()
            .remove("caBundle");
        assert_eq!(chart["webhooks"], built["webhooks"], "with {values}");
    }
    let objects = rendered("intercept: {enabled: false}\n", &[]);
    assert!(
        !objects
            .iter()
            .any(|o| o["kind"] == "ValidatingWebhookConfiguration"),
        "no registration without interception"
    );
}

#[test]
fn with_host_network_the_webhook_port_is_the_nodes_and_the_pod_keeps_cluster_dns() {
    let objects = rendered("{}\n", &[]);
    let pod = &find(&objects, "Deployment", None)["spec"]["template"]["spec"];
    assert!(
        pod["hostNetwork"].is_null() && pod["dnsPolicy"].is_null(),
        "{pod:#}"
    );

    let objects = rendered("intercept: {hostNetwork: true, port: 10260}\n", &[]);
    let pod = &find(&objects, "Deployment", None)["spec"]["template"]["spec"];
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(pod["dnsPolicy"], "ClusterFirstWithHostNet");
    let container = &pod["containers"][0];
    let ports = container["ports"].as_array().unwrap();
    assert!(
        ports.contains(
            &serde_json::json!({"name": "webhook", "containerPort": 10260, "protocol": "TCP"})
        ),
        "{ports:?}"
    );
    let args: Vec<String> = serde_json::from_value(container["args"].clone()).unwrap();
    assert!(
        args.contains(&"--intercept-port=10260".to_string()),
        "{args:?}"
    );
    // The Service sends 443 to the port by its name, so the registration stays the same.
    let service = find(&objects, "Service", Some("guard-disruption-guard"));
    let webhook = service["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "webhook")
        .unwrap();
    assert_eq!(webhook["port"], 443);
    assert_eq!(webhook["targetPort"], "webhook");
}

#[test]
fn the_trial_values_scope_the_webhook_and_the_drain_watcher_to_one_namespace() {
    // The API server sends the webhook evictions in `shop` only: the scope is part of the
    // registration, beside the opt-out.
    let objects = rendered(&trial_values(), &[]);
    let webhook = &find(&objects, "ValidatingWebhookConfiguration", None)["webhooks"][0];
    assert_eq!(
        webhook["namespaceSelector"],
        serde_json::json!({
            "matchLabels": {"kubernetes.io/metadata.name": "shop"},
            "matchExpressions": [{
                "key": "disruption-guard.io/intercept-evictions",
                "operator": "NotIn",
                "values": ["false"]
            }]
        })
    );
    // The operator's decision and the drain watcher get the same scope as flags.
    let args = operator_args(&trial_values());
    for flag in [
        "--intercept-namespace-selector=kubernetes.io/metadata.name=shop",
        "--drain-namespace-selector=kubernetes.io/metadata.name=shop",
    ] {
        assert!(args.contains(&flag.to_string()), "{flag} in {args:?}");
    }
    // Neither part is switched off.
    assert!(!args.iter().any(|a| a == "--intercept=false"), "{args:?}");
    // The defaults act everywhere: no selector at all.
    let defaults = operator_args("{}\n");
    assert!(
        !defaults.iter().any(|a| a.contains("namespace-selector")),
        "{defaults:?}"
    );
    let objects = rendered("{}\n", &[]);
    let webhook = &find(&objects, "ValidatingWebhookConfiguration", None)["webhooks"][0];
    assert!(webhook["namespaceSelector"]["matchLabels"].is_null());
    // Every form of a LabelSelector becomes the flag's text, in order.
    let args = operator_args(
        "drain:\n  namespaceSelector:\n    matchLabels: {b: \"2\", a: \"1\"}\n    matchExpressions:\n      - {key: t, operator: In, values: [x1, x2]}\n      - {key: u, operator: NotIn, values: [z]}\n      - {key: v, operator: Exists}\n      - {key: w, operator: DoesNotExist}\n",
    );
    assert!(
        args.contains(&"--drain-namespace-selector=a=1,b=2,t in (x1,x2),u notin (z),v,!w".into()),
        "{args:?}"
    );
    // A selector that selects no namespace beside `namespaces` is refused naming the flag.
    let bad = operator_args(
        "namespaces: [web]\nintercept: {namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: shop}}}\n",
    );
    let out = check_config(&bad, &[]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--intercept-namespace-selector"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn helm_test_sends_the_webhook_probe_from_an_identity_of_its_own() {
    let hooks = |values: &str| -> Vec<serde_json::Value> {
        rendered(values, &[])
            .into_iter()
            .filter(|o| o["metadata"]["annotations"]["helm.sh/hook"] == "test")
            .collect()
    };
    let objects = hooks("{}\n");
    let pod = find(
        &objects,
        "Pod",
        Some("guard-disruption-guard-check-webhook"),
    );
    let args: Vec<String> =
        serde_json::from_value(pod["spec"]["containers"][0]["args"].clone()).unwrap();
    assert_eq!(
        args,
        ["check-webhook", "--namespace=guard-system", "--timeout=60s"]
    );
    assert_eq!(
        pod["spec"]["serviceAccountName"],
        "guard-disruption-guard-check"
    );
    // The operator's ReplicaSet, Service and PDB select by these labels: not the check's.
    let labels = &pod["metadata"]["labels"];
    assert!(labels["app.kubernetes.io/name"].is_null(), "{labels}");
    let role = find(&objects, "Role", Some("guard-disruption-guard-check"));
    assert_eq!(
        role["rules"],
        serde_json::json!([{"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]}])
    );
    // The probe goes where the registration sends evictions: the first of `namespaces`.
    let objects = hooks("namespaces: [shop, payments]\n");
    let pod = find(&objects, "Pod", None);
    assert_eq!(pod["spec"]["containers"][0]["args"][1], "--namespace=shop");
    let binding = find(&objects, "RoleBinding", None);
    assert_eq!(binding["metadata"]["namespace"], "shop");
    // Or the namespace the selector names, which the registration sends.
    for values in [
        "namespaces: [shop, ci]\nintercept: {namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: ci}}}\n",
        "intercept: {namespaceSelector: {matchExpressions: [{key: kubernetes.io/metadata.name, operator: In, values: [ci, qa]}]}}\n",
    ] {
        let objects = hooks(values);
        let pod = find(&objects, "Pod", None);
        assert_eq!(
            pod["spec"]["containers"][0]["args"][1], "--namespace=ci",
            "{values}"
        );
    }
    // Off with the check or the webhook.
    assert!(hooks("intercept: {check: {enabled: false}}\n").is_empty());
    assert!(hooks("intercept: {enabled: false}\n").is_empty());
}

#[test]
fn the_admission_policy_matches_the_operators_service_account_unless_turned_off() {
    let objects = rendered("{}\n", &[]);
    let policy = find(
        &objects,
        "ValidatingAdmissionPolicy",
        Some("guard-disruption-guard"),
    );
    assert_eq!(
        policy["spec"]["matchConditions"][0]["expression"],
        "request.userInfo.username == 'system:serviceaccount:guard-system:guard-disruption-guard'"
    );
    let binding = find(
        &objects,
        "ValidatingAdmissionPolicyBinding",
        Some("guard-disruption-guard"),
    );
    assert_eq!(binding["spec"]["policyName"], "guard-disruption-guard");
    assert_eq!(
        binding["spec"]["validationActions"],
        serde_json::json!(["Deny"])
    );
    let objects = rendered("rbac: {admissionPolicy: false}\n", &[]);
    assert!(
        !objects
            .iter()
            .any(|o| o["kind"] == "ValidatingAdmissionPolicy"),
        "no policy when turned off"
    );
}

#[test]
fn the_flow_schemas_give_the_lease_and_the_operator_levels_of_their_own_and_the_api_server_takes_them()
 {
    let objects = rendered("{}\n", &[]);
    let subject = serde_json::json!([{"kind": "ServiceAccount",
        "serviceAccount": {"name": "guard-disruption-guard", "namespace": "guard-system"}}]);
    let schema = |name: &str| find(&objects, "FlowSchema", Some(name))["spec"].clone();

    // The Lease, in its namespace only, in the built-in leader-election level, matched first.
    let lease = schema("guard-disruption-guard-leader-election");
    assert_eq!(
        lease["priorityLevelConfiguration"]["name"],
        "leader-election"
    );
    assert_eq!(lease["rules"][0]["subjects"], subject);
    assert_eq!(
        lease["rules"][0]["resourceRules"],
        serde_json::json!([{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
            "verbs": ["get", "create", "update"], "namespaces": ["guard-system"]}])
    );
    // The lookups callers of the HTTP API drive, in a level of their own, matched next.
    let reviews = schema("guard-disruption-guard-reviews");
    assert_eq!(
        reviews["priorityLevelConfiguration"]["name"],
        "guard-disruption-guard-reviews"
    );
    assert_eq!(reviews["rules"][0]["subjects"], subject);
    let reviewed: Vec<&str> = reviews["rules"][0]["resourceRules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["resources"][0].as_str().unwrap())
        .collect();
    assert_eq!(reviewed, ["tokenreviews", "subjectaccessreviews"]);
    // Everything else the operator does, in its own level.
    let rest = schema("guard-disruption-guard");
    assert_eq!(
        rest["priorityLevelConfiguration"]["name"],
        "guard-disruption-guard"
    );
    assert_eq!(rest["rules"][0]["subjects"], subject);
    let precedence = |s: &serde_json::Value| s["matchingPrecedence"].as_u64().unwrap();
    assert!(precedence(&lease) < precedence(&reviews));
    assert!(precedence(&reviews) < precedence(&rest));
    // Ahead of the built-in `service-accounts` schema (9000) that would match it otherwise.
    assert!(precedence(&rest) < 9000);
    for level in ["guard-disruption-guard", "guard-disruption-guard-reviews"] {
        let spec = &find(&objects, "PriorityLevelConfiguration", Some(level))["spec"];
        assert_eq!(spec["type"], "Limited", "{level}");
    }

    // Accepted by the real API server (a server-side dry run: nothing is stored).
    let manifest: String = objects
        .iter()
        .filter(|o| o["apiVersion"] == "flowcontrol.apiserver.k8s.io/v1")
        .map(|o| format!("---\n{}\n", serde_json::to_string(o).unwrap()))
        .collect();
    let mut apply = support::kubectl();
    apply.args(["apply", "--server-side", "--dry-run=server", "-f", "-"]);
    let out = support::run_with_input(apply, manifest.as_bytes());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the API server refused the flow-control objects: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(text.matches("(server dry run)").count(), 5, "{text}");

    let objects = rendered("flowControl: {enabled: false}\n", &[]);
    assert!(
        !objects
            .iter()
            .any(|o| o["apiVersion"] == "flowcontrol.apiserver.k8s.io/v1"),
        "no flow-control objects when turned off"
    );
}

#[test]
fn the_window_limits_come_from_values() {
    let args = operator_args("{}\n");
    assert!(
        args.contains(&"--max-nodes-per-namespace=20".to_string()),
        "{args:?}"
    );
    assert!(
        !args
            .iter()
            .any(|a| a.starts_with("--allow-daemon-sets-for")),
        "nobody may protect DaemonSet pods by default: {args:?}"
    );
    let args = operator_args(
        "windows: {maxNodesPerNamespace: 0, allowDaemonSetsFor: [\"static:platform\", \"system:serviceaccount:ci:runner\"]}\n",
    );
    assert!(
        args.contains(&"--max-nodes-per-namespace=0".to_string()),
        "{args:?}"
    );
    assert!(
        args.contains(
            &"--allow-daemon-sets-for=static:platform,system:serviceaccount:ci:runner".to_string()
        ),
        "{args:?}"
    );
    let out = template("windows: {maxNodesPerNamespace: -1}\n", &[]);
    assert!(!out.status.success(), "a negative cap is refused");
}

#[test]
fn with_namespaces_the_operators_writes_are_bound_in_each_of_them_only() {
    let bindings = |objects: &[serde_json::Value], kind: &str| -> Vec<String> {
        objects
            .iter()
            .filter(|o| {
                o["kind"] == kind && o["roleRef"]["name"] == "guard-disruption-guard-namespaced"
            })
            .map(|o| {
                format!(
                    "{}/{}",
                    o["metadata"]["namespace"].as_str().unwrap_or(""),
                    o["metadata"]["name"].as_str().unwrap()
                )
            })
            .collect()
    };
    let everywhere = rendered("{}\n", &[]);
    assert_eq!(
        bindings(&everywhere, "ClusterRoleBinding"),
        ["/guard-disruption-guard-namespaced"]
    );
    assert!(bindings(&everywhere, "RoleBinding").is_empty());
    let some = rendered("namespaces: [shop, payments]\n", &[]);
    assert!(bindings(&some, "ClusterRoleBinding").is_empty());
    assert_eq!(
        bindings(&some, "RoleBinding"),
        [
            "shop/guard-disruption-guard-namespaced",
            "payments/guard-disruption-guard-namespaced"
        ]
    );
    // The cluster-wide role writes only cluster-scoped kinds.
    let role = find(&some, "ClusterRole", Some("guard-disruption-guard"));
    for rule in role["rules"].as_array().unwrap() {
        let writes = rule["verbs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| ["create", "patch", "update", "delete"].contains(&v.as_str().unwrap()));
        let resources = rule["resources"].as_array().unwrap();
        let cluster_scoped = resources.iter().all(|r| {
            [
                "nodes",
                "nodeclaims",
                "events",
                "tokenreviews",
                "subjectaccessreviews",
                "validatingwebhookconfigurations",
            ]
            .contains(&r.as_str().unwrap())
        });
        assert!(!writes || cluster_scoped, "a cluster-wide write: {rule}");
    }
}

#[test]
fn the_network_policy_lets_only_the_named_peers_reach_the_webhook() {
    let objects = rendered(
        "networkPolicy: {enabled: true, webhookFrom: [{ipBlock: {cidr: 10.0.0.10/32}}]}\n",
        &[],
    );
    let policy = find(&objects, "NetworkPolicy", None);
    let webhook = policy["spec"]["ingress"]
        .as_array()
        .unwrap()
        .iter()
        .find(|rule| rule["ports"][0]["port"] == "webhook")
        .expect("a rule for the webhook port");
    assert_eq!(
        webhook["from"],
        serde_json::json!([{"ipBlock": {"cidr": "10.0.0.10/32"}}])
    );
}

#[test]
fn the_network_policy_admits_only_the_control_plane_cidrs_to_the_webhook_port() {
    let objects = rendered(
        "networkPolicy: {enabled: true, controlPlaneCIDRs: [10.0.0.0/16, \"fd00::/8\"]}\n",
        &[],
    );
    let policy = find(&objects, "NetworkPolicy", None);
    let rules = policy["spec"]["ingress"].as_array().unwrap();
    let webhook = rules
        .iter()
        .find(|rule| rule["ports"][0]["port"] == "webhook")
        .expect("a rule for the webhook port");
    assert_eq!(
        webhook["from"],
        serde_json::json!([
            {"ipBlock": {"cidr": "10.0.0.0/16"}},
            {"ipBlock": {"cidr": "fd00::/8"}}
        ])
    );
    // The API and admin ports keep their own rules (anyone, unless apiFrom/adminFrom say).
    for port in ["api", "admin"] {
        let rule = rules
            .iter()
            .find(|rule| rule["ports"][0]["port"] == port)
            .unwrap_or_else(|| panic!("a rule for the {port} port"));
        assert!(rule["from"].is_null(), "{rule}");
    }
    // Off by default: no policy at all.
    let defaults = rendered("{}\n", &[]);
    assert!(!defaults.iter().any(|o| o["kind"] == "NetworkPolicy"));
}

#[test]
fn a_network_policy_without_the_control_planes_addresses_is_refused_naming_the_value() {
    let out = template("networkPolicy: {enabled: true}\n", &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "rendered a webhook port open to anyone"
    );
    assert!(
        stderr.contains("networkPolicy.controlPlaneCIDRs"),
        "{stderr}"
    );
    // Without the webhook there is nothing to admit the control plane to.
    let objects = rendered(
        "networkPolicy: {enabled: true}\nintercept: {enabled: false}\n",
        &[],
    );
    let policy = find(&objects, "NetworkPolicy", None);
    assert!(
        !policy["spec"]["ingress"]
            .as_array()
            .unwrap()
            .iter()
            .any(|rule| rule["ports"][0]["port"] == "webhook")
    );
    let out = template(
        "networkPolicy: {enabled: true, controlPlaneCIDRs: [everyone]}\n",
        &[],
    );
    assert!(!out.status.success(), "accepted a CIDR that is none");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("controlPlaneCIDRs"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn citrusts_are_installed_watched_by_the_operator_and_managed_with_edit() {
    let objects = rendered("{}\n", &[]);
    let crds: Vec<&serde_json::Value> = objects
        .iter()
        .filter(|o| o["kind"] == "CustomResourceDefinition")
        .map(|o| &o["metadata"]["name"])
        .collect();
    assert_eq!(
        crds,
        [
            "testwindows.disruption-guard.io",
            "citrusts.disruption-guard.io"
        ]
    );
    let rules = |name: &str| find(&objects, "ClusterRole", Some(name))["rules"].clone();
    let has = |rules: &serde_json::Value, resource: &str, verbs: serde_json::Value| {
        rules.as_array().unwrap().iter().any(|r| {
            r["resources"]
                .as_array()
                .unwrap()
                .iter()
                .any(|x| x == resource)
                && r["verbs"] == verbs
        })
    };
    // The operator reads them with a watch (src/runtime/caches.rs `ci_trusts`), never writes.
    let operator = rules("guard-disruption-guard");
    assert!(
        has(&operator, "citrusts", serde_json::json!(["list", "watch"])),
        "{operator:#}"
    );
    let edit = rules("guard-disruption-guard-edit");
    assert!(
        has(
            &edit,
            "citrusts",
            serde_json::json!(["create", "update", "patch", "delete", "deletecollection"])
        ),
        "{edit:#}"
    );
    let view = rules("guard-disruption-guard-view");
    assert!(
        has(
            &view,
            "citrusts",
            serde_json::json!(["get", "list", "watch"])
        ),
        "{view:#}"
    );
    // No issuer: no flag, no CA.
    let args = |objects: &[serde_json::Value]| {
        find(objects, "Deployment", None)["spec"]["template"]["spec"]["containers"][0]["args"]
            .clone()
    };
    let none = args(&objects);
    assert!(!none.to_string().contains("--oidc-"), "{none}");
    // Two issuers: each CA is given for its own issuer; a bare one is refused by name.
    let has_arg = |objects: &[serde_json::Value], arg: &str| {
        let all = args(objects);
        assert!(
            all.as_array().unwrap().contains(&serde_json::json!(arg)),
            "{all}"
        );
    };
    let holds_ca = |objects: &[serde_json::Value], key: &str| {
        let ca = find(objects, "ConfigMap", Some("guard-disruption-guard-oidc-ca"));
        assert!(
            ca["data"][key]
                .as_str()
                .unwrap()
                .contains("BEGIN CERTIFICATE"),
            "{ca}"
        );
    };
    let objects = rendered(
        "clusterName: ci-eu-1\napi: {oidc: {issuers: [https://token.actions.githubusercontent.com, https://gitlab.com], caBundles: {\"https://gitlab.com\": \"-----BEGIN CERTIFICATE-----\\nx\\n-----END CERTIFICATE-----\\n\"}}}\n",
        &[],
    );
    has_arg(
        &objects,
        "--oidc-issuer=https://token.actions.githubusercontent.com,https://gitlab.com",
    );
    has_arg(
        &objects,
        "--oidc-ca-file=https://gitlab.com=/etc/disruption-guard/oidc-ca/issuer-0.crt",
    );
    holds_ca(&objects, "issuer-0.crt");
    let out = template(
        "clusterName: ci-eu-1\napi: {oidc: {issuers: [https://token.actions.githubusercontent.com, https://gitlab.com], caBundle: x}}\n",
        &[],
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("api.oidc.caBundles"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // One issuer: its CA as a bare file.
    let objects = rendered(
        "clusterName: ci-eu-1\napi: {oidc: {issuers: [https://gitlab.com], caBundle: \"-----BEGIN CERTIFICATE-----\\nx\\n-----END CERTIFICATE-----\\n\"}}\n",
        &[],
    );
    has_arg(
        &objects,
        "--oidc-ca-file=/etc/disruption-guard/oidc-ca/ca.crt",
    );
    holds_ca(&objects, "ca.crt");
    let pod = &find(&objects, "Deployment", None)["spec"]["template"]["spec"];
    assert_eq!(
        pod["volumes"][0]["configMap"]["name"],
        "guard-disruption-guard-oidc-ca"
    );
    assert_eq!(
        pod["containers"][0]["volumeMounts"][0]["mountPath"],
        "/etc/disruption-guard/oidc-ca"
    );
    // The schema refuses an issuer that is not https.
    let out = template("api: {oidc: {issuers: [http://gitlab.com]}}\n", &[]);
    assert!(
        !out.status.success(),
        "an http:// issuer is refused by the schema"
    );
}

/// Values that render every kind of operator flag list the chart can: each values file, and
/// the OIDC CA shapes (one issuer with its CA, several issuers with a CA each).
fn values_for_every_flag_list() -> Vec<String> {
    let mut all: Vec<String> = values_files()
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect();
    all.push(
        "clusterName: ci-eu-1\napi: {oidc: {issuers: [https://gitlab.example], caBundle: x}}\n"
            .into(),
    );
    all.push(
        "clusterName: ci-eu-1\napi: {oidc: {issuers: [https://a.example, https://b.example], caBundles: {\"https://a.example\": \"pem-a\", \"https://b.example\": \"pem-b\"}}}\n"
            .into(),
    );
    all.push("api: {tokenAudience: guard-eu, oidc: {issuers: [https://a.example]}}\nintercept: {enabled: false}\n".into());
    all.push(trial_values());
    all
}

/// The documented values of a trial in one namespace.
fn trial_values() -> String {
    std::fs::read_to_string(chart().join("examples/trial-values.yaml")).unwrap()
}

/// Runs `disruption-guard operator --check-config` with `args` and the literal `env` of the
/// container, nothing else of this process's environment; its exit status and output.
fn check_config(args: &[String], env: &[(String, String)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_disruption-guard"))
        .env_clear()
        .envs(env.iter().cloned())
        .args(args)
        .arg("--check-config")
        .output()
        .unwrap()
}

#[test]
fn every_flag_list_the_chart_renders_is_one_the_operator_accepts() {
    let mut checked = 0;
    for values in values_for_every_flag_list() {
        let objects = rendered(&values, &[]);
        let container =
            &find(&objects, "Deployment", None)["spec"]["template"]["spec"]["containers"][0];
        let args: Vec<String> = serde_json::from_value(container["args"].clone()).unwrap();
        let env: Vec<(String, String)> = container["env"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| {
                Some((
                    e["name"].as_str()?.to_string(),
                    e["value"].as_str()?.to_string(),
                ))
            })
            .collect();
        let out = check_config(&args, &env);
        assert!(
            out.status.success(),
            "the operator refuses what the chart renders for {values:?}:\n{args:?}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        checked += 1;
    }
    assert!(checked >= 8, "{checked} flag lists checked");
    // The check can fail: a bare CA file with two issuers is refused, naming what to do.
    let refused = check_config(
        &[
            "operator".into(),
            "--cluster-name=x".into(),
            "--oidc-issuer=https://a.example,https://b.example".into(),
            "--oidc-ca-file=/ca.crt".into(),
        ],
        &[],
    );
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("name the issuer it is for"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}

/// The operator's flags for `values`.
fn operator_args(values: &str) -> Vec<String> {
    let objects = rendered(values, &[]);
    let args =
        &find(&objects, "Deployment", None)["spec"]["template"]["spec"]["containers"][0]["args"];
    serde_json::from_value(args.clone()).unwrap()
}

#[test]
fn each_install_gets_a_token_audience_of_its_own() {
    let flag = |values: &str, name: &str| {
        operator_args(values)
            .into_iter()
            .filter(|a| a.starts_with(name))
            .collect::<Vec<_>>()
    };
    const ISSUER: &str = "api: {oidc: {issuers: [https://token.actions.githubusercontent.com]}}\n";
    assert_eq!(
        flag(
            &format!("clusterName: ci-eu-1\n{ISSUER}"),
            "--token-audience="
        ),
        ["--token-audience=disruption-guard:ci-eu-1"]
    );
    assert_eq!(
        flag(
            "clusterName: ci-eu-1\napi: {tokenAudience: guard.example.com, oidc: {issuers: [https://gitlab.com]}}\n",
            "--token-audience="
        ),
        ["--token-audience=guard.example.com"],
        "an explicit audience wins"
    );
    assert_eq!(
        flag(
            &format!("clusterName: ci-eu-1\n{ISSUER}"),
            "--oidc-max-token-lifetime="
        ),
        ["--oidc-max-token-lifetime=1h"]
    );
    // Without OIDC issuers only this cluster's own ServiceAccount tokens are reviewed: the
    // shared default stays, so an install without a clusterName keeps working.
    assert_eq!(
        flag("{}\n", "--token-audience="),
        ["--token-audience=disruption-guard"]
    );
    // Trusting an issuer with the audience every install shares is refused, naming the fix.
    let out = template(ISSUER, &[]);
    assert!(
        !out.status.success(),
        "issuers without an audience of the install's own"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("set clusterName") && stderr.contains("api.tokenAudience"),
        "{stderr}"
    );
    let out = template("clusterName: \"ci eu\"\n", &[]);
    assert!(
        !out.status.success(),
        "a cluster name with a space is refused by the schema"
    );
}

#[test]
fn the_ingress_lets_a_waiting_request_run_ten_minutes() {
    let objects = rendered("ingress: {enabled: true}\n", &[]);
    let annotations = &find(&objects, "Ingress", None)["metadata"]["annotations"];
    assert_eq!(
        annotations["nginx.ingress.kubernetes.io/proxy-read-timeout"],
        "660"
    );
    assert_eq!(
        annotations["nginx.ingress.kubernetes.io/proxy-send-timeout"],
        "660"
    );
    assert_eq!(annotations["haproxy.org/timeout-server"], "660s");
    // The user's annotations win; 0 writes none.
    let objects = rendered(
        "ingress: {enabled: true, annotations: {nginx.ingress.kubernetes.io/proxy-read-timeout: \"900\"}}\n",
        &[],
    );
    let annotations = &find(&objects, "Ingress", None)["metadata"]["annotations"];
    assert_eq!(
        annotations["nginx.ingress.kubernetes.io/proxy-read-timeout"],
        "900"
    );
    let objects = rendered("ingress: {enabled: true, requestTimeoutSeconds: 0}\n", &[]);
    assert!(find(&objects, "Ingress", None)["metadata"]["annotations"].is_null());
}

#[test]
fn the_alerts_select_the_series_the_values_name() {
    // promtool from the pinned Prometheus module (tests/cluster/build --with-helm).
    let promtool = support::cached_tool("prometheus-v", "promtool");
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("alerts-select");
    std::fs::create_dir_all(&dir).unwrap();
    for (name, values, present, absent) in [
        (
            "podmonitor",
            std::fs::read_to_string(
                repo_root().join("tests/chart/values/podmonitor-openshift.yaml"),
            )
            .unwrap(),
            vec![r#"job="guard-disruption-guard-admin", cluster="ci-east""#],
            vec![r#"namespace="guard-system""#],
        ),
        (
            "grouped",
            "prometheusRule: {enabled: true, groupBy: [cluster, region]}\n".to_string(),
            vec![r#"job="guard-disruption-guard-admin", namespace="guard-system""#],
            vec!["sum(", "sum by (category) ("],
        ),
    ] {
        let objects = rendered(&values, &[]);
        let rule = find(&objects, "PrometheusRule", None);
        for r in rule["spec"]["groups"][0]["rules"].as_array().unwrap() {
            let expr = r["expr"].as_str().unwrap();
            for text in &present {
                assert!(
                    expr.contains(text),
                    "{name}: {} lacks {text}: {expr}",
                    r["alert"]
                );
            }
            for text in &absent {
                assert!(
                    !expr.contains(text),
                    "{name}: {} has {text}: {expr}",
                    r["alert"]
                );
            }
            if name == "grouped" && expr.contains("sum") {
                assert!(expr.contains("cluster, region)"), "{}: {expr}", r["alert"]);
            }
        }
        // Valid PromQL, as Prometheus loads it.
        let file = dir.join(format!("{name}.yaml"));
        std::fs::write(&file, serde_saphyr::to_string(&rule["spec"]).unwrap()).unwrap();
        run(Command::new(&promtool).args(["check", "rules"]).arg(&file));
    }
    // Both monitors would scrape every replica twice.
    let out = template(
        "serviceMonitor: {enabled: true}\npodMonitor: {enabled: true}\n",
        &[],
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("choose one"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_readme_values_table_is_generated_from_values_yaml() {
    let out = run(Command::new("python3").arg(repo_root().join("tests/chart/values-table.py")));
    let generated = String::from_utf8(out.stdout).unwrap();
    let path = chart().join("README.md");
    let readme = std::fs::read_to_string(&path).unwrap();
    let begin = readme
        .find("<!-- values-table:begin")
        .and_then(|i| readme[i..].find('\n').map(|j| i + j + 1))
        .expect("the README's values-table:begin marker");
    let end = readme
        .find("<!-- values-table:end -->")
        .expect("the README's values-table:end marker");
    let table = &readme[begin..end];
    if table != generated {
        let line = table
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| table.lines().count().min(generated.lines().count()));
        panic!(
            "the values table in {} drifted from values.yaml (first difference at table line {}): regenerate it with `python3 tests/chart/values-table.py --write`",
            path.display(),
            line + 1
        );
    }
}

#[test]
fn the_dashboard_configmap_carries_the_dashboard_for_the_grafana_sidecar() {
    let out = template(
        "dashboard: {enabled: true, namespace: monitoring}\n",
        &["--show-only", "templates/dashboard-configmap.yaml"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cm: serde_json::Value = serde_saphyr::from_slice(&out.stdout).unwrap();
    assert_eq!(cm["metadata"]["namespace"], "monitoring");
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    let shipped: serde_json::Value =
        serde_json::from_str(cm["data"]["disruption-guard.json"].as_str().unwrap()).unwrap();
    let file: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(chart().join("dashboards/disruption-guard.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(shipped, file);
    // Every query goes through the data source variable, so the dashboard works in any Grafana.
    let vars = file["templating"]["list"].as_array().unwrap();
    assert!(
        vars.iter()
            .any(|v| v["type"] == "datasource" && v["name"] == "datasource")
    );
    for panel in file["panels"].as_array().unwrap() {
        if panel["type"] != "row" {
            assert_eq!(
                panel["datasource"]["uid"], "${datasource}",
                "{}",
                panel["title"]
            );
        }
    }
    // Without the value, the ConfigMap lands in the release namespace.
    let out = template(
        "dashboard: {enabled: true}\n",
        &["--show-only", "templates/dashboard-configmap.yaml"],
    );
    let cm: serde_json::Value = serde_saphyr::from_slice(&out.stdout).unwrap();
    assert_eq!(cm["metadata"]["namespace"], "guard-system");
}

/// Runs tests/chart/dashboard-picture.py on the chart's dashboard (and `data`) and compares
/// the SVG with the committed `picture`.
fn assert_picture_is_current(picture: &str, data: Option<&str>) {
    let mut cmd = Command::new("python3");
    cmd.arg(repo_root().join("tests/chart/dashboard-picture.py"))
        .arg(chart().join("dashboards/disruption-guard.json"));
    if let Some(data) = data {
        cmd.arg(repo_root().join(data));
    }
    let drawn = String::from_utf8(run(&mut cmd).stdout).unwrap();
    let path = repo_root().join(picture);
    let committed = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    assert!(
        committed == drawn,
        "{} is not what tests/chart/dashboard-picture.py draws from the dashboard: redraw it (docs/dashboard.md, \"Keeping it current\")",
        path.display()
    );
}

#[test]
fn the_dashboard_layout_picture_is_drawn_from_the_current_dashboard() {
    assert_picture_is_current("docs/images/dashboard-layout.svg", None);
}

#[test]
fn the_dashboard_data_picture_comes_from_a_run_of_the_current_queries() {
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(chart().join("dashboards/disruption-guard.json")).unwrap(),
    )
    .unwrap();
    let data: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo_root().join("docs/images/dashboard-data.json")).unwrap(),
    )
    .unwrap();
    for panel in dashboard["panels"].as_array().unwrap() {
        if panel["type"] == "row" {
            continue;
        }
        let queried: Vec<&serde_json::Value> = panel["targets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| &t["expr"])
            .collect();
        let recorded: Vec<&serde_json::Value> = data["queries"][panel["id"].to_string()]
            .as_array()
            .map(|q| q.iter().collect())
            .unwrap_or_default();
        assert_eq!(
            queried, recorded,
            "panel {} changed since docs/images/dashboard-data.json was recorded: repeat the run (docs/dashboard.md, \"Keeping it current\")",
            panel["title"]
        );
    }
    assert_picture_is_current(
        "docs/images/dashboard.svg",
        Some("docs/images/dashboard-data.json"),
    );
}

#[tokio::test]
async fn helm_install_with_default_values_succeeds_in_the_test_cluster() {
    let _crd = crd_lock().await;
    support::with_namespace(|_client, ns| async move {
        let release = format!("guard-{}", &ns[ns.len() - 8..]);
        run(helm()
            .args(["install", &release, "--namespace", &ns, "--wait"])
            .args(["--timeout", "60s", "--take-ownership"])
            .arg(chart()));
        let pods = run(support::kubectl().args(["get", "pods", "-n", &ns, "-o", "name"])).stdout;
        assert_eq!(
            String::from_utf8_lossy(&pods).lines().count(),
            2,
            "two operator replicas by default"
        );
        assert_eq!(
            crd_owner().as_deref(),
            Some(release.as_str()),
            "the release owns the CRD"
        );
        let fullname = format!("{release}-disruption-guard");
        for role in ["ci", "view", "edit"] {
            run(support::kubectl().args(["get", "clusterrole", &format!("{fullname}-{role}")]));
        }
        run(helm().args(["uninstall", &release, "--namespace", &ns, "--wait"]));
        let left = support::kubectl()
            .args(["get", "clusterrole", &fullname])
            .output()
            .unwrap();
        assert!(!left.status.success(), "uninstall removes the ClusterRole");
        assert!(
            installed_crd().is_some(),
            "uninstall keeps the CRD (crds.keep), and with it every TestWindow"
        );
    })
    .await;
}

#[tokio::test]
async fn helm_install_with_everything_enabled_succeeds_in_the_test_cluster() {
    // The prometheus-operator and cert-manager CRDs make the cluster accept (and validate) the
    // ServiceMonitor, PrometheusRule and the webhook's Certificate; the dashboard ConfigMap goes
    // to the test namespace.
    let mut crds: Vec<serde_json::Value> = serde_json::from_slice(&monitoring_crds()).unwrap();
    crds.extend(serde_json::from_slice::<Vec<serde_json::Value>>(&cert_manager_crds()).unwrap());
    let mut apply = support::kubectl()
        .args(["apply", "--server-side", "--force-conflicts", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": crds});
    use std::io::Write;
    apply
        .stdin
        .take()
        .unwrap()
        .write_all(&serde_json::to_vec(&list).unwrap())
        .unwrap();
    assert!(apply.wait().unwrap().success(), "applying the CRDs");
    run(support::kubectl().args([
        "wait",
        "--for=condition=Established",
        "crd/servicemonitors.monitoring.coreos.com",
        "crd/prometheusrules.monitoring.coreos.com",
        "crd/certificates.cert-manager.io",
        "crd/issuers.cert-manager.io",
        "--timeout=30s",
    ]));
    let _crd = crd_lock().await;
    support::with_namespace(|_client, ns| async move {
        let release = format!("guard-{}", &ns[ns.len() - 8..]);
        run(helm()
            .args(["install", &release, "--namespace", &ns, "--wait"])
            .args(["--timeout", "60s", "--take-ownership"])
            .arg(chart())
            .arg("-f")
            .arg(repo_root().join("tests/chart/values/everything.yaml"))
            .args(["--set", &format!("dashboard.namespace={ns}")])
            // The operator's writes are bound in each of `namespaces`: they must exist.
            .args(["--set", &format!("namespaces={{{ns}}}")]));
        let fullname = format!("{release}-disruption-guard");
        // extraObjects, rendered with tpl.
        let note = run(support::kubectl().args([
            "get",
            "configmap",
            &format!("{fullname}-extra"),
            "-n",
            &ns,
            "-o",
            "jsonpath={.data.note}",
        ]))
        .stdout;
        assert_eq!(
            String::from_utf8_lossy(&note),
            format!("installed with release {release}")
        );
        for kind in [
            "prometheusrule",
            "servicemonitor",
            "networkpolicy",
            "ingress",
            "poddisruptionbudget",
        ] {
            run(support::kubectl().args(["get", kind, &fullname, "-n", &ns]));
        }
        let cm = run(support::kubectl().args([
            "get",
            "configmap",
            &format!("{fullname}-dashboard"),
            "-n",
            &ns,
            "-o",
            "jsonpath={.metadata.labels.grafana_dashboard}",
        ]))
        .stdout;
        assert_eq!(String::from_utf8_lossy(&cm), "1");
        let pods = run(support::kubectl().args(["get", "pods", "-n", &ns, "-o", "name"])).stdout;
        assert_eq!(String::from_utf8_lossy(&pods).lines().count(), 3);
        run(helm().args(["uninstall", &release, "--namespace", &ns, "--wait"]));
        let left = support::kubectl()
            .args(["get", "prometheusrule,servicemonitor,configmap", "-n", &ns])
            .args(["-l", &format!("app.kubernetes.io/instance={release}")])
            .args(["-o", "name"])
            .output()
            .unwrap();
        assert!(
            left.status.success() && left.stdout.is_empty(),
            "uninstall leaves {}",
            String::from_utf8_lossy(&left.stdout)
        );
    })
    .await;
}

#[test]
fn the_alerts_fire_when_they_should_and_only_then() {
    // promtool from the pinned Prometheus module (tests/cluster/build --with-helm).
    let promtool = support::cached_tool("prometheus-v", "promtool");
    let rendered = run(Command::new(tool("helm"))
        .args(["template", "guard", "--namespace", "guard-system"])
        .args(["--kube-version", "1.36.3"])
        .arg(chart())
        .args(["--set", "prometheusRule.enabled=true"])
        .args(["--show-only", "templates/prometheusrule.yaml"]))
    .stdout;
    let rule: serde_json::Value = serde_saphyr::from_slice(&rendered).unwrap();
    let rules = &rule["spec"]["groups"][0]["rules"];
    let annotations_of = |alert: &str| -> serde_json::Map<String, serde_json::Value> {
        rules
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["alert"].as_str() == Some(alert))
            .unwrap_or_else(|| panic!("no alert {alert}"))["annotations"]
            .as_object()
            .unwrap()
            .clone()
    };
    let mut tests: serde_json::Value = serde_saphyr::from_str(
        &std::fs::read_to_string(repo_root().join("tests/chart/alerts-test.yaml")).unwrap(),
    )
    .unwrap();
    let mut checked = std::collections::BTreeSet::new();
    for group in tests["tests"].as_array_mut().unwrap() {
        for case in group["alert_rule_test"].as_array_mut().unwrap() {
            let alert = case["alertname"].as_str().unwrap().to_string();
            checked.insert(alert.clone());
            for expected in case["exp_alerts"].as_array_mut().unwrap() {
                let map = expected.as_object_mut().unwrap();
                let value = map
                    .remove("exp_value")
                    .map(|v| v.as_str().unwrap().to_string());
                let labels = map["exp_labels"].clone();
                let mut filled = serde_json::Map::new();
                for (key, text) in annotations_of(&alert) {
                    let mut text = text.as_str().unwrap().to_string();
                    if let Some(value) = &value {
                        text = text.replace("{{ $value }}", value);
                    }
                    for (label, v) in labels.as_object().unwrap() {
                        text = text
                            .replace(&format!("{{{{ $labels.{label} }}}}"), v.as_str().unwrap());
                    }
                    filled.insert(key, serde_json::Value::String(text));
                }
                map.insert("exp_annotations".into(), serde_json::Value::Object(filled));
            }
        }
    }
    let every: std::collections::BTreeSet<String> = rules
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["alert"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(checked, every, "every alert has a unit test");
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("alerts-test");
    std::fs::create_dir_all(&dir).unwrap();
    let spec = serde_saphyr::to_string(&rule["spec"]).unwrap();
    std::fs::write(dir.join("rules.yaml"), spec).unwrap();
    std::fs::write(
        dir.join("alerts-test.yaml"),
        serde_saphyr::to_string(&tests).unwrap(),
    )
    .unwrap();
    let out = run(Command::new(promtool)
        .args(["test", "rules", "alerts-test.yaml"])
        .current_dir(&dir));
    eprintln!("{}", String::from_utf8_lossy(&out.stdout));
}

/// The chart version the current one must upgrade from: 0.1.0 as of the last commit that
/// shipped the CRD in `crds/` (Helm installed it once and never upgraded it). Replace it with
/// the tag of the last release once there is one.
const PREVIOUS_CHART_COMMIT: &str = "b485d97009239bce93e3af3524d5236c92911ba2";

/// A fresh scratch directory under the test target directory.
fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test]
async fn the_chart_installs_as_the_subchart_of_an_umbrella_chart() {
    let _crd = crd_lock().await;
    support::with_namespace(|_client, ns| async move {
        // An umbrella chart (as an ArgoCD app-of-apps or a platform chart has) that depends on
        // this one through a file:// repository and passes `global` values down.
        let umbrella = scratch(&format!("umbrella-{ns}"));
        std::fs::write(
            umbrella.join("Chart.yaml"),
            format!(
                "apiVersion: v2\nname: platform\nversion: 1.0.0\ndependencies:\n  - name: disruption-guard\n    version: \">=0.0.0-0\"\n    repository: \"file://{}\"\n",
                chart().display()
            ),
        )
        .unwrap();
        std::fs::write(
            umbrella.join("values.yaml"),
            "global:\n  imageRegistry: registry.example.com\n  storageClass: fast\ndisruption-guard:\n  replicas: 1\n  podDisruptionBudget: {enabled: false}\n",
        )
        .unwrap();
        run(helm().args(["dependency", "build"]).arg(&umbrella));
        let release = format!("platform-{}", &ns[ns.len() - 8..]);
        let fullname = format!("{release}-disruption-guard");

        let rendered = run(helm()
            .args(["template", &release, "--namespace", &ns])
            .args(["--kube-version", "1.36.3"])
            .arg(&umbrella))
        .stdout;
        let text = String::from_utf8_lossy(&rendered);
        assert!(text.contains(&format!("name: {fullname}\n")), "{text}");
        assert!(text.contains("kind: CustomResourceDefinition"));
        // The subchart's schema still applies under the parent's key.
        let refused = helm()
            .args(["template", &release, "--namespace", &ns])
            .arg(&umbrella)
            .args(["--set", "disruption-guard.replica=2"])
            .output()
            .unwrap();
        assert!(!refused.status.success(), "a misspelt value must be refused");
        assert!(
            String::from_utf8_lossy(&refused.stderr).contains("replica"),
            "{}",
            String::from_utf8_lossy(&refused.stderr)
        );

        run(helm()
            .args(["install", &release, "--namespace", &ns, "--wait"])
            .args(["--timeout", "60s", "--take-ownership"])
            .arg(&umbrella));
        let pods = run(support::kubectl().args(["get", "pods", "-n", &ns, "-o", "name"])).stdout;
        assert_eq!(
            String::from_utf8_lossy(&pods).lines().count(),
            1,
            "the umbrella's values reach the subchart"
        );
        run(support::kubectl().args(["get", "deployment", &fullname, "-n", &ns]));
        run(support::kubectl().args(["get", "clusterrole", &format!("{fullname}-ci")]));
        run(helm().args(["uninstall", &release, "--namespace", &ns, "--wait"]));
        let _ = std::fs::remove_dir_all(&umbrella);
    })
    .await;
}

/// Removes Helm's ownership from the installed CRD, so it looks as it does after an install
/// of 0.1.0 (from `crds/`) or `disruption-guard crd | kubectl apply -f -`.
fn disown_crd() {
    if installed_crd().is_none() {
        return;
    }
    let patch = serde_json::json!({"metadata": {
        "annotations": {
            "meta.helm.sh/release-name": null,
            "meta.helm.sh/release-namespace": null,
            "helm.sh/resource-policy": null,
        },
        "labels": {
            "app.kubernetes.io/managed-by": null,
            "app.kubernetes.io/instance": null,
            "app.kubernetes.io/name": null,
            "app.kubernetes.io/version": null,
            "helm.sh/chart": null,
        },
    }});
    run(support::kubectl()
        .args(["patch", CRD, "--type=merge", "-p"])
        .arg(patch.to_string()));
}

/// A copy of the current chart whose CRD has one more field in the window spec.
fn chart_with_a_new_crd_field(dir: &Path, field: &str) -> PathBuf {
    let copy = dir.join("disruption-guard");
    run(Command::new("cp").arg("-r").arg(chart()).arg(&copy));
    let path = copy.join("files/testwindows.crd.yaml");
    let mut crd: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let properties = &mut crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        ["properties"];
    let properties = properties.as_object_mut().expect("the spec's properties");
    properties.insert(
        field.into(),
        serde_saphyr::from_str("{type: string, description: A field the next version adds.}")
            .unwrap(),
    );
    std::fs::write(&path, serde_saphyr::to_string(&crd).unwrap()).unwrap();
    copy
}

/// Whether the API server serves `field` in the window spec: a window created with it under
/// strict field validation keeps it.
fn serves_spec_field(ns: &str, name: &str, field: &str) -> bool {
    let window = serde_json::json!({
        "apiVersion": "disruption-guard.io/v1alpha1",
        "kind": "TestWindow",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"ttl": "10m", "selector": {"matchLabels": {"app": "none"}}, field: "served"},
    });
    let file = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{ns}-{name}.json"));
    std::fs::write(&file, window.to_string()).unwrap();
    let out = support::kubectl()
        .args(["create", "--validate=strict", "-o", "json", "-f"])
        .arg(&file)
        .output()
        .unwrap();
    if !out.status.success() {
        eprintln!(
            "not served yet: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        return false;
    }
    let created: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(created["spec"][field], "served", "{created:#}");
    true
}

#[tokio::test]
async fn helm_upgrade_from_the_previous_chart_updates_the_crd() {
    let _crd = crd_lock().await;
    support::with_namespace(|_client, ns| async move {
        let dir = scratch(&format!("upgrade-{ns}"));
        // The previous chart, as it was released: its CRD in crds/.
        let archive = run(Command::new("git").arg("-C").arg(repo_root()).args([
            "archive",
            "--format=tar",
            PREVIOUS_CHART_COMMIT,
            "charts/disruption-guard",
        ]))
        .stdout;
        let mut tar = Command::new("tar")
            .args(["-x", "-C"])
            .arg(&dir)
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        tar.stdin.take().unwrap().write_all(&archive).unwrap();
        assert!(tar.wait().unwrap().success());
        let previous = dir.join("charts/disruption-guard");
        assert!(previous.join("crds/testwindows.yaml").exists());
        let field = "upgradeProbe";
        let next = chart_with_a_new_crd_field(&dir, field);
        let release = format!("guard-{}", &ns[ns.len() - 8..]);

        disown_crd();
        run(helm()
            .args([
                "install",
                &release,
                "--namespace",
                &ns,
                "--wait",
                "--timeout",
                "60s",
            ])
            .args(["--set", "replicas=1"])
            .arg(&previous));
        assert_eq!(
            crd_owner(),
            None,
            "Helm does not own what it installed from crds/"
        );

        // Helm refuses to adopt the CRD without being told to: the one-time step the chart
        // README documents for upgrades from 0.1.0.
        let refused = helm()
            .args([
                "upgrade",
                &release,
                "--namespace",
                &ns,
                "--reset-then-reuse-values",
            ])
            .arg(&next)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(
            !refused.status.success()
                && stderr.contains("cannot be imported into the current release"),
            "{stderr}"
        );
        // As the chart README says: the values set, the new chart's defaults for the rest.
        run(helm()
            .args([
                "upgrade",
                &release,
                "--namespace",
                &ns,
                "--wait",
                "--timeout",
                "60s",
            ])
            .args(["--take-ownership", "--reset-then-reuse-values"])
            .arg(&next));
        assert_eq!(crd_owner().as_deref(), Some(release.as_str()));
        let crd = installed_crd().unwrap();
        assert_eq!(
            crd["metadata"]["annotations"]["helm.sh/resource-policy"],
            "keep"
        );
        let replicas = run(support::kubectl().args([
            "get",
            "deployment",
            &format!("{release}-disruption-guard"),
            "-n",
            &ns,
            "-o",
            "jsonpath={.spec.replicas}",
        ]))
        .stdout;
        assert_eq!(
            String::from_utf8_lossy(&replicas),
            "1",
            "the value set at install is reused"
        );

        support::wait::until(
            "the API server to serve the new field",
            std::time::Duration::from_secs(30),
            || async { serves_spec_field(&ns, "probe", field) },
        )
        .await;
        support::wait::until(
            "kubectl explain to show the new field",
            std::time::Duration::from_secs(30),
            || async {
                support::kubectl()
                    .args(["explain", &format!("testwindows.spec.{field}")])
                    .output()
                    .unwrap()
                    .status
                    .success()
            },
        )
        .await;

        // Back to the current chart: a plain upgrade now (the release owns the CRD), which
        // also removes the field again for the other tests.
        run(helm()
            .args([
                "upgrade",
                &release,
                "--namespace",
                &ns,
                "--wait",
                "--timeout",
                "60s",
            ])
            .arg(chart()));
        let crd = installed_crd().unwrap();
        assert!(
            crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
                ["properties"][field]
                .is_null(),
            "the upgrade back removes the field from the CRD"
        );
        run(support::kubectl().args(["delete", "testwindow", "probe", "-n", &ns, "--wait"]));
        run(helm().args(["uninstall", &release, "--namespace", &ns, "--wait"]));
        assert!(installed_crd().is_some(), "uninstall keeps the CRD");
        let _ = std::fs::remove_dir_all(&dir);
    })
    .await;
}

/// The CRDs the chart renders (`files/testwindows.crd.yaml`, `files/citrusts.crd.yaml`) are the
/// ones the binary generates from its types.
#[test]
fn the_charts_crd_is_what_the_binary_generates() {
    for which in ["testwindows", "citrusts"] {
        let out = std::process::Command::new(support::operator::binary())
            .args(["crd", which])
            .output()
            .unwrap();
        assert!(out.status.success());
        let path =
            support::repo_root().join(format!("charts/disruption-guard/files/{which}.crd.yaml"));
        let chart = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let generated = String::from_utf8(out.stdout).unwrap();
        if chart != generated {
            let line = chart
                .lines()
                .zip(generated.lines())
                .position(|(a, b)| a != b)
                .unwrap_or_else(|| chart.lines().count().min(generated.lines().count()));
            panic!(
                "{} drifted from `disruption-guard crd {which}` (first difference at line {}): regenerate it with `make crd`",
                path.display(),
                line + 1
            );
        }
    }
}

#[test]
fn the_readme_alert_table_lists_every_alert_the_chart_ships() {
    let names = |text: &str, prefix: &str| -> std::collections::BTreeSet<String> {
        text.lines()
            .filter_map(|l| l.trim().strip_prefix(prefix))
            .filter_map(|rest| {
                let name: String = rest
                    .trim_start_matches('`')
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric())
                    .collect();
                name.starts_with("DisruptionGuard").then_some(name)
            })
            .collect()
    };
    let rules = std::fs::read_to_string(chart().join("templates/prometheusrule.yaml")).unwrap();
    let readme = std::fs::read_to_string(chart().join("README.md")).unwrap();
    let shipped = names(&rules, "- alert: ");
    assert!(shipped.len() >= 13, "{shipped:?}");
    assert_eq!(names(&readme, "| "), shipped, "the README's alert table");
}
