//! The layering of `src/`, checked from the source text: each top-level module may use only
//! the layers below it (docs/architecture.md), and no two files use each other, directly or
//! through others (no import cycle).
//!
//! A file's dependencies are the modules its code (not its comments, not its `#[cfg(test)]`
//! module) names as `crate::a::b` or `super::b`, resolved to the files that define them. A
//! directory's `mod.rs` declares and starts its submodules: its uses of its own submodules are
//! not counted, their uses of it are.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Top-level modules from the bottom up; a module may use only those before it.
const LAYERS: &[&[&str]] = &[
    &["resources", "telemetry", "testing"],
    &["k8s"],
    &["runtime"],
    &["window", "drain", "api", "intercept"],
    &["operator", "client"],
    &["cli"],
];

fn layer_of(top: &str) -> usize {
    LAYERS
        .iter()
        .position(|l| l.contains(&top))
        .unwrap_or_else(|| panic!("module {top} is in no layer of tests/architecture.rs"))
}

/// Every `.rs` file under `src/` by its module path (`window::plan`; `window` for mod.rs).
fn modules() -> BTreeMap<String, PathBuf> {
    fn walk(dir: &Path, prefix: &[String], out: &mut BTreeMap<String, PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let stem = path.file_stem().unwrap().to_string_lossy().to_string();
            if path.is_dir() {
                let mut p = prefix.to_vec();
                p.push(stem);
                walk(&path, &p, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let mut p = prefix.to_vec();
                if stem != "mod" && stem != "lib" && stem != "main" {
                    p.push(stem);
                }
                if !p.is_empty() {
                    out.insert(p.join("::"), path);
                }
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &[],
        &mut out,
    );
    out
}

/// The modules a file names, resolved to the longest known module path.
fn dependencies(module: &str, text: &str, known: &BTreeMap<String, PathBuf>) -> BTreeSet<String> {
    let parent: Vec<&str> = {
        let parts: Vec<&str> = module.split("::").collect();
        let is_dir_module = known[module].ends_with("mod.rs");
        if is_dir_module {
            parts
        } else {
            parts[..parts.len() - 1].to_vec()
        }
    };
    let mut deps = BTreeSet::new();
    for (prefix, base) in [("crate::", vec![]), ("super::", parent.clone())] {
        for (i, _) in text.match_indices(prefix) {
            if text[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let rest = &text[i + prefix.len()..];
            let path: Vec<&str> = rest
                .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .next()
                .unwrap_or("")
                .split("::")
                .filter(|s| !s.is_empty())
                .collect();
            let mut full: Vec<&str> = base.clone();
            full.extend(path);
            while !full.is_empty() {
                let candidate = full.join("::");
                if known.contains_key(&candidate) {
                    if candidate != module && !module.starts_with(&format!("{candidate}::")) {
                        deps.insert(candidate);
                    }
                    break;
                }
                full.pop();
            }
        }
    }
    deps
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let known = modules();
    known
        .iter()
        .map(|(module, path)| {
            let text = std::fs::read_to_string(path).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap_or_default();
            let code: String = code
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .collect::<Vec<_>>()
                .join("\n");
            let deps = dependencies(module, &code, &known)
                .into_iter()
                .filter(|d| !d.starts_with(&format!("{module}::")))
                .collect();
            (module.clone(), deps)
        })
        .collect()
}

#[test]
fn each_layer_uses_only_the_layers_below_it() {
    let mut wrong = vec![];
    for (module, deps) in graph() {
        let top = module.split("::").next().unwrap();
        for dep in deps {
            let dep_top = dep.split("::").next().unwrap();
            if dep_top != top && layer_of(dep_top) >= layer_of(top) {
                wrong.push(format!("{module} uses {dep}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the layering:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn no_file_depends_on_itself_through_others() {
    let graph = graph();
    // Depth-first search for a back edge; report each cycle found.
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
        cycles: &mut Vec<String>,
    ) {
        if let Some(at) = stack.iter().position(|n| n == node) {
            let mut cycle = stack[at..].to_vec();
            cycle.push(node.to_string());
            cycles.push(cycle.join(" → "));
            return;
        }
        if done.contains(node) {
            return;
        }
        stack.push(node.to_string());
        for dep in graph.get(node).into_iter().flatten() {
            visit(dep, graph, stack, done, cycles);
        }
        stack.pop();
        done.insert(node.to_string());
    }
    let (mut done, mut cycles) = (BTreeSet::new(), vec![]);
    for node in graph.keys() {
        visit(node, &graph, &mut vec![], &mut done, &mut cycles);
    }
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}
