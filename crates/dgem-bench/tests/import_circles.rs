//! No file-level import circle inside a crate.
//!
//! Every source file of a crate is a node: the files reached from
//! `crates/*/src/lib.rs` (or `main.rs` where there is no `lib.rs`) through
//! their `mod` declarations, modules under `#[cfg(test)]` left out (`src/bin`
//! and, beside a `lib.rs`, `main.rs` are not read). A file depends on
//! another when it names an item the other file defines:
//! - through a `use` (any visibility) or a path in code (`crate::…`,
//!   `super::…`, `self::…`, a child module's name, or a name the module
//!   defines or imports), followed through `use` items, glob imports and
//!   re-exported modules to the module that defines the item;
//! - through a `crate::…`, `super::…` or `self::…` path written in an
//!   attribute's or a macro's arguments, string literals included (e.g.
//!   `#[error("{}", crate::template::message(..))]`, `format!`, serde's
//!   `with = "crate::…"`): those are token streams, and only such paths are
//!   looked for in them;
//! - or by calling, as `Type::function(…)` with `Type` in this crate, an
//!   associated function whose name only one file of the crate defines in an
//!   inherent `impl` (`QuestionKind::parse(…)`). Names several files define
//!   (`new`, `as_str`), and names any trait declares or implements
//!   (`default`, `from_str`), are not followed, nor are calls in method
//!   syntax (`x.wire_name()`): without the compiler's type information the
//!   callee is unknown, and a method's name alone (`get`, `is_empty`)
//!   matches the standard library's as often as the crate's. Such a
//!   dependency is the reviewer's to see.
//!
//! Two files of which one is the other's ancestor module (`lib.rs` and any
//! file, `kinds/mod.rs` and `kinds/choice.rs`) are not compared: a parent
//! declares its children and re-exports them, and a child uses the helpers
//! its parent shares; that is the module tree itself. So the check is about
//! files, not whole module subtrees: `schema/validate.rs` may ask `kinds` for
//! a type's rules while `kinds` reads `schema`'s question types, since
//! `schema/mod.rs` (the file `kinds` depends on) depends on neither.
//!
//! The test fails on any circle among the rest, naming each file of the
//! circle and the paths that make each of its edges. A circle is mended by
//! moving the item both sides need to a file that depends on neither, or by
//! making one file the other's child. A `#[path]` on a module is refused,
//! since the check does not follow it.
//!
//! The parse is `syn`'s (a full Rust parser).
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::ext::IdentExt as _;
use syn::punctuated::Punctuated;
use syn::visit::Visit;

type ModPath = Vec<String>;

/// An identifier as the name it stands for (`r#type` is `type`).
fn name(ident: &syn::Ident) -> String {
    ident.unraw().to_string()
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Whether a `cfg` predicate holds only in a test build: `test`, or
/// `all(…)` with a member that does.
fn test_only(meta: &syn::Meta) -> bool {
    match meta {
        syn::Meta::Path(p) => p.is_ident("test"),
        syn::Meta::List(l) if l.path.is_ident("all") => l
            .parse_args_with(Punctuated::<syn::Meta, syn::Token![,]>::parse_terminated)
            .is_ok_and(|metas| metas.iter().any(test_only)),
        _ => false,
    }
}

/// Whether `attrs` hold a `#[cfg(…)]` that only a test build satisfies.
fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg") && a.parse_args::<syn::Meta>().is_ok_and(|m| test_only(&m))
    })
}

/// What one module (a file or an inline `mod`) holds.
#[derive(Default)]
struct Module {
    /// Names of the items it defines (types, functions, constants, traits,
    /// macros; its child modules are in [`Crate::modules`]).
    defines: BTreeSet<String>,
    /// Names its `use` items bring in, with the path written.
    uses: BTreeMap<String, ModPath>,
    /// Paths of its glob imports (`use a::*`).
    globs: Vec<ModPath>,
}

