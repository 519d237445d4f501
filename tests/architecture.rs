//! The shape of `src/`, checked on the parsed source (`syn`): each top-level module uses only
//! the layers below it (docs/architecture.md), no module uses itself through others (no import
//! cycle at any depth), and no file holds more than [`MAX_CODE_LINES`] lines outside its tests.
//!
//! A module's dependencies are the modules its code names: `use` trees (grouped ones leaf by
//! leaf), paths in types and expressions, and `crate::`/`super::`/`self::` paths inside macro
//! calls, each resolved to the file that defines the item. A name a module re-exports
//! (`pub use a::X`) resolves to where it is defined, so a `mod.rs` that re-exports is not a hub
//! every user passes through; what a `mod.rs` itself defines and its children use is an edge
//! child → parent, and what it uses of its children an edge parent → child. Items under
//! `#[cfg(test)]` count for nothing, wherever they sit in the file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use syn::spanned::Spanned;
use syn::visit::{self, Visit};

/// Top-level modules from the bottom up; a module may use only those before it.
const LAYERS: &[&[&str]] = &[
    &["resources", "telemetry", "testing"],
    &["k8s"],
    &["runtime"],
    &["operations", "rollout"],
    &["window", "drain", "api", "intercept", "respond"],
    &["operator", "client"],
    &["cli"],
];

/// Lines a file may hold outside its `#[cfg(test)]` items (doc comments count: they are read).
const MAX_CODE_LINES: usize = 400;

fn layer_of(top: &str) -> usize {
    LAYERS
        .iter()
        .position(|l| l.contains(&top))
        .unwrap_or_else(|| panic!("module {top} is in no layer of tests/architecture.rs"))
}

/// One source file, parsed.
struct Module {
    /// Its module path as segments (`["window", "plan"]`; `["window"]` for window/mod.rs).
    path: Vec<String>,
    file: PathBuf,
    text: String,
    syntax: syn::File,
}

/// The source tree read: `src/` of this crate, or `DISRUPTION_GUARD_ARCHITECTURE_SRC` (to
/// take the figures of another checkout with the same binary).
fn src_dir() -> PathBuf {
    std::env::var_os("DISRUPTION_GUARD_ARCHITECTURE_SRC")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
}

/// Every `.rs` file under `src/` but the crate roots, by its module path (`window::plan`).
fn modules() -> BTreeMap<String, Module> {
    fn walk(dir: &Path, prefix: &[String], out: &mut BTreeMap<String, Module>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let file = entry.unwrap().path();
            let stem = file.file_stem().unwrap().to_string_lossy().to_string();
            let mut path = prefix.to_vec();
            if file.is_dir() {
                path.push(stem);
                walk(&file, &path, out);
                continue;
            }
            if file.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            if !["mod", "lib", "main"].contains(&stem.as_str()) {
                path.push(stem);
            }
            if path.is_empty() {
                continue;
            }
            let text = std::fs::read_to_string(&file).unwrap();
            let syntax = syn::parse_file(&text)
                .unwrap_or_else(|e| panic!("{} does not parse: {e}", file.display()));
            out.insert(
                path.join("::"),
                Module {
                    path,
                    file,
                    text,
                    syntax,
                },
            );
        }
    }
    let mut out = BTreeMap::new();
    walk(&src_dir(), &[], &mut out);
    out
}

/// Whether the attributes put an item under test only (`#[cfg(test)]`, `#[cfg(all(test, …))]`).
fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.meta.require_list().is_ok_and(|list| {
                let tokens = list.tokens.to_string();
                let words: Vec<&str> = tokens
                    .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .filter(|w| !w.is_empty())
                    .collect();
                words.contains(&"test") && !words.contains(&"not")
            })
    })
}

