//! No file-level import circle inside a crate.
//!
//! Every source file of a crate (`crates/*/src`, reached from `lib.rs` or
//! `main.rs` through its `mod` declarations; modules under `#[cfg(test)]`
//! left out) is a node. A file depends on another when its code names an item
//! the other file defines: through a `use` (a re-export included) or a path
//! in code (`crate::…`, `super::…`, `self::…`, or a child module's name). A
//! path is followed through re-exports (`pub use`) to the file that defines
//! the item. Two files of which one is the other's ancestor module (`lib.rs`
//! and any file, `kinds/mod.rs` and `kinds/choice.rs`) are not compared: a
//! parent declares its children and re-exports them, and a child uses the
//! helpers its parent shares; that is the module tree itself.
//!
//! The test fails on any circle among the rest, naming each file of the
//! circle and the paths that make each of its edges. A circle is mended by
//! moving the item both sides need to a file that depends on neither (or by
//! making one file the other's child); see the commit that cut the last ones
//! for examples.
//!
//! The parse is `syn`'s (a full Rust parser); macro bodies are token streams
//! and are not looked into, except for the macro's own path.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

type ModPath = Vec<String>;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Whether `attrs` hold a `#[cfg(…)]` that names `test` (and not `not`):
/// code that only a test build compiles.
fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.meta.require_list().is_ok_and(|l| {
                let text = l.tokens.to_string();
                let mut words = text.split(|c: char| !(c.is_alphanumeric() || c == '_'));
                words.clone().any(|w| w == "test") && !words.any(|w| w == "not")
            })
    })
}

/// One crate's files: module path → (file, parsed source).
struct Crate {
    name: String,
    files: BTreeMap<ModPath, (PathBuf, syn::File)>,
    /// Every module path, files' and inline modules'.
    modules: BTreeSet<ModPath>,
    /// Per module, the names it re-exports (`pub use`) and the module path
    /// where each really is (the module itself when the name is a module).
    reexports: BTreeMap<ModPath, BTreeMap<String, ModPath>>,
}

/// The file a `mod name;` declared in `decl` (module `path`) lives in.
fn child_file(decl: &Path, is_dir_owner: bool, name: &str) -> Option<PathBuf> {
    let dir = if is_dir_owner {
        decl.parent()?.to_path_buf()
    } else {
        decl.parent()?.join(decl.file_stem()?)
    };
    let flat = dir.join(format!("{name}.rs"));
    let nested = dir.join(name).join("mod.rs");
    if flat.exists() {
        Some(flat)
    } else if nested.exists() {
        Some(nested)
    } else {
        None
    }
}

fn load_crate(src: &Path) -> Crate {
    let name = src
        .parent()
        .and_then(Path::file_name)
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let root_file = if src.join("lib.rs").exists() {
        src.join("lib.rs")
    } else {
        src.join("main.rs")
    };
    let mut c = Crate {
        name,
        files: BTreeMap::new(),
        modules: BTreeSet::new(),
        reexports: BTreeMap::new(),
    };
    let mut todo = vec![(Vec::new(), root_file)];
    while let Some((path, file)) = todo.pop() {
        let text = std::fs::read_to_string(&file).expect("a source file is readable");
        let ast = syn::parse_file(&text)
            .unwrap_or_else(|e| panic!("{} does not parse: {e}", file.display()));
        let owner = matches!(
            file.file_name().and_then(|n| n.to_str()),
            Some("lib.rs" | "main.rs" | "mod.rs")
        );
        collect_modules(&mut c, &path, &ast.items, &file, owner, &mut todo);
        c.files.insert(path, (file, ast));
    }
    c
}