/// One crate's files and modules.
struct Crate {
    name: String,
    /// File nodes: module path → (file, parsed source).
    files: BTreeMap<ModPath, (PathBuf, syn::File)>,
    /// Every module, files' and inline ones'.
    modules: BTreeMap<ModPath, Module>,
    /// Inherent method and associated-function names → the files defining one.
    methods: BTreeMap<String, BTreeSet<ModPath>>,
    /// Names of functions in trait definitions and trait impls: never
    /// followed, since every implementor (and every derive) has them too.
    trait_fns: BTreeSet<String>,
}

/// The file a `mod name;` lives in, for a module whose children are in `dir`.
fn child_file(dir: &Path, name: &str) -> Option<PathBuf> {
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
        modules: BTreeMap::new(),
        methods: BTreeMap::new(),
        trait_fns: BTreeSet::new(),
    };
    let mut todo = vec![(Vec::new(), root_file, true)];
    while let Some((path, file, is_root)) = todo.pop() {
        let text = std::fs::read_to_string(&file).expect("a source file is readable");
        let ast = syn::parse_file(&text)
            .unwrap_or_else(|e| panic!("{} does not parse: {e}", file.display()));
        // The crate root and `mod.rs` keep their children beside them; a
        // `foo.rs` keeps them in `foo/`.
        let dir = match file.parent() {
            Some(d) if is_root || file.file_name().is_some_and(|n| n == "mod.rs") => {
                d.to_path_buf()
            }
            Some(d) => d.join(file.file_stem().unwrap_or_default()),
            None => PathBuf::new(),
        };
        collect(&mut c, &path, &path, &ast.items, &file, &dir, &mut todo);
        c.files.insert(path, (file, ast));
    }
    c
}

/// Record module `path` (in file node `node`) from its `items`: the names it
/// defines and imports, its methods, its child modules (queuing the files
/// they live in, under `dir`).
fn collect(
    c: &mut Crate,
    node: &ModPath,
    path: &ModPath,
    items: &[syn::Item],
    file: &Path,
    dir: &Path,
    todo: &mut Vec<(ModPath, PathBuf, bool)>,
) {
    c.modules.entry(path.clone()).or_default();
    for item in items {
        let ident = match item {
            syn::Item::Const(i) if !is_test(&i.attrs) => Some(&i.ident),
            syn::Item::Enum(i) if !is_test(&i.attrs) => Some(&i.ident),
            syn::Item::Fn(i) if !is_test(&i.attrs) => Some(&i.sig.ident),
            syn::Item::Static(i) if !is_test(&i.attrs) => Some(&i.ident),
            syn::Item::Struct(i) if !is_test(&i.attrs) => Some(&i.ident),
            syn::Item::Trait(i) if !is_test(&i.attrs) => Some(&i.ident),
            syn::Item::Type(i) if !is_test(&i.attrs) => Some(&i.ident),
            syn::Item::Union(i) if !is_test(&i.attrs) => Some(&i.ident),
            syn::Item::Macro(i) => i.ident.as_ref(),
            _ => None,
        };
        if let Some(ident) = ident {
            if let Some(m) = c.modules.get_mut(path) {
                m.defines.insert(name(ident));
            }
        }
        if let syn::Item::Trait(t) = item {
            for ti in &t.items {
                if let syn::TraitItem::Fn(f) = ti {
                    c.trait_fns.insert(name(&f.sig.ident));
                }
            }
        }
        match item {
            // Inherent methods are followed; a trait's (`default`, `fmt`) is
            // also every derive's and every other implementor's.
            syn::Item::Impl(i) if !is_test(&i.attrs) => {
                for it in &i.items {
                    match it {
                        syn::ImplItem::Fn(f) if i.trait_.is_some() => {
                            c.trait_fns.insert(name(&f.sig.ident));
                        }
                        syn::ImplItem::Fn(f) if !is_test(&f.attrs) => {
                            method(c, node, &f.sig.ident);
                        }
                        _ => {}
                    }
                }
            }
            syn::Item::Mod(m) if !is_test(&m.attrs) => {
                let mod_name = name(&m.ident);
                let mut child = path.clone();
                child.push(mod_name.clone());
                let child_dir = dir.join(&mod_name);
                assert!(
                    !m.attrs.iter().any(|a| a.path().is_ident("path")
                        || (a.path().is_ident("cfg_attr")
                            && a.meta
                                .require_list()
                                .is_ok_and(|l| { l.tokens.to_string().contains("path =") }))),
                    "{}: `#[path]` on `mod {mod_name}` is not followed by this check",
                    file.display(),
                );
                match &m.content {
                    Some((_, inner)) => collect(c, node, &child, inner, file, &child_dir, todo),
                    None => {
                        let f = child_file(dir, &mod_name).unwrap_or_else(|| {
                            panic!("{}: no file for `mod {mod_name}`", file.display())
                        });
                        c.modules.entry(child.clone()).or_default();
                        todo.push((child, f, false));
                    }
                }
            }
            syn::Item::Use(u) if !is_test(&u.attrs) => {
                let mut out = Vec::new();
                use_paths(&u.tree, &mut Vec::new(), &mut out);
                if let Some(m) = c.modules.get_mut(path) {
                    for (full, name) in out {
                        if name == "*" {
                            m.globs.push(full);
                        } else {
                            m.uses.insert(name, full);
                        }
                    }
                }
            }
            _ => {}
        }
    }
}

