//! The chart's observability against the operator's real metric registry: docs/metrics.md lists
//! exactly the registered families (name, type, labels), and every `disruption_guard_*`,
//! `process_*`, `controller_runtime_*` and `workqueue_*` name and every label the dashboard and
//! the rendered PrometheusRule use is one the operator exports.
//! Part of the `chart` test binary (`tests/chart.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use disruption_guard::operator::Metrics;

use super::{chart, repo_root, run, tool};

/// Labels Prometheus attaches to every scraped series (target labels of a ServiceMonitor), and
/// `cluster`, which a Prometheus behind Thanos or Mimir adds as an external label (the
/// dashboard's `$cluster` variable, `prometheusRule.groupBy`).
const TARGET_LABELS: [&str; 7] = [
    "job",
    "namespace",
    "instance",
    "pod",
    "service",
    "endpoint",
    "cluster",
];

/// One metric family as Prometheus stores it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Family {
    /// The documented name: `_total` for counters, `_info` for info, the base name otherwise.
    name: String,
    kind: String,
    labels: BTreeSet<String>,
}

/// The operator's registry with every labelled family populated, as the text `/metrics` serves.
fn exposition() -> String {
    let m = Metrics::default();
    m.leader.set(1);
    m.window.error("write_conflict");
    m.window.ready_after(0.4);
    m.window.window_ended("expired", 600.0);
    m.window.reconciled(2);
    m.window.held.add("ci", "annotation", 30.0);
    m.drain.rollout("rolled_out");
    m.drain.skip("paused");
    m.drain.signal_to_rollout.observe(1.5);
    m.api
        .observe("POST", "/v1/namespaces/{namespace}/windows", 201, 0.02);
    m.kube_requests
        .observe("patch", Some(200), std::time::Duration::from_millis(8));
    m.api.static_token_reload("loaded");
    // The webhook's health gauges: exported with the interception on and a certificate served.
    {
        use disruption_guard::intercept::certs::{Renewal, issue, sans};
        use disruption_guard::intercept::registration::Endpoint;
        use disruption_guard::intercept::tls::CertResolver;
        let bundle = issue(
            None,
            Renewal::All,
            &sans("dg", "guard"),
            jiff::Timestamp::now(),
        )
        .unwrap();
        m.intercept.health.attach(
            CertResolver::new(&bundle).unwrap(),
            Endpoint::Loopback { port: 9443 },
            "dg".into(),
        );
    }
    m.encode()
}

/// Families (from `# TYPE`) with the label names their samples carry, and every sample name.
fn registry() -> (BTreeSet<Family>, BTreeSet<String>) {
    let text = exposition();
    let mut kinds: BTreeMap<String, String> = BTreeMap::new();
    let mut labels: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut samples = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("# TYPE name kind");
            kinds.insert(name.to_string(), kind.to_string());
        } else if !line.starts_with('#') && !line.is_empty() {
            let name_end = line.find(['{', ' ']).expect("a sample line");
            let sample = &line[..name_end];
            samples.insert(sample.to_string());
            let family = kinds
                .keys()
                .filter(|f| sample.starts_with(f.as_str()))
                .max_by_key(|f| f.len())
                .unwrap_or_else(|| panic!("sample {sample} before its # TYPE"))
                .clone();
            let set = labels.entry(family).or_default();
            if line[name_end..].starts_with('{') {
                let body = &line[name_end..];
                let inside = &body[1..closing_brace(body)];
                for (label, _) in matchers(inside) {
                    if label != "le" {
                        set.insert(label);
                    }
                }
            }
        }
    }
    let families = kinds
        .into_iter()
        .map(|(name, kind)| {
            let shown = match kind.as_str() {
                "counter" => format!("{name}_total"),
                "info" => format!("{name}_info"),
                _ => name.clone(),
            };
            assert!(
                labels.contains_key(&name),
                "{name} has no samples: populate it in exposition()"
            );
            Family {
                name: shown,
                kind,
                labels: labels[&name].clone(),
            }
        })
        .collect();
    (families, samples)
}

/// Index of the `}` closing a selector or label set that starts at `body[0] == '{'`, skipping
/// quoted values (a route template such as `/windows/{name}` holds braces).
fn closing_brace(body: &str) -> usize {
    let bytes = body.as_bytes();
    let mut i = 1;
    while bytes[i] != b'}' {
        if bytes[i] == b'"' {
            i += 1;
            while bytes[i] != b'"' {
                i += if bytes[i] == b'\\' { 2 } else { 1 };
            }
        }
        i += 1;
    }
    i
}