/// Record the modules of `items` (in module `path`, from `file`), queue the
/// files they declare, and record the re-exports.
fn collect_modules(
    c: &mut Crate,
    path: &ModPath,
    items: &[syn::Item],
    file: &Path,
    owner: bool,
    todo: &mut Vec<(ModPath, PathBuf)>,
) {
    c.modules.insert(path.clone());
    for item in items {
        match item {
            syn::Item::Mod(m) if !is_test(&m.attrs) => {
                let mut child = path.clone();
                child.push(m.ident.to_string());
                match &m.content {
                    Some((_, inner)) => collect_modules(c, &child, inner, file, owner, todo),
                    None => {
                        assert!(
                            !m.attrs.iter().any(|a| a.path().is_ident("path")),
                            "{}: `#[path]` on `mod {}` is not followed by this check",
                            file.display(),
                            m.ident
                        );
                        let f =
                            child_file(file, owner, &m.ident.to_string()).unwrap_or_else(|| {
                                panic!("{}: no file for `mod {}`", file.display(), m.ident)
                            });
                        c.modules.insert(child.clone());
                        todo.push((child, f));
                    }
                }
            }
            syn::Item::Use(u) if !matches!(u.vis, syn::Visibility::Inherited) => {
                let mut out = Vec::new();
                use_paths(&u.tree, &mut Vec::new(), &mut out);
                for (full, name) in out {
                    c.reexports
                        .entry(path.clone())
                        .or_default()
                        .insert(name, full_as_pending(&full));
                }
            }
            _ => {}
        }
    }
}

/// A re-export's target kept as its written segments until every module is
/// known (resolved in [`resolve_reexports`]); marked by a leading `"\0"`.
fn full_as_pending(full: &[String]) -> ModPath {
    let mut p = vec!["\0".to_string()];
    p.extend(full.iter().cloned());
    p
}

/// The paths of a `use` tree, each with the name it brings in (`*` for a glob).
fn use_paths(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<(ModPath, String)>) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            use_paths(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let mut full = prefix.clone();
            let name = n.ident.to_string();
            if name != "self" {
                full.push(name.clone());
            }
            let shown = if name == "self" {
                prefix.last().cloned().unwrap_or_default()
            } else {
                name
            };
            out.push((full, shown));
        }
        syn::UseTree::Rename(r) => {
            let mut full = prefix.clone();
            if r.ident != "self" {
                full.push(r.ident.to_string());
            }
            out.push((full, r.rename.to_string()));
        }
        syn::UseTree::Glob(_) => out.push((prefix.clone(), "*".into())),
        syn::UseTree::Group(g) => {
            for t in &g.items {
                use_paths(t, prefix, out);
            }
        }
    }
}

impl Crate {
    /// Where path `segments`, written in module `at`, leads: the module
    /// holding the item it names (re-exports followed), or `None` when it
    /// leaves the crate.
    fn resolve(&self, at: &ModPath, segments: &[String], depth: usize) -> Option<ModPath> {
        let (mut cur, rest): (ModPath, &[String]) = match segments.first().map(String::as_str) {
            Some("crate") => (Vec::new(), &segments[1..]),
            Some("self") => (at.clone(), &segments[1..]),
            Some("super") => {
                let mut cur = at.clone();
                let mut i = 0;
                while segments.get(i).map(String::as_str) == Some("super") {
                    cur.pop();
                    i += 1;
                }
                (cur, &segments[i..])
            }
            Some(first) => {
                let mut child = at.clone();
                child.push(first.to_string());
                if self.modules.contains(&child) {
                    (at.clone(), segments)
                } else {
                    return None;
                }
            }
            None => return None,
        };
        for (i, seg) in rest.iter().enumerate() {
            let mut next = cur.clone();
            next.push(seg.clone());
            if self.modules.contains(&next) {
                cur = next;
                continue;
            }
            // An item `cur` defines itself, unless it re-exports the name.
            let Some(target) = self.reexports.get(&cur).and_then(|r| r.get(seg)) else {
                return Some(cur);
            };
            if target.first().map(String::as_str) == Some("\0") {
                // Not resolved yet (a later round of `resolve_reexports`).
                return None;
            }
            if depth > 8 || target == &cur {
                return Some(cur);
            }
            // A re-exported module: go on inside it; an item: its module.
            if target.last() == Some(seg) && self.modules.contains(target) {
                let mut more = vec!["crate".to_string()];
                more.extend(target.iter().cloned());
                more.extend(rest[i + 1..].iter().cloned());
                return self.resolve(&Vec::new(), &more, depth + 1);
            }
            return Some(target.clone());
        }
        Some(cur)
    }

