//! What the client prints: data on stdout (`-o json|yaml|name|wide`, a table by default),
//! reports as a few readable lines.

use clap::ValueEnum;

use crate::operations::types::{SelectorObject, WindowView};

/// Output format of data on stdout.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Aligned columns (reports as readable lines).
    #[default]
    Table,
    /// The API's JSON.
    Json,
    /// The API's JSON, as YAML.
    Yaml,
    /// Only the window name(s).
    Name,
    /// The table with more columns: reason, opened, ended and where it comes from.
    Wide,
}

/// A selector in `kubectl -l` syntax.
pub fn selector_text(sel: &SelectorObject) -> String {
    let mut parts: Vec<String> = sel
        .match_labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for r in &sel.match_expressions {
        parts.push(match r.operator.as_str() {
            "Exists" => r.key.clone(),
            "DoesNotExist" => format!("!{}", r.key),
            "In" => format!("{} in ({})", r.key, r.values.join(",")),
            _ => format!("{} notin ({})", r.key, r.values.join(",")),
        });
    }
    if parts.is_empty() {
        "<all pods>".into()
    } else {
        parts.join(",")
    }
}

/// Rows of windows as a table; `wide` adds the reason, times and CI columns, `namespaces` a
/// NAMESPACE column first (as `kubectl get -A`).
pub fn table(windows: &[WindowView], wide: bool, namespaces: bool) -> String {
    let mut header = Vec::new();
    if namespaces {
        header.push("NAMESPACE");
    }
    header.extend([
        "NAME",
        "PHASE",
        "READY",
        "PODS",
        "NODES",
        "PDBS",
        "DISRUPTED",
        "EXPIRES",
        "SELECTOR",
    ]);
    if wide {
        header.extend(["REASON", "OPENED", "ENDED", "CI"]);
    }
    let or_dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    let rows: Vec<Vec<String>> = windows
        .iter()
        .map(|w| {
            let mut row = Vec::new();
            if namespaces {
                row.push(w.namespace.clone());
            }
            row.extend([
                w.name.clone(),
                w.phase.clone(),
                w.ready.to_string(),
                w.protected.pods.to_string(),
                w.protected.nodes.to_string(),
                w.protected.pdbs.len().to_string(),
                w.report.pods_disrupted.to_string(),
                or_dash(&w.expires_at),
                selector_text(&w.selector),
            ]);
            if wide {
                let ci =
                    w.ci.as_ref()
                        .and_then(|c| c.url.clone().or(c.provider.clone()));
                row.extend([
                    if w.reason.is_empty() {
                        "-".into()
                    } else {
                        w.reason.clone()
                    },
                    or_dash(&w.opened_at),
                    or_dash(&w.ended_at),
                    or_dash(&ci),
                ]);
            }
            row
        })
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.len());
        }
    }
    let line = |cells: Vec<String>| {
        cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths[i]))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    let mut out = line(header.iter().map(|s| s.to_string()).collect());
    out.push('\n');
    for row in rows {
        out.push_str(&line(row));
        out.push('\n');
    }
    out
}

/// A window's report in a few lines: was anything disrupted?
pub fn report(w: &WindowView) -> String {
    let r = &w.report;
    let mut out = format!(
        "window {}/{}: {}\n  protected: {} workloads, {} pods, {} nodes{}\n  evictions blocked: {}, rollouts: {}\n",
        w.namespace,
        w.name,
        w.phase,
        w.protected.workloads,
        w.protected.pods,
        w.protected.nodes,
        if w.protected.pdbs.is_empty() {
            String::new()
        } else {
            format!(" (PDBs: {})", w.protected.pdbs.join(", "))
        },
        r.evictions_blocked,
        r.rollouts,
    );
    if r.held_node_seconds > 0 {
        out.push_str(&format!(
            "  cost: {:.1} node-minutes held that Karpenter could have reclaimed\n",
            r.held_node_seconds as f64 / 60.0
        ));
    }
    if r.clean {
        out.push_str("  result: clean, nothing of the selection was disrupted\n");
    } else {
        out.push_str(&format!(
            "  result: DISRUPTED: {} pods{}{}\n",
            r.pods_disrupted,
            if r.disrupted_pods.is_empty() {
                String::new()
            } else {
                format!(" ({})", r.disrupted_pods.join(", "))
            },
            if r.nodes_disrupted.is_empty() {
                String::new()
            } else {
                format!(", nodes: {}", r.nodes_disrupted.join(", "))
            },
        ));
    }
    out
}

