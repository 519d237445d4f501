//! What the client prints: data on stdout (`-o json|yaml|name|wide`, a table by default),
//! reports as a few readable lines.

use clap::ValueEnum;

use crate::operations::selector;
use crate::operations::types::{PeakView, SelectorObject, WindowView};
use crate::resources::Phase;

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
    let text = selector::text(sel);
    if text.is_empty() {
        "<all pods>".into()
    } else {
        text
    }
}

/// The warning for a window Ready over no pod (`None` otherwise): a selector with a typo must
/// not read as protection.
pub fn no_pod_warning(w: &WindowView) -> Option<String> {
    if !w.selects_no_pod() {
        return None;
    }
    let check = match selector::text(&w.selector) {
        text if text.is_empty() => {
            "the namespace has no pod (DaemonSet pods count only with --protect-daemon-sets)"
                .to_string()
        }
        text => format!("check -l {text}"),
    };
    Some(format!(
        "warning: window {} selects no pod in {}: {check}; nothing is protected \
         (--require-pods makes this an error)",
        w.name, w.namespace
    ))
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

/// `n` things, singular or plural (`1 pod`, `2 pods`).
fn counted(n: u32, thing: &str) -> String {
    if n == 1 {
        format!("1 {thing}")
    } else {
        format!("{n} {thing}s")
    }
}

/// What the window protects now and the most it protected at once. Once it has ended its
/// protection is released (`protected` is cleared): then the most it protected while open.
fn protected_line(w: &WindowView) -> String {
    let peak = &w.report.peak_protected;
    let at_most = format!(
        "{}, {}, {}",
        counted(peak.workloads, "workload"),
        counted(peak.pods, "pod"),
        counted(peak.nodes, "node")
    );
    let ended = Phase::from_name(&w.phase).is_some_and(Phase::is_final);
    if ended {
        return if *peak == PeakView::default() {
            "  protected while open: nothing (no pod was protected)\n".to_string()
        } else {
            format!("  protected while open: at most {at_most} at once (now released)\n")
        };
    }
    let now = &w.protected;
    format!(
        "  protected: {}, {}, {}{}; at most {at_most} at once so far\n",
        counted(now.workloads, "workload"),
        counted(now.pods, "pod"),
        counted(now.nodes, "node"),
        if now.pdbs.is_empty() {
            String::new()
        } else {
            format!(" (PDBs: {})", now.pdbs.join(", "))
        },
    )
}

/// A window's report in a few lines: what it protected, what it blocked, was anything
/// disrupted?
pub fn report(w: &WindowView) -> String {
    let r = &w.report;
    let mut out = format!(
        "window {}/{}: {}\n{}  blocked: {}; rollouts: {}\n",
        w.namespace,
        w.name,
        w.phase,
        protected_line(w),
        counted(r.evictions_blocked, "eviction"),
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

    fn closed_with(peak: PeakView) -> WindowView {
        let mut w = WindowView {
            name: "tw-1".into(),
            namespace: "shop".into(),
            phase: "Closed".into(),
            ..Default::default()
        };
        w.report.peak_protected = peak;
        w.report.clean = true;
        w.report.evictions_blocked = 2;
        w
    }

    #[test]
    fn the_report_of_an_ended_window_says_what_it_protected_while_open_and_what_it_blocked() {
        let text = report(&closed_with(PeakView {
            workloads: 1,
            pods: 2,
            nodes: 1,
        }));
        assert!(
            text.contains(
                "  protected while open: at most 1 workload, 2 pods, 1 node at once (now released)\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("  blocked: 2 evictions; rollouts: 0\n"),
            "{text}"
        );
        assert!(!text.contains("0 workloads, 0 pods, 0 nodes"), "{text}");
        let nothing = report(&closed_with(PeakView::default()));
        assert!(
            nothing.contains("protected while open: nothing (no pod was protected)"),
            "{nothing}"
        );
    }

    #[test]
    fn a_window_ready_over_no_pod_gets_a_warning_naming_its_selector() {
        let mut w = WindowView {
            name: "tw-1".into(),
            namespace: "shop".into(),
            phase: "Active".into(),
            ready: true,
            selector: selector::parse_text("tier=backend").unwrap(),
            ..Default::default()
        };
        assert_eq!(no_pod_warning(&w), None, "no Ready condition yet");
        w.conditions.push(crate::operations::types::ConditionView {
            type_: "Ready".into(),
            status: "True".into(),
            reason: "NoPodsSelected".into(),
            message: String::new(),
            last_transition_time: String::new(),
        });
        let warning = no_pod_warning(&w).unwrap();
        assert!(
            warning
                .starts_with("warning: window tw-1 selects no pod in shop: check -l tier=backend;"),
            "{warning}"
        );
        w.conditions[0].reason = "Protected".into();
        assert_eq!(no_pod_warning(&w), None);
    }
}