    /// Resolve every pending re-export target to the module of its item.
    fn resolve_reexports(&mut self) {
        for _round in 0..4 {
            let snapshot = self.reexports.clone();
            for (at, names) in &snapshot {
                for (name, target) in names {
                    if target.first().map(String::as_str) != Some("\0") {
                        continue;
                    }
                    let written = &target[1..];
                    let resolved = self.resolve(at, written, 0).map(|mut m| {
                        // `pub use a::b` where `b` is a module names the module.
                        if let Some(last) = written.last() {
                            let mut as_module = m.clone();
                            as_module.push(last.clone());
                            if self.modules.contains(&as_module) {
                                m = as_module;
                            }
                        }
                        m
                    });
                    if let Some(m) = resolved {
                        if let Some(r) = self.reexports.get_mut(at) {
                            r.insert(name.clone(), m);
                        }
                    }
                }
            }
        }
        for names in self.reexports.values_mut() {
            names.retain(|_, t| t.first().map(String::as_str) != Some("\0"));
        }
    }

    /// The file node a module path lives in: its longest prefix that is a file.
    fn file_of(&self, module: &ModPath) -> Option<ModPath> {
        (0..=module.len())
            .rev()
            .map(|n| module[..n].to_vec())
            .find(|p| self.files.contains_key(p))
    }
}

/// The paths a file's code names, each with the module it is written in.
struct Names<'c> {
    krate: &'c Crate,
    at: ModPath,
    out: Vec<(ModPath, ModPath)>,
}

impl Names<'_> {
    fn push(&mut self, segments: ModPath) {
        if segments.is_empty() {
            return;
        }
        self.out.push((self.at.clone(), segments));
    }
}

impl<'ast> Visit<'ast> for Names<'_> {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if is_test(&m.attrs) {
            return;
        }
        if let Some((_, items)) = &m.content {
            self.at.push(m.ident.to_string());
            for item in items {
                self.visit_item(item);
            }
            self.at.pop();
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        let mut out = Vec::new();
        use_paths(&u.tree, &mut Vec::new(), &mut out);
        for (full, _) in out {
            self.push(full);
        }
    }

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if !is_test(&f.attrs) {
            syn::visit::visit_item_fn(self, f);
        }
    }

    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        if !is_test(&i.attrs) {
            syn::visit::visit_item_impl(self, i);
        }
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segments: ModPath = p.segments.iter().map(|s| s.ident.to_string()).collect();
        self.push(segments);
        syn::visit::visit_path(self, p);
    }
}

/// Edges between file nodes that are not ancestor and descendant, each with
/// the paths that make it.
fn edges(c: &Crate) -> BTreeMap<(ModPath, ModPath), BTreeSet<String>> {
    let mut out: BTreeMap<(ModPath, ModPath), BTreeSet<String>> = BTreeMap::new();
    for (node, (_, ast)) in &c.files {
        let mut names = Names {
            krate: c,
            at: node.clone(),
            out: Vec::new(),
        };
        for item in &ast.items {
            names.visit_item(item);
        }
        for (at, segments) in names.out {
            let Some(target) = names.krate.resolve(&at, &segments, 0) else {
                continue;
            };
            let Some(to) = c.file_of(&target) else {
                continue;
            };
            let related = to.starts_with(node) || node.starts_with(&to);
            if !related {
                out.entry((node.clone(), to))
                    .or_default()
                    .insert(segments.join("::"));
            }
        }
    }
    out
}