/// What a file's code names: paths (from `crate`, `super`, `self` or a first segment that may
/// be a child module), with whether each is a `pub use` and under what name it is re-exported;
/// and the line ranges of its test-only items.
#[derive(Default)]
struct Names {
    /// Each path with the inline modules (`mod linux { … }`) it sits in, which its `super`
    /// and `self` are relative to.
    paths: Vec<(Vec<String>, Vec<String>)>,
    inline: Vec<String>,
    reexports: Vec<(String, Vec<String>)>,
    test_lines: Vec<(usize, usize)>,
    /// Child modules declared under `#[cfg(test)]` (`mod plan_tests;`): whole test files,
    /// each with its `#[path]` if it has one.
    test_mods: Vec<(String, Option<String>)>,
}

impl Names {
    fn of(file: &syn::File) -> Self {
        let mut names = Names::default();
        names.visit_file(file);
        names
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree, public: bool) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree, public);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let name = n.ident.to_string();
                self.leaf(prefix, &name, &name, public);
            }
            syn::UseTree::Rename(r) => {
                self.leaf(prefix, &r.ident.to_string(), &r.rename.to_string(), public);
            }
            syn::UseTree::Glob(_) => self.paths.push((self.inline.clone(), prefix.clone())),
            syn::UseTree::Group(g) => {
                for tree in &g.items {
                    self.use_tree(prefix, tree, public);
                }
            }
        }
    }

    fn leaf(&mut self, prefix: &[String], ident: &str, name: &str, public: bool) {
        let mut path = prefix.to_vec();
        if ident != "self" {
            path.push(ident.to_string());
        }
        let name = if ident == "self" && name == "self" {
            prefix.last().cloned().unwrap_or_default()
        } else {
            name.to_string()
        };
        if public && self.inline.is_empty() {
            self.reexports.push((name, path.clone()));
        }
        self.paths.push((self.inline.clone(), path));
    }

    /// `crate :: a :: b`, `super :: …` and `self :: …` runs inside a macro call's tokens.
    fn macro_tokens(&mut self, tokens: TokenStream) {
        let trees: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < trees.len() {
            match &trees[i] {
                TokenTree::Group(g) => self.macro_tokens(g.stream()),
                TokenTree::Ident(id) if ["crate", "super", "self"].contains(&&*id.to_string()) => {
                    let mut path = vec![id.to_string()];
                    while let (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b))) =
                        (trees.get(i + 1), trees.get(i + 2))
                    {
                        let Some(TokenTree::Ident(next)) = trees.get(i + 3) else {
                            break;
                        };
                        if a.as_char() != ':' || b.as_char() != ':' {
                            break;
                        }
                        path.push(next.to_string());
                        i += 3;
                    }
                    if path.len() > 1 {
                        self.paths.push((self.inline.clone(), path));
                    }
                }
                _ => {}
            }
            i += 1;
        }
    }

    fn skip(&mut self, attrs: &[syn::Attribute], span: proc_macro2::Span) -> bool {
        if is_test(attrs) {
            self.test_lines.push((span.start().line, span.end().line));
            return true;
        }
        false
    }
}