fn method(c: &mut Crate, node: &ModPath, ident: &syn::Ident) {
    c.methods
        .entry(name(ident))
        .or_default()
        .insert(node.clone());
}

/// The paths of a `use` tree, each with the name it brings in (`*` for a glob).
fn use_paths(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<(ModPath, String)>) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(name(&p.ident));
            use_paths(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let item = name(&n.ident);
            if item == "self" {
                out.push((prefix.clone(), prefix.last().cloned().unwrap_or_default()));
            } else {
                let mut full = prefix.clone();
                full.push(item.clone());
                out.push((full, item));
            }
        }
        syn::UseTree::Rename(r) => {
            let mut full = prefix.clone();
            if r.ident != "self" {
                full.push(name(&r.ident));
            }
            out.push((full, name(&r.rename)));
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
    /// Where `segments`, written in module `at`, lead: the module that
    /// defines the item they name, and whether they name that module itself;
    /// `None` when they leave the crate.
    fn resolve(&self, at: &ModPath, segments: &[String], depth: usize) -> Option<(ModPath, bool)> {
        if depth > 16 {
            return None;
        }
        let (start, rest): (ModPath, &[String]) = match segments.first().map(String::as_str) {
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
            // A bare first segment: a child module, or a name `at` defines
            // or imports (through a glob too).
            Some(first) if self.has_name(at, first, depth) => (at.clone(), segments),
            _ => return None,
        };
        self.walk(start, rest, depth)
    }

    /// Whether module `m` has `name`: a child module, an item it defines, or
    /// a name it imports, directly or through its globs.
    fn has_name(&self, m: &ModPath, name: &str, depth: usize) -> bool {
        let mut child = m.clone();
        child.push(name.to_string());
        let Some(module) = self.modules.get(m) else {
            return false;
        };
        self.modules.contains_key(&child)
            || module.defines.contains(name)
            || module.uses.contains_key(name)
            || (depth < 16
                && module.globs.iter().any(|g| {
                    self.resolve(m, g, depth + 1)
                        .is_some_and(|(g, _)| self.has_name(&g, name, depth + 1))
                }))
    }

    /// Follow `rest` from module `cur` (see [`Crate::resolve`]).
    fn walk(&self, mut cur: ModPath, rest: &[String], depth: usize) -> Option<(ModPath, bool)> {
        for (i, seg) in rest.iter().enumerate() {
            let mut next = cur.clone();
            next.push(seg.clone());
            if self.modules.contains_key(&next) {
                cur = next;
                continue;
            }
            let m = self.modules.get(&cur)?;
            if m.defines.contains(seg) {
                return Some((cur, false));
            }
            if let Some(written) = m.uses.get(seg) {
                // Resolve the import where it is written, then go on inside
                // it when it names a module.
                let mut full = written.clone();
                full.extend(rest[i + 1..].iter().cloned());
                return self.resolve(&cur, &full, depth + 1);
            }
            for g in &m.globs {
                let Some((g, _)) = self.resolve(&cur, g, depth + 1) else {
                    continue;
                };
                if self.has_name(&g, seg, depth + 1) {
                    return self.walk(g, &rest[i..], depth + 1);
                }
            }
            // An item the parse cannot see (made by a derive or a macro):
            // it is `cur`'s.
            return Some((cur, false));
        }
        Some((cur, true))
    }

    /// The file node a module lives in: its longest prefix that is a file.
    fn file_of(&self, module: &ModPath) -> Option<ModPath> {
        (0..=module.len())
            .rev()
            .map(|n| module[..n].to_vec())
            .find(|p| self.files.contains_key(p))
    }

    /// The one file defining method or associated function `name`, if only
    /// one does.
    fn method_file(&self, name: &str) -> Option<&ModPath> {
        if self.trait_fns.contains(name) {
            return None;
        }
        let files = self.methods.get(name)?;
        (files.len() == 1).then(|| files.iter().next()).flatten()
    }
}