/// `(label, value)` pairs of a selector or sample body: `a="x", b!~"y|z"`.
fn matchers(body: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = body.trim();
    while !rest.is_empty() {
        let op = rest
            .find(['=', '!'])
            .unwrap_or_else(|| panic!("no operator in {rest:?}"));
        let label = rest[..op].trim().to_string();
        let quote = rest[op..].find('"').expect("a quoted value") + op;
        let mut end = quote + 1;
        let bytes = rest.as_bytes();
        while bytes[end] != b'"' {
            end += if bytes[end] == b'\\' { 2 } else { 1 };
        }
        out.push((label, rest[quote + 1..end].to_string()));
        rest = rest[end + 1..].trim_start().trim_start_matches(',').trim();
    }
    out
}

/// Whether a word of an expression or a table row names a metric of the operator: its own
/// (`disruption_guard_*`), a standard process metric (`process_*`, unprefixed) or one of
/// controller-runtime's series (`controller_runtime_*`, `workqueue_*`, unprefixed).
fn is_operator_metric(name: &str) -> bool {
    [
        "disruption_guard_",
        "process_",
        "controller_runtime_",
        "workqueue_",
    ]
    .iter()
    .any(|prefix| name.starts_with(prefix))
}

/// The families docs/metrics.md lists in its table.
fn documented() -> BTreeSet<Family> {
    let doc = std::fs::read_to_string(repo_root().join("docs/metrics.md")).unwrap();
    doc.lines()
        .filter(|l| l.strip_prefix("| `").is_some_and(is_operator_metric))
        .map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            Family {
                name: cells[1].trim_matches('`').to_string(),
                kind: cells[2].to_string(),
                labels: cells[3]
                    .split(',')
                    .map(|l| l.trim().trim_matches('`').to_string())
                    .filter(|l| !l.is_empty() && l != "—")
                    .collect(),
            }
        })
        .collect()
}

#[test]
fn docs_metrics_md_lists_exactly_the_registered_metrics() {
    let (registered, _) = registry();
    let documented = documented();
    let missing: Vec<_> = registered.difference(&documented).collect();
    let stale: Vec<_> = documented.difference(&registered).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "docs/metrics.md is out of step with the operator's registry\nregistered but not documented (or documented differently): {missing:#?}\ndocumented but not registered: {stale:#?}"
    );
}

/// A PromQL expression split into what the test checks: metric names with their matchers,
/// and the labels named in `by`, `without`, `on`, `ignoring` and `group_*` clauses.
struct Parsed {
    metrics: Vec<(String, Vec<String>)>,
    clause_labels: Vec<String>,
}