impl<'ast> Visit<'ast> for Names {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs = match item {
            syn::Item::Const(i) => &i.attrs,
            syn::Item::Enum(i) => &i.attrs,
            syn::Item::Fn(i) => &i.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Macro(i) => &i.attrs,
            syn::Item::Mod(i) => &i.attrs,
            syn::Item::Static(i) => &i.attrs,
            syn::Item::Struct(i) => &i.attrs,
            syn::Item::Trait(i) => &i.attrs,
            syn::Item::Type(i) => &i.attrs,
            syn::Item::Use(i) => &i.attrs,
            _ => return visit::visit_item(self, item),
        };
        if self.skip(attrs, item.span()) {
            if let syn::Item::Mod(m) = item
                && m.content.is_none()
            {
                let path = m.attrs.iter().find_map(|a| match &a.meta {
                    syn::Meta::NameValue(nv) if nv.path.is_ident("path") => match &nv.value {
                        syn::Expr::Lit(syn::ExprLit {
                            lit: syn::Lit::Str(s),
                            ..
                        }) => Some(s.value()),
                        _ => None,
                    },
                    _ => None,
                });
                self.test_mods.push((m.ident.to_string(), path));
            }
            return;
        }
        if let syn::Item::Mod(m) = item
            && m.content.is_some()
        {
            self.inline.push(m.ident.to_string());
            visit::visit_item(self, item);
            self.inline.pop();
            return;
        }
        if let syn::Item::Use(u) = item {
            let public = matches!(
                u.vis,
                syn::Visibility::Public(_) | syn::Visibility::Restricted(_)
            );
            self.use_tree(&mut vec![], &u.tree, public);
            return;
        }
        visit::visit_item(self, item);
    }

    fn visit_impl_item(&mut self, item: &'ast syn::ImplItem) {
        let attrs = match item {
            syn::ImplItem::Fn(i) => &i.attrs,
            syn::ImplItem::Const(i) => &i.attrs,
            syn::ImplItem::Type(i) => &i.attrs,
            _ => return visit::visit_impl_item(self, item),
        };
        if !self.skip(attrs, item.span()) {
            visit::visit_impl_item(self, item);
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments = path.segments.iter().map(|s| s.ident.to_string()).collect();
        self.paths.push((self.inline.clone(), segments));
        visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.macro_tokens(mac.tokens.clone());
        visit::visit_macro(self, mac);
    }
}

/// The crate's modules and what each re-exports, to resolve paths to defining modules.
struct Crate {
    modules: BTreeMap<String, Module>,
    names: BTreeMap<String, Names>,
}

impl Crate {
    fn load() -> Self {
        let mut modules = modules();
        let mut names: BTreeMap<String, Names> = modules
            .iter()
            .map(|(k, m)| (k.clone(), Names::of(&m.syntax)))
            .collect();
        // Files that only tests compile are not part of the product's shape.
        let test_files: Vec<String> = names
            .iter()
            .flat_map(|(key, n)| {
                let module = &modules[key];
                n.test_mods.iter().map(move |(ident, path)| match path {
                    // `#[path]` is relative to the directory the declaring file is in.
                    Some(path) => {
                        let dir = if module.file.ends_with("mod.rs") {
                            &module.path[..]
                        } else {
                            &module.path[..module.path.len() - 1]
                        };
                        let stem = Path::new(path).file_stem().unwrap().to_string_lossy();
                        [dir, &[stem.to_string()]].concat().join("::")
                    }
                    None => format!("{key}::{ident}"),
                })
            })
            .collect();
        for key in test_files {
            modules.remove(&key);
            names.remove(&key);
        }
        Crate { modules, names }
    }

    /// `path` as written in `module`, made absolute (crate-relative segments); `None` for a
    /// path outside the crate (another crate, a local item, a type parameter).
    fn absolute(&self, module: &[String], path: &[String]) -> Option<Vec<String>> {
        // A bare `super`, `self` or `crate` (`pub(super)`) names no item.
        if path.len() < 2 {
            return None;
        }
        let first = path.first()?;
        match first.as_str() {
            "crate" => Some(path[1..].to_vec()),
            "self" => Some([module, &path[1..]].concat()),
            "super" => {
                let ups = path.iter().take_while(|s| *s == "super").count();
                let base = module.get(..module.len().checked_sub(ups)?)?;
                Some([base, &path[ups..]].concat())
            }
            // A first segment naming a child module (`plan::decide`, `use plan::Target`).
            _ => {
                let child = [module, &path[..1]].concat().join("::");
                self.modules
                    .contains_key(&child)
                    .then(|| [module, path].concat())
            }
        }
    }