/// `crate`/`super`/`self` paths in a token stream's text (an attribute's or
/// a macro's arguments, where `::` is printed with spaces around it), e.g.
/// `crate :: template :: unset_message (…)`.
fn paths_in_tokens(text: &str) -> Vec<ModPath> {
    let joined = text
        .replace(" :: ", "::")
        .replace(":: ", "::")
        .replace(" ::", "::");
    joined
        .split(|ch: char| !(ch.is_alphanumeric() || ch == '_' || ch == ':'))
        .filter_map(|word| {
            let segments: ModPath = word
                .trim_matches(':')
                .split("::")
                .map(str::to_string)
                .collect();
            let rooted = matches!(
                segments.first().map(String::as_str),
                Some("crate" | "super" | "self")
            );
            (rooted && segments.len() > 1 && segments.iter().all(|x| !x.is_empty()))
                .then_some(segments)
        })
        .collect()
}

/// What a file's code names: paths (with the module they are written in)
/// and the associated functions it calls.
struct Names {
    at: ModPath,
    paths: Vec<(ModPath, ModPath)>,
    /// Associated functions called as `Type::name(…)`, `Type` in this crate.
    calls: BTreeSet<String>,
    /// Paths of two or more segments (`Type::function`), with the module
    /// they are written in: their last segment may be an associated function.
    assoc: Vec<(ModPath, ModPath)>,
}