/// Strongly connected components of more than one node (Tarjan).
fn circles(nodes: &[ModPath], adj: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<Vec<ModPath>> {
    struct State<'a> {
        adj: &'a BTreeMap<ModPath, BTreeSet<ModPath>>,
        index: BTreeMap<ModPath, usize>,
        low: BTreeMap<ModPath, usize>,
        stack: Vec<ModPath>,
        on: BTreeSet<ModPath>,
        next: usize,
        found: Vec<Vec<ModPath>>,
    }
    fn visit(s: &mut State<'_>, v: &ModPath) {
        s.index.insert(v.clone(), s.next);
        s.low.insert(v.clone(), s.next);
        s.next += 1;
        s.stack.push(v.clone());
        s.on.insert(v.clone());
        let succ: Vec<ModPath> = s.adj.get(v).into_iter().flatten().cloned().collect();
        for w in &succ {
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low[v];
                s.low.insert(v.clone(), lv.min(lw));
            } else if s.on.contains(w) {
                let iw = s.index[w];
                let lv = s.low[v];
                s.low.insert(v.clone(), lv.min(iw));
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(&w);
                let done = &w == v;
                comp.push(w);
                if done {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.found.push(comp);
            }
        }
    }
    let mut s = State {
        adj,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        found: Vec::new(),
    };
    for v in nodes {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.found
}

fn show(c: &Crate, m: &ModPath) -> String {
    c.files
        .get(m)
        .map(|(f, _)| f.strip_prefix(root()).unwrap_or(f).display().to_string())
        .unwrap_or_else(|| m.join("::"))
}

/// The circles of one crate, described; empty when there are none.
fn crate_circles(src: &Path) -> Vec<String> {
    let mut c = load_crate(src);
    c.resolve_reexports();
    let e = edges(&c);
    let mut adj: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
    for (a, b) in e.keys() {
        adj.entry(a.clone()).or_default().insert(b.clone());
    }
    let nodes: Vec<ModPath> = c.files.keys().cloned().collect();
    circles(&nodes, &adj)
        .into_iter()
        .map(|comp| {
            let mut text = format!(
                "{}: {}",
                c.name,
                comp.iter()
                    .map(|m| show(&c, m))
                    .collect::<Vec<_>>()
                    .join(" <-> ")
            );
            for a in &comp {
                for b in &comp {
                    if let Some(why) = e.get(&(a.clone(), b.clone())) {
                        text.push_str(&format!(
                            "\n    {} -> {}: {}",
                            show(&c, a),
                            show(&c, b),
                            why.iter().cloned().collect::<Vec<_>>().join(", ")
                        ));
                    }
                }
            }
            text
        })
        .collect()
}

fn crate_sources() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(root().join("crates"))
        .expect("crates/ is readable")
        .filter_map(Result::ok)
        .map(|e| e.path().join("src"))
        .filter(|p| p.join("lib.rs").exists() || p.join("main.rs").exists())
        .collect();
    out.sort();
    out
}

#[test]
fn no_crate_has_an_import_circle_between_its_files() {
    let sources = crate_sources();
    assert!(sources.len() >= 10, "found {} crates", sources.len());
    let found: Vec<String> = sources.iter().flat_map(|s| crate_circles(s)).collect();
    assert!(
        found.is_empty(),
        "import circles between files (see this test's module docs):\n{}",
        found.join("\n")
    );
}

/// The check finds a circle where there is one: two sibling files that name
/// each other's items, through a re-export on one side.
#[test]
fn a_circle_between_two_sibling_files_is_found() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let src = dir.path().join("demo").join("src");
    std::fs::create_dir_all(&src).expect("mkdir");
    std::fs::write(
        src.join("lib.rs"),
        "mod a;\nmod b;\npub use a::Alpha;\npub fn top() {}\n",
    )
    .expect("write");
    std::fs::write(
        src.join("a.rs"),
        "use crate::b::Beta;\npub struct Alpha(pub Beta);\n",
    )
    .expect("write");
    std::fs::write(
        src.join("b.rs"),
        "pub struct Beta;\npub fn f(x: crate::Alpha) -> crate::Alpha { crate::top(); x }\n",
    )
    .expect("write");
    let found = crate_circles(&src);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("demo: "), "{}", found[0]);
    assert!(found[0].contains("a.rs -> "), "{}", found[0]);
    assert!(found[0].contains("crate::b::Beta"), "{}", found[0]);
    assert!(found[0].contains("crate::Alpha"), "{}", found[0]);
    // `crate::top` is lib.rs's own item, the ancestor of both: not an edge.
    assert!(!found[0].contains("crate::top"), "{}", found[0]);
    // Made a child of `a`, `b` is in the module tree of `a`: no circle.
    std::fs::create_dir_all(src.join("a")).expect("mkdir");
    std::fs::rename(src.join("b.rs"), src.join("a").join("b.rs")).expect("mv");
    std::fs::write(
        src.join("lib.rs"),
        "mod a;\npub use a::Alpha;\npub fn top() {}\n",
    )
    .expect("write");
    std::fs::write(
        src.join("a.rs"),
        "mod b;\nuse b::Beta;\npub struct Alpha(pub Beta);\n",
    )
    .expect("write");
    assert!(crate_circles(&src).is_empty());
}