    /// The module that defines what the absolute `path` names, following re-exports.
    fn defining(&self, path: &[String], depth: usize) -> Option<String> {
        let at = (1..=path.len())
            .rev()
            .find(|n| self.modules.contains_key(&path[..*n].join("::")))?;
        let module = path[..at].join("::");
        if depth < 8
            && let Some(name) = path.get(at)
            && let Some((_, target)) = self.names[&module]
                .reexports
                .iter()
                .find(|(n, _)| n == name)
            && let Some(target) = self.absolute(&self.modules[&module].path, target)
        {
            let rest = &path[at + 1..];
            if let Some(found) = self.defining(&[target.as_slice(), rest].concat(), depth + 1) {
                return Some(found);
            }
        }
        Some(module)
    }

    /// Module → the modules it uses (itself excluded).
    fn graph(&self) -> BTreeMap<String, BTreeSet<String>> {
        self.modules
            .iter()
            .map(|(key, module)| {
                let deps = self.names[key]
                    .paths
                    .iter()
                    .filter_map(|(inline, p)| {
                        self.absolute(&[&module.path[..], inline].concat(), p)
                    })
                    .filter_map(|p| self.defining(&p, 0))
                    .filter(|d| d != key)
                    .collect();
                (key.clone(), deps)
            })
            .collect()
    }

    /// Lines of `module` outside its test-only items, its doc comments and blank lines
    /// included: what a reader of the product's code reads.
    fn code_lines(&self, key: &str) -> usize {
        self.lines(key, |_| true)
    }

    /// Of those, the lines that are neither blank nor only a comment.
    fn statement_lines(&self, key: &str) -> usize {
        self.lines(key, |line| {
            let trimmed = line.trim();
            !trimmed.is_empty() && !trimmed.starts_with("//")
        })
    }

    fn lines(&self, key: &str, counts: impl Fn(&str) -> bool) -> usize {
        let tests = &self.names[key].test_lines;
        self.modules[key]
            .text
            .lines()
            .enumerate()
            .filter(|(i, line)| {
                let n = i + 1;
                counts(line) && !tests.iter().any(|(a, b)| (*a..=*b).contains(&n))
            })
            .count()
    }
}

/// Every group of modules that use each other, directly or through others: the strongly
/// connected components of `graph` with more than one module (Tarjan), each written as its
/// modules in order. Every import cycle lies inside one; a group is gone only when no cycle
/// among its modules is left.
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> BTreeSet<String> {
    #[derive(Default)]
    struct Tarjan {
        index: BTreeMap<String, usize>,
        low: BTreeMap<String, usize>,
        stack: Vec<String>,
        on_stack: BTreeSet<String>,
        found: BTreeSet<String>,
    }
    fn connect(node: &str, graph: &BTreeMap<String, BTreeSet<String>>, t: &mut Tarjan) {
        let i = t.index.len();
        t.index.insert(node.to_string(), i);
        t.low.insert(node.to_string(), i);
        t.stack.push(node.to_string());
        t.on_stack.insert(node.to_string());
        for dep in graph.get(node).into_iter().flatten() {
            if !t.index.contains_key(dep) {
                connect(dep, graph, t);
                let low = t.low[node].min(t.low[dep]);
                t.low.insert(node.to_string(), low);
            } else if t.on_stack.contains(dep) {
                let low = t.low[node].min(t.index[dep]);
                t.low.insert(node.to_string(), low);
            }
        }
        if t.low[node] == t.index[node] {
            let mut group = BTreeSet::new();
            while let Some(member) = t.stack.pop() {
                t.on_stack.remove(&member);
                let done = member == node;
                group.insert(member);
                if done {
                    break;
                }
            }
            if group.len() > 1 {
                t.found
                    .insert(group.into_iter().collect::<Vec<_>>().join(" ↔ "));
            }
        }
    }
    let mut t = Tarjan::default();
    for node in graph.keys() {
        if !t.index.contains_key(node) {
            connect(node, graph, &mut t);
        }
    }
    t.found
}