impl<'ast> Visit<'ast> for Names {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let test = match item {
            syn::Item::Fn(i) => is_test(&i.attrs),
            syn::Item::Impl(i) => is_test(&i.attrs),
            syn::Item::Use(i) => is_test(&i.attrs),
            syn::Item::Const(i) => is_test(&i.attrs),
            syn::Item::Static(i) => is_test(&i.attrs),
            syn::Item::Struct(i) => is_test(&i.attrs),
            syn::Item::Enum(i) => is_test(&i.attrs),
            syn::Item::Trait(i) => is_test(&i.attrs),
            syn::Item::Mod(i) => is_test(&i.attrs),
            syn::Item::Type(i) => is_test(&i.attrs),
            syn::Item::Union(i) => is_test(&i.attrs),
            syn::Item::Macro(i) => is_test(&i.attrs),
            _ => false,
        };
        if !test {
            syn::visit::visit_item(self, item);
        }
    }

    fn visit_impl_item(&mut self, item: &'ast syn::ImplItem) {
        let test = match item {
            syn::ImplItem::Fn(f) => is_test(&f.attrs),
            syn::ImplItem::Const(c) => is_test(&c.attrs),
            syn::ImplItem::Type(t) => is_test(&t.attrs),
            _ => false,
        };
        if !test {
            syn::visit::visit_impl_item(self, item);
        }
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if let Some((_, items)) = &m.content {
            self.at.push(name(&m.ident));
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
            self.paths.push((self.at.clone(), full));
        }
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segments: ModPath = p.segments.iter().map(|s| name(&s.ident)).collect();
        if segments.len() >= 2 {
            self.assoc.push((self.at.clone(), segments.clone()));
        }
        self.paths.push((self.at.clone(), segments));
        syn::visit::visit_path(self, p);
    }

    fn visit_attribute(&mut self, a: &'ast syn::Attribute) {
        if let syn::Meta::List(l) = &a.meta {
            for p in paths_in_tokens(&l.tokens.to_string()) {
                self.paths.push((self.at.clone(), p));
            }
        }
        syn::visit::visit_attribute(self, a);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        for p in paths_in_tokens(&m.tokens.to_string()) {
            self.paths.push((self.at.clone(), p));
        }
        syn::visit::visit_macro(self, m);
    }
}