fn parse_promql(expr: &str) -> Parsed {
    let mut metrics = Vec::new();
    let mut clause_labels = Vec::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b':';
    while i < bytes.len() {
        if bytes[i] == b'"' {
            i += 1;
            while bytes[i] != b'"' {
                i += if bytes[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            continue;
        }
        if !ident(bytes[i]) || (i > 0 && ident(bytes[i - 1])) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && ident(bytes[i]) {
            i += 1;
        }
        let word = &expr[start..i];
        let after = expr[i..].trim_start();
        if [
            "by",
            "without",
            "on",
            "ignoring",
            "group_left",
            "group_right",
        ]
        .contains(&word)
            && after.starts_with('(')
        {
            let close = after.find(')').unwrap();
            clause_labels.extend(
                after[1..close]
                    .split(',')
                    .map(|l| l.trim().to_string())
                    .filter(|l| !l.is_empty()),
            );
        } else if is_operator_metric(word) || word == "up" {
            let labels = if after.starts_with('{') {
                matchers(&after[1..closing_brace(after)])
                    .into_iter()
                    .map(|(l, _)| l)
                    .collect()
            } else {
                Vec::new()
            };
            metrics.push((word.to_string(), labels));
        }
    }
    Parsed {
        metrics,
        clause_labels,
    }
}

/// Checks one expression (and the `{{label}}` references of its legend or annotations) against
/// the registry; returns the problems found.
fn check_expr(
    where_: &str,
    expr: &str,
    references: &[String],
    families: &BTreeSet<Family>,
    samples: &BTreeSet<String>,
) -> Vec<String> {
    let mut problems = Vec::new();
    let parsed = parse_promql(expr);
    if parsed.metrics.is_empty() {
        problems.push(format!("{where_}: no metric in {expr}"));
    }
    let mut allowed: BTreeSet<String> = TARGET_LABELS.iter().map(|s| s.to_string()).collect();
    allowed.insert("le".into());
    for (metric, matcher_labels) in &parsed.metrics {
        if metric == "up" {
            continue;
        }
        if !samples.contains(metric) {
            problems.push(format!(
                "{where_}: {metric} is not a series the operator exports"
            ));
            continue;
        }
        let family = families
            .iter()
            .filter(|f| {
                let base = f.name.trim_end_matches("_total").trim_end_matches("_info");
                metric.starts_with(base)
            })
            .max_by_key(|f| f.name.len())
            .unwrap();
        allowed.extend(family.labels.iter().cloned());
        for label in matcher_labels {
            let ok = TARGET_LABELS.contains(&label.as_str())
                || family.labels.contains(label)
                || (label == "le" && metric.ends_with("_bucket"));
            if !ok {
                problems.push(format!("{where_}: {metric} has no label {label}"));
            }
        }
    }
    for label in parsed.clause_labels.iter().chain(references) {
        if !allowed.contains(label) {
            problems.push(format!(
                "{where_}: label {label} is on none of the metrics of {expr}"
            ));
        }
    }
    problems
}

/// `{{label}}` (legend) and `$labels.label` (alert annotations) references in a text.
fn label_references(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for piece in text.split("{{").skip(1) {
        let inner = piece.split("}}").next().unwrap().trim();
        let name = inner.strip_prefix("$labels.").unwrap_or(inner);
        if name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') && !name.is_empty() {
            out.push(name.to_string());
        }
    }
    out
}

#[test]
fn the_dashboard_queries_only_exported_metrics_and_labels() {
    let (families, samples) = registry();
    let path = chart().join("dashboards/disruption-guard.json");
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let mut problems = Vec::new();
    let mut queries = 0;
    let mut used = BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        let title = panel["title"].as_str().unwrap();
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap();
            let legend = target["legendFormat"].as_str().unwrap_or_default();
            problems.extend(check_expr(
                &format!("panel {title:?}"),
                expr,
                &label_references(legend),
                &families,
                &samples,
            ));
            used.extend(parse_promql(expr).metrics.into_iter().map(|(m, _)| m));
            queries += 1;
        }
    }
    for var in dashboard["templating"]["list"].as_array().unwrap() {
        if let Some(query) = var["query"]["query"].as_str() {
            let inner = query
                .strip_prefix("label_values(")
                .and_then(|q| q.rsplit_once(','))
                .map(|(selector, _)| selector)
                .unwrap_or(query);
            problems.extend(check_expr(
                &format!("variable {}", var["name"]),
                inner,
                &[],
                &families,
                &samples,
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(queries >= 20, "only {queries} queries");
    // Every family has a panel.
    for family in &families {
        let base = family.name.trim_end_matches("_total");
        assert!(
            used.iter().any(|m| m.starts_with(base)),
            "no panel shows {}",
            family.name
        );
    }
}

#[test]
fn the_alerts_use_only_exported_metrics_and_labels() {
    let rendered = run(Command::new(tool("helm"))
        .args(["template", "guard", "--namespace", "guard-system"])
        .args(["--kube-version", "1.36.3"])
        .arg(chart())
        .args(["--set", "prometheusRule.enabled=true"])
        .args(["--show-only", "templates/prometheusrule.yaml"]))
    .stdout;
    let rule: serde_json::Value = serde_saphyr::from_slice(&rendered).unwrap();
    let (families, samples) = registry();
    let doc = std::fs::read_to_string(repo_root().join("docs/metrics.md")).unwrap();
    let mut problems = Vec::new();
    let rules = rule["spec"]["groups"][0]["rules"].as_array().unwrap();
    assert!(rules.len() >= 6, "{rules:#?}");
    for r in rules {
        let name = r["alert"].as_str().unwrap();
        let expr = r["expr"].as_str().unwrap();
        let annotations = &r["annotations"];
        for key in ["summary", "description", "runbook", "runbook_url"] {
            assert!(
                annotations[key].as_str().is_some_and(|s| !s.is_empty()),
                "{name} lacks the {key} annotation"
            );
        }
        let url = annotations["runbook_url"].as_str().unwrap();
        let anchor = url.rsplit_once('#').unwrap().1;
        assert_eq!(anchor, name.to_lowercase(), "{name}: runbook anchor");
        assert!(
            doc.contains(&format!("\n### {name}\n")),
            "docs/metrics.md has no runbook section for {name}"
        );
        assert!(
            expr.contains("job=\"guard-disruption-guard-admin\"")
                && expr.contains("namespace=\"guard-system\""),
            "{name} does not select the ServiceMonitor's job: {expr}"
        );
        let text = format!("{} {}", annotations["summary"], annotations["description"]);
        problems.extend(check_expr(
            name,
            expr,
            &label_references(&text),
            &families,
            &samples,
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_name_check_catches_a_wrong_metric_name_and_label() {
    // The checks above must be able to fail: a counter without `_total`, a label it lacks.
    let (families, samples) = registry();
    let problems = check_expr(
        "probe",
        r#"sum by (reason) (rate(disruption_guard_drain_rollouts{result="x"}[5m])) + disruption_guard_windows{category="y"}"#,
        &["phase".into()],
        &families,
        &samples,
    );
    assert!(
        problems
            .iter()
            .any(|p| p.contains("disruption_guard_drain_rollouts is not")),
        "{problems:#?}"
    );
    assert!(
        problems.iter().any(|p| p.contains("has no label category")),
        "{problems:#?}"
    );
    assert!(
        problems.iter().any(|p| p.contains("label reason")),
        "{problems:#?}"
    );
}
