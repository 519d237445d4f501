//! A window's fields as kubectl shows them (`kubectl get tw -o jsonpath=…`): what a user of
//! kubectl reads.

/// The window `name` in `ns` through `jsonpath` (empty when kubectl finds no such window).
pub fn field(ns: &str, name: &str, jsonpath: &str) -> String {
    let out = super::kubectl()
        .args(["get", "tw", name, "-n", ns, "-o"])
        .arg(format!("jsonpath={jsonpath}"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `Ready`'s status and reason, e.g. `True NoPodsSelected`.
pub fn ready(ns: &str, name: &str) -> String {
    field(
        ns,
        name,
        r#"{.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].reason}"#,
    )
}