/// Edges between file nodes that are not ancestor and descendant, each with
/// what makes it (a path, or `::name()` for an associated function).
fn edges(c: &Crate) -> BTreeMap<(ModPath, ModPath), BTreeSet<String>> {
    let mut out: BTreeMap<(ModPath, ModPath), BTreeSet<String>> = BTreeMap::new();
    let mut add = |from: &ModPath, to: ModPath, why: String| {
        let related = to.starts_with(from) || from.starts_with(&to);
        if !related {
            out.entry((from.clone(), to)).or_default().insert(why);
        }
    };
    for (node, (_, ast)) in &c.files {
        let mut names = Names {
            at: node.clone(),
            paths: Vec::new(),
            calls: BTreeSet::new(),
            assoc: Vec::new(),
        };
        for item in &ast.items {
            names.visit_item(item);
        }
        for (at, segments) in names.paths {
            let target = c
                .resolve(&at, &segments, 0)
                .and_then(|(t, _)| c.file_of(&t));
            if let Some(to) = target {
                add(node, to, segments.join("::"));
            }
        }
        // `Type::function(…)` where `Type` is `Self` or in this crate: an
        // associated function, followed when its name is unique.
        for (at, segments) in names.assoc {
            let (last, prefix) = segments.split_last().expect("two or more segments");
            // The prefix must name a type of this crate, not a module (a
            // module's function is a path, resolved above).
            let in_crate = prefix.first().is_some_and(|f| f == "Self")
                || c.resolve(&at, prefix, 0)
                    .is_some_and(|(_, is_module)| !is_module);
            if in_crate {
                names.calls.insert(last.clone());
            }
        }
        for call in names.calls {
            if let Some(to) = c.method_file(&call) {
                add(node, to.clone(), format!("::{call}()"));
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
    let c = load_crate(src);
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

/// A scratch crate: `files` as (path under `src/`, text).
fn scratch(files: &[(&str, &str)]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let src = dir.path().join("demo").join("src");
    for (path, text) in files {
        let p = src.join(path);
        std::fs::create_dir_all(p.parent().expect("a parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    }
    (dir, src)
}

/// The one circle of a scratch crate, or a failure naming what was found.
fn one_circle(files: &[(&str, &str)]) -> String {
    let (_dir, src) = scratch(files);
    let found = crate_circles(&src);
    assert_eq!(found.len(), 1, "{found:?}");
    found[0].clone()
}

/// Two sibling files that name each other's items through a re-export: found,
/// with each edge's path; gone once one file is the other's child.
#[test]
fn a_circle_between_two_sibling_files_is_found() {
    let circle = one_circle(&[
        (
            "lib.rs",
            "mod a;\nmod b;\npub use a::Alpha;\npub fn top() {}\n",
        ),
        ("a.rs", "use crate::b::Beta;\npub struct Alpha(pub Beta);\n"),
        (
            "b.rs",
            "pub struct Beta;\npub fn f(x: crate::Alpha) -> crate::Alpha { crate::top(); x }\n",
        ),
    ]);
    assert!(circle.starts_with("demo: "), "{circle}");
    assert!(circle.contains("crate::b::Beta"), "{circle}");
    assert!(circle.contains("crate::Alpha"), "{circle}");
    // `crate::top` is lib.rs's own item, the ancestor of both: not an edge.
    assert!(!circle.contains("crate::top"), "{circle}");
    // Made a child of `a` (the `foo.rs` + `foo/` layout), `b` is in `a`'s
    // module tree: no circle, while a third file that both name still has
    // its edges (here it closes no circle).
    let (_dir, src) = scratch(&[
        ("lib.rs", "mod a;\nmod c;\npub use a::Alpha;\n"),
        (
            "a.rs",
            "mod b;\nuse b::Beta;\npub struct Alpha(pub Beta);\n",
        ),
        (
            "a/b.rs",
            "pub struct Beta;\npub fn f(x: crate::Alpha) -> crate::Alpha { x }\n",
        ),
        ("c.rs", "pub fn g(_: crate::Alpha) {}\n"),
    ]);
    assert!(crate_circles(&src).is_empty());
    let c = load_crate(&src);
    let e = edges(&c);
    assert!(
        e.contains_key(&(vec!["c".to_string()], vec!["a".to_string()])),
        "{:?}",
        e.keys()
    );
}

/// Edges made by `super::` and `self::` (in `mod.rs` and flat files), a glob
/// re-export and a glob import, a re-exported module, a private import
/// reached through the parent, and an inline module's child file; and none
/// made by a module path in call position.
#[test]
fn paths_are_followed_through_every_kind_of_import() {
    // super:: from a mod.rs child, through a glob re-export of the parent.
    let circle = one_circle(&[
        ("lib.rs", "mod p;\nmod q;\n"),
        (
            "p/mod.rs",
            "mod types;\npub use types::*;\npub fn uses_q() { crate::q::Q::go(); }\n",
        ),
        (
            "p/types.rs",
            "pub struct Thing;\npub fn f() { crate::q::Q::go(); }\n",
        ),
        (
            "q.rs",
            "pub struct Q;\nimpl Q { pub fn go() {} }\npub fn g(_: super::p::Thing) {}\n",
        ),
    ]);
    assert!(circle.contains("p/types.rs"), "{circle}");
    assert!(circle.contains("super::p::Thing"), "{circle}");
    // A re-exported module (`pub use inner::deep`), and a private import
    // that a child reaches with `super::`.
    let circle = one_circle(&[
        ("lib.rs", "mod inner;\nmod x;\npub use inner::deep;\n"),
        ("inner/mod.rs", "pub mod deep;\n"),
        (
            "inner/deep.rs",
            "pub struct D;\npub fn h() { crate::x::y::Y; }\n",
        ),
        ("x.rs", "mod y;\nuse crate::deep::D as Dee;\n"),
        ("x/y.rs", "pub struct Y;\npub fn k(_: super::Dee) {}\n"),
    ]);
    assert!(circle.contains("inner/deep.rs"), "{circle}");
    assert!(circle.contains("x/y.rs"), "{circle}");
    assert!(circle.contains("super::Dee"), "{circle}");
    // `self::` in a mod.rs, a bare name a glob brings in, and the child file
    // of an inline module (`mod o { mod c; }` lives in `o/c.rs`).
    let circle = one_circle(&[
        ("lib.rs", "mod m;\nmod n;\nmod o { pub mod c; }\n"),
        ("m/mod.rs", "mod inner;\npub use self::inner::g;\n"),
        (
            "m/inner.rs",
            "use crate::o::c::*;\npub fn g() { let _ = Cee; }\n",
        ),
        ("o/c.rs", "pub struct Cee;\npub fn h() { crate::n::k(); }\n"),
        ("n.rs", "pub fn k() { crate::m::g(); }\n"),
    ]);
    assert!(circle.contains("m/inner.rs"), "{circle}");
    assert!(circle.contains("o/c.rs"), "{circle}");
    assert!(circle.contains("Cee"), "{circle}");
    assert!(circle.contains("crate::m::g"), "{circle}");
    // A module path in call position (`crate::n::k()`, `super::f()`) is a
    // function, not an associated one: no edge to a lone `impl` fn `k`.
    let (_dir, src) = scratch(&[
        ("lib.rs", "mod a;\nmod b;\n"),
        ("a.rs", "pub fn k() {}\npub fn f() { crate::a::k(); }\n"),
        (
            "b.rs",
            "pub struct B;\nimpl B { pub fn k() {} }\npub fn g() { crate::a::k(); }\n",
        ),
    ]);
    let c = load_crate(&src);
    let e = edges(&c);
    let a = vec!["a".to_string()];
    let b = vec!["b".to_string()];
    assert!(!e.contains_key(&(a.clone(), b.clone())), "{:?}", e.keys());
    assert!(e.contains_key(&(b, a)), "{:?}", e.keys());
}

/// Edges the item paths alone do not show: a path inside an attribute's or
/// a macro's arguments, and a call of an associated function only one file
/// defines.
#[test]
fn attribute_paths_and_unique_methods_make_edges() {
    let circle = one_circle(&[
        ("lib.rs", "mod err;\nmod tmpl;\n"),
        (
            "err.rs",
            "#[error(\"{}\", crate::tmpl::message(.name))]\npub struct E;\n\
             pub fn show() -> String { format!(\"{}\", crate::tmpl::other()) }\n",
        ),
        (
            "tmpl.rs",
            "pub fn message() {}\npub fn other() {}\npub fn t(_: crate::err::E) {}\n",
        ),
    ]);
    assert!(circle.contains("crate::tmpl::message"), "{circle}");
    assert!(circle.contains("crate::tmpl::other"), "{circle}");
    let circle = one_circle(&[
        ("lib.rs", "mod kind;\nmod names;\n"),
        (
            "kind.rs",
            "pub enum Kind { A }\npub fn f(k: Kind) -> &'static str { Kind::wire_label(&k) }\n",
        ),
        (
            "names.rs",
            "impl crate::kind::Kind { pub fn wire_label(&self) -> &'static str { \"a\" } }\n",
        ),
    ]);
    assert!(circle.contains("::wire_label()"), "{circle}");
    // Test-only code makes no edge (a module, an import, an impl's fn); code
    // a non-test build compiles does (`any(test, …)`, a feature named like a
    // test).
    let test_only = "pub struct A;\n#[cfg(test)]\nuse crate::b::B;\n\
        #[cfg(all(test, unix))]\nmod t { fn f(_: crate::b::B) {} }\n\
        impl A {\n#[cfg(test)]\nfn h(_: crate::b::B) {} }\n";
    let (_dir, src) = scratch(&[
        ("lib.rs", "mod a;\nmod b;\n"),
        ("a.rs", test_only),
        ("b.rs", "pub struct B;\npub fn g(_: crate::a::A) {}\n"),
    ]);
    assert!(crate_circles(&src).is_empty());
    for built in [
        "#[cfg(any(test, unix))]\nuse crate::b::B;\n",
        "#[cfg(feature = \"test-utils\")]\nuse crate::b::B;\n",
        "use crate::b::B;\n",
    ] {
        let text = format!("pub struct A;\n{built}");
        let circle = one_circle(&[
            ("lib.rs", "mod a;\nmod b;\n"),
            ("a.rs", &text),
            ("b.rs", "pub struct B;\npub fn g(_: crate::a::A) {}\n"),
        ]);
        assert!(circle.contains("crate::b::B"), "{built}: {circle}");
    }
}