/// One window in `format`; `as_report` picks the report lines for the table format.
pub fn window(w: &WindowView, format: Format, as_report: bool) -> String {
    match format {
        Format::Table if as_report => report(w),
        Format::Table | Format::Wide => {
            table(std::slice::from_ref(w), format == Format::Wide, false)
        }
        Format::Json => format!("{}\n", serde_json::to_string_pretty(w).unwrap_or_default()),
        Format::Yaml => serde_saphyr::to_string(w).unwrap_or_default(),
        Format::Name => format!("{}\n", w.name),
    }
}

/// Several windows in `format`.
/// A list of windows; across namespaces (`-A`) tables get a NAMESPACE column, as kubectl's,
/// and `-o name` prints `namespace/name`, so that each line names one window.
pub fn windows(ws: &[WindowView], format: Format, namespaces: bool) -> String {
    match format {
        Format::Table | Format::Wide => table(ws, format == Format::Wide, namespaces),
        Format::Json => format!(
            "{}\n",
            serde_json::to_string_pretty(&serde_json::json!({ "items": ws })).unwrap_or_default()
        ),
        Format::Yaml => {
            serde_saphyr::to_string(&serde_json::json!({ "items": ws })).unwrap_or_default()
        }
        Format::Name if namespaces => ws
            .iter()
            .map(|w| format!("{}/{}\n", w.namespace, w.name))
            .collect(),
        Format::Name => ws.iter().map(|w| format!("{}\n", w.name)).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operations::types::SelectorRequirement;

    #[test]
    fn a_selector_prints_in_kubectl_syntax() {
        let sel = SelectorObject {
            match_labels: [("app".to_string(), "web".to_string())].into(),
            match_expressions: vec![SelectorRequirement {
                key: "env".into(),
                operator: "In".into(),
                values: vec!["ci".into(), "dev".into()],
            }],
        };
        assert_eq!(selector_text(&sel), "app=web,env in (ci,dev)");
        assert_eq!(selector_text(&SelectorObject::default()), "<all pods>");
    }

    #[test]
    fn wide_adds_the_reason_times_and_ci_columns() {
        let w = WindowView {
            name: "e2e".into(),
            phase: "Closed".into(),
            reason: "make e2e".into(),
            opened_at: Some("2026-12-03T10:00:00Z".into()),
            ended_at: Some("2026-12-03T10:20:00Z".into()),
            ci: Some(crate::operations::types::CiMeta {
                provider: Some("github".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let narrow = table(std::slice::from_ref(&w), false, false);
        let wide = table(std::slice::from_ref(&w), true, false);
        assert!(!narrow.contains("REASON") && !narrow.contains("make e2e"));
        let header = wide.lines().next().unwrap();
        assert!(
            header.ends_with("REASON    OPENED                ENDED                 CI"),
            "{header:?}"
        );
        let row = wide.lines().nth(1).unwrap();
        assert!(
            row.contains("make e2e")
                && row.contains("2026-12-03T10:20:00Z")
                && row.ends_with("github"),
            "{row:?}"
        );
    }

    #[test]
    fn across_namespaces_the_table_leads_with_the_namespace_and_names_are_qualified() {
        let ws = [
            WindowView {
                name: "e2e".into(),
                namespace: "shop".into(),
                ..Default::default()
            },
            WindowView {
                name: "e2e".into(),
                namespace: "billing".into(),
                ..Default::default()
            },
        ];
        let table = windows(&ws, Format::Table, true);
        assert!(table.starts_with("NAMESPACE  NAME"), "{table}");
        assert!(
            table.lines().nth(1).unwrap().starts_with("shop       e2e"),
            "{table}"
        );
        assert_eq!(windows(&ws, Format::Name, true), "shop/e2e\nbilling/e2e\n");
        assert_eq!(windows(&ws, Format::Name, false), "e2e\ne2e\n");
        assert!(windows(&ws, Format::Table, false).starts_with("NAME "));
    }
}
