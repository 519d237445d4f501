//! What the client prints: data on stdout (`-o json|yaml|name`, a table by default),
//! reports as a few readable lines.

use clap::ValueEnum;

use crate::api::types::{SelectorObject, WindowView};

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

/// Rows of windows as a table.
pub fn table(windows: &[WindowView]) -> String {
    let header = [
        "NAME",
        "PHASE",
        "READY",
        "PODS",
        "NODES",
        "PDBS",
        "DISRUPTED",
        "EXPIRES",
        "SELECTOR",
    ];
    let rows: Vec<Vec<String>> = windows
        .iter()
        .map(|w| {
            vec![
                w.name.clone(),
                w.phase.clone(),
                w.ready.to_string(),
                w.protected.pods.to_string(),
                w.protected.nodes.to_string(),
                w.protected.pdbs.len().to_string(),
                w.report.pods_disrupted.to_string(),
                w.expires_at.clone().unwrap_or_else(|| "-".into()),
                selector_text(&w.selector),
            ]
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
        Format::Table => table(std::slice::from_ref(w)),
        Format::Json => format!("{}\n", serde_json::to_string_pretty(w).unwrap_or_default()),
        Format::Yaml => serde_saphyr::to_string(w).unwrap_or_default(),
        Format::Name => format!("{}\n", w.name),
    }
}

/// Several windows in `format`.
pub fn windows(ws: &[WindowView], format: Format) -> String {
    match format {
        Format::Table => table(ws),
        Format::Json => format!(
            "{}\n",
            serde_json::to_string_pretty(&serde_json::json!({ "items": ws })).unwrap_or_default()
        ),
        Format::Yaml => {
            serde_saphyr::to_string(&serde_json::json!({ "items": ws })).unwrap_or_default()
        }
        Format::Name => ws.iter().map(|w| format!("{}\n", w.name)).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::types::SelectorRequirement;

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
}