#[test]
fn each_layer_uses_only_the_layers_below_it() {
    let krate = Crate::load();
    let mut wrong = vec![];
    for (module, deps) in krate.graph() {
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
fn no_module_uses_itself_through_others() {
    let found = cycles(&Crate::load().graph());
    assert!(
        found.is_empty(),
        "modules that use each other:\n{}",
        found.into_iter().collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn no_file_holds_more_than_400_lines_outside_its_tests() {
    let krate = Crate::load();
    let large: Vec<String> = krate
        .modules
        .iter()
        .filter(|(k, _)| krate.code_lines(k) > MAX_CODE_LINES)
        .map(|(k, m)| format!("{}: {} lines", m.file.display(), krate.code_lines(k)))
        .collect();
    assert!(
        large.is_empty(),
        "files over {MAX_CODE_LINES} lines outside their tests (split them by concept):\n{}",
        large.join("\n")
    );
}

/// The figures of the tree: code lines of `src/` (inline tests and test files excluded), files
/// over the limit, cycles. `cargo test --test architecture -- --ignored --nocapture figures`;
/// with `DISRUPTION_GUARD_ARCHITECTURE_SRC=<checkout>/src`, another tree's.
#[test]
#[ignore = "prints figures"]
fn figures() {
    let krate = Crate::load();
    let lines: usize = krate.modules.keys().map(|k| krate.code_lines(k)).sum();
    let statements: usize = krate.modules.keys().map(|k| krate.statement_lines(k)).sum();
    let all: usize = krate.modules.values().map(|m| m.text.lines().count()).sum();
    let large: Vec<String> = krate
        .modules
        .keys()
        .filter(|k| krate.code_lines(k) > MAX_CODE_LINES)
        .map(|k| format!("{k} ({})", krate.code_lines(k)))
        .collect();
    let cycles = cycles(&krate.graph());
    println!("files: {}", krate.modules.len());
    println!("lines of src/ (test files excluded): {all}");
    println!("code lines (inline tests excluded): {lines}");
    println!("  of which neither blank nor only a comment: {statements}");
    println!(
        "files over {MAX_CODE_LINES} code lines: {} {large:?}",
        large.len()
    );
    println!("cycles: {}", cycles.len());
    for c in &cycles {
        println!("  {c}");
    }
    // DISRUPTION_GUARD_ARCHITECTURE_EDGES=<module>: what makes each of its edges.
    if let Ok(key) = std::env::var("DISRUPTION_GUARD_ARCHITECTURE_EDGES") {
        let module = &krate.modules[&key];
        for (inline, path) in &krate.names[&key].paths {
            if let Some(dep) = krate
                .absolute(&[&module.path[..], inline].concat(), path)
                .and_then(|p| krate.defining(&p, 0))
                .filter(|d| *d != key)
            {
                println!("  {key} → {dep} by {}", path.join("::"));
            }
        }
    }
}

/// The checks see what the old text-cutting one could not: code after an inline test module,
/// grouped `super::{…}` imports, a mod.rs's uses of its children, macro-call paths.
#[test]
fn the_parser_sees_every_edge() {
    let file: syn::File = syn::parse_str(
        r#"
        use super::{a, b::{C, D}};
        #[cfg(test)]
        mod tests { use crate::hidden; }
        fn f() { child::g(); tracing::info!("{}", crate::m::N); }
        "#,
    )
    .unwrap();
    let names = Names::of(&file);
    let paths: BTreeSet<String> = names.paths.iter().map(|(_, p)| p.join("::")).collect();
    for want in [
        "super::a",
        "super::b::C",
        "super::b::D",
        "child::g",
        "crate::m::N",
    ] {
        assert!(paths.contains(want), "{want} not seen in {paths:?}");
    }
    assert!(!paths.iter().any(|p| p.contains("hidden")), "{paths:?}");
    assert_eq!(names.test_lines.len(), 1);
}

#[test]
fn a_cycle_is_found_as_the_group_it_joins() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("a", vec!["b"]),
        ("d", vec!["a"]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect()))
    .collect();
    assert_eq!(
        cycles(&graph).into_iter().collect::<Vec<_>>(),
        vec!["a ↔ b ↔ c".to_string()]
    );
}
