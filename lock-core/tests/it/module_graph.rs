//! lock-core's modules import each other without a circle.
//!
//! The test reads `lock-core/src`, builds the module dependency graph and
//! fails on any strongly connected component of more than one module,
//! naming the lines that close each circle. Every file is a node
//! (`engine/mod.rs` is `engine`, `engine/cleanup.rs` is `engine::cleanup`;
//! inline modules such as `mod tests` belong to their file). Module `a`
//! depends on `b` when `a`'s code (a `use`, or a path in an expression, a
//! type or a macro body) names `crate::b::…`, `$crate::b::…`, `super::…` or
//! `self::…` reaching into `b`. A re-export is transparent: `crate::X`
//! (lib.rs), `crate::raw::X`, `crate::options::validate_key` are followed
//! to the module that defines the item, and a `pub use` line is an edge
//! only when its module also uses the name itself. Comments (and so doc
//! links) are not dependencies.
#![allow(clippy::expect_used)] // test helpers

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    /// `::`
    Path,
    Punct(char),
}

#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    line: usize,
}

impl Token {
    fn is_ident(&self, s: &str) -> bool {
        matches!(&self.tok, Tok::Ident(i) if i == s)
    }

    fn is_punct(&self, c: char) -> bool {
        self.tok == Tok::Punct(c)
    }

    fn ident(&self) -> Option<&str> {
        match &self.tok {
            Tok::Ident(i) => Some(i),
            _ => None,
        }
    }
}

/// Rust source to tokens, without comments, string and char literals.
fn tokenize(src: &str) -> Vec<Token> {
    let chars: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    let ident_start = |c: char| c.is_alphabetic() || c == '_';
    let ident_char = |c: char| c.is_alphanumeric() || c == '_';
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if chars[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
        } else if c == '"' || ((c == 'r' || c == 'b') && matches!(next, Some('"') | Some('#') | Some('r'))) {
            // A string literal (plain, byte, raw), or an identifier starting with r/b.
            let mut j = i;
            if chars[j] == 'b' {
                j += 1;
            }
            let raw = chars.get(j) == Some(&'r');
            if raw {
                j += 1;
            }
            let mut hashes = 0;
            while raw && chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                // Not a literal after all: an identifier such as `b` or `r#type`.
                let start = i;
                i += 1;
                while i < chars.len() && (ident_char(chars[i]) || chars[i] == '#') {
                    i += 1;
                }
                let word: String = chars[start..i].iter().filter(|c| **c != '#').collect();
                let word = word
                    .strip_prefix('r')
                    .filter(|_| chars[start + 1] == '#')
                    .map_or(word.clone(), String::from);
                out.push(Token {
                    tok: Tok::Ident(word),
                    line,
                });
                continue;
            }
            j += 1;
            loop {
                match chars.get(j) {
                    None => break,
                    Some('\\') if !raw => j += 2,
                    Some('"') => {
                        let closes = (0..hashes).all(|h| chars.get(j + 1 + h) == Some(&'#'));
                        j += 1;
                        if closes {
                            j += hashes;
                            break;
                        }
                    }
                    Some(ch) => {
                        if *ch == '\n' {
                            line += 1;
                        }
                        j += 1;
                    }
                }
            }
            i = j;
        } else if c == '\'' {
            // A char literal ('a', '\n', '\u{..}') or a lifetime ('a).
            if next == Some('\\') {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
                while i < chars.len() && ident_char(chars[i]) {
                    i += 1;
                }
            }
        } else if c == '$' && next.is_some_and(ident_start) {
            let start = i;
            i += 1;
            while i < chars.len() && ident_char(chars[i]) {
                i += 1;
            }
            out.push(Token {
                tok: Tok::Ident(chars[start..i].iter().collect()),
                line,
            });
        } else if ident_start(c) {
            let start = i;
            while i < chars.len() && ident_char(chars[i]) {
                i += 1;
            }
            out.push(Token {
                tok: Tok::Ident(chars[start..i].iter().collect()),
                line,
            });
        } else if c.is_ascii_digit() {
            while i < chars.len() && (ident_char(chars[i]) || chars[i] == '.') {
                // `0..n` is a range, not a float.
                if chars[i] == '.' && chars.get(i + 1) == Some(&'.') {
                    break;
                }
                i += 1;
            }
        } else if c == ':' && next == Some(':') {
            out.push(Token { tok: Tok::Path, line });
            i += 2;
        } else {
            out.push(Token {
                tok: Tok::Punct(c),
                line,
            });
            i += 1;
        }
    }
    out
}

/// One parsed file: its module path and tokens.
struct Source {
    module: Vec<String>,
    display: String,
    tokens: Vec<Token>,
}

fn read_sources(dir: &Path, module: &[String], out: &mut Vec<Source>, root: &Path) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("lock-core/src")
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path.file_stem().expect("file name").to_string_lossy().to_string();
        if path.is_dir() {
            let mut sub = module.to_vec();
            sub.push(name);
            read_sources(&path, &sub, out, root);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let mut m = module.to_vec();
            if name != "mod" && !(module.is_empty() && name == "lib") {
                m.push(name);
            }
            let src = std::fs::read_to_string(&path).expect("source file");
            out.push(Source {
                module: m,
                display: path.strip_prefix(root).expect("under the crate").display().to_string(),
                tokens: tokenize(&src),
            });
        }
    }
}

/// A leaf of a `use` tree: the full path as written and the local name.
#[derive(Debug)]
struct UseLeaf {
    path: Vec<String>,
    name: Option<String>,
}

/// Parses a `use` tree starting at `tokens[*i]`, up to (not past) `;`.
fn parse_use_tree(tokens: &[Token], i: &mut usize, prefix: &[String], out: &mut Vec<UseLeaf>) {
    let mut path = prefix.to_vec();
    if tokens.get(*i).is_some_and(|t| t.tok == Tok::Path) {
        *i += 1;
    }
    loop {
        let Some(t) = tokens.get(*i) else { return };
        if t.is_punct('{') {
            *i += 1;
            loop {
                let Some(t) = tokens.get(*i) else { return };
                if t.is_punct('}') {
                    *i += 1;
                    return;
                }
                if t.is_punct(',') {
                    *i += 1;
                    continue;
                }
                parse_use_tree(tokens, i, &path, out);
            }
        } else if t.is_punct('*') {
            *i += 1;
            out.push(UseLeaf { path, name: None });
            return;
        } else if let Some(word) = t.ident() {
            *i += 1;
            if word == "self" && !path.is_empty() && prefix.len() == path.len() {
                // `{self, …}`: the module itself.
                let name = path.last().cloned();
                out.push(UseLeaf {
                    path: path.clone(),
                    name,
                });
                return;
            }
            path.push(word.to_string());
            if tokens.get(*i).is_some_and(|t| t.tok == Tok::Path) {
                *i += 1;
                continue;
            }
            let mut name = Some(word.to_string());
            if tokens.get(*i).is_some_and(|t| t.is_ident("as")) {
                name = tokens.get(*i + 1).and_then(|t| t.ident()).map(String::from);
                *i += 2;
            }
            out.push(UseLeaf { path, name });
            return;
        } else {
            return;
        }
    }
}

/// Where a name re-exported by a module leads.
#[derive(Debug, Clone)]
enum Target {
    Internal(Vec<String>),
    External,
}

struct Graph {
    /// File modules (nodes).
    nodes: BTreeSet<Vec<String>>,
    /// Inline modules (`raw`, `mod tests`…), mapped to their file's node.
    inline: BTreeMap<Vec<String>, Vec<String>>,
    /// `pub use` re-exports of each module (file or inline).
    exports: BTreeMap<Vec<String>, BTreeMap<String, Target>>,
}

impl Graph {
    fn is_module(&self, path: &[String]) -> bool {
        path.is_empty() || self.nodes.contains(path) || self.inline.contains_key(path)
    }

    /// The node defining the item at `path` (absolute), if inside the crate.
    fn resolve(&self, path: &[String], depth: usize) -> Option<Vec<String>> {
        if depth > 16 {
            return None;
        }
        let split = (0..=path.len()).rev().find(|n| self.is_module(&path[..*n]))?;
        let (module, rest) = path.split_at(split);
        if let Some(first) = rest.first()
            && let Some(target) = self.exports.get(module).and_then(|e| e.get(first))
        {
            return match target {
                Target::External => None,
                Target::Internal(t) => {
                    let mut full = t.clone();
                    full.extend_from_slice(&rest[1..]);
                    self.resolve(&full, depth + 1)
                }
            };
        }
        let node = self.inline.get(module).cloned().unwrap_or_else(|| module.to_vec());
        (!node.is_empty()).then_some(node)
    }
}

/// Absolute form of a path written in module `at` (`crate::`, `super::`,
/// `self::`, or relative in the crate root), or `None` for an external one.
fn absolute(path: &[String], at: &[String], in_root_file: bool) -> Option<Vec<String>> {
    let first = path.first()?;
    match first.as_str() {
        "crate" | "$crate" => Some(path[1..].to_vec()),
        "self" => Some(at.iter().chain(&path[1..]).cloned().collect()),
        "super" => {
            let mut base = at.to_vec();
            let mut rest = path;
            while rest.first().is_some_and(|s| s == "super") {
                base.pop()?;
                rest = &rest[1..];
            }
            base.extend_from_slice(rest);
            Some(base)
        }
        _ if in_root_file => Some(at.iter().chain(path).cloned().collect()),
        _ => None,
    }
}

/// The module path of each token: the file's, plus the inline modules open around it.
fn token_modules(src: &Source, inline: &mut BTreeMap<Vec<String>, Vec<String>>) -> Vec<Vec<String>> {
    let mut stack: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut at = Vec::with_capacity(src.tokens.len());
    let current = |stack: &[(String, usize)]| -> Vec<String> {
        src.module
            .iter()
            .cloned()
            .chain(stack.iter().map(|(n, _)| n.clone()))
            .collect()
    };
    for (i, t) in src.tokens.iter().enumerate() {
        if t.is_ident("mod")
            && let (Some(name), Some(open)) = (src.tokens.get(i + 1).and_then(Token::ident), src.tokens.get(i + 2))
            && open.is_punct('{')
        {
            stack.push((name.to_string(), depth + 1));
            inline.insert(current(&stack), src.module.clone());
        }
        at.push(current(&stack));
        if t.is_punct('{') {
            depth += 1;
        } else if t.is_punct('}') {
            if stack.last().is_some_and(|(_, d)| *d == depth) {
                stack.pop();
            }
            depth -= 1;
        }
    }
    at
}

/// An edge with where it is written.
type Edges = BTreeMap<(Vec<String>, Vec<String>), BTreeSet<String>>;

fn build() -> (Graph, Edges) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut sources = Vec::new();
    read_sources(&root.join("src"), &[], &mut sources, root);
    let mut graph = Graph {
        nodes: sources.iter().map(|s| s.module.clone()).collect(),
        inline: BTreeMap::new(),
        exports: BTreeMap::new(),
    };
    let modules: Vec<Vec<Vec<String>>> = sources.iter().map(|s| token_modules(s, &mut graph.inline)).collect();

    // Pass 1: `use` statements (re-exports recorded, every leaf kept for pass 2).
    let mut uses = Vec::new();
    for (s, src) in sources.iter().enumerate() {
        let tokens = &src.tokens;
        let in_root_file = src.module.is_empty();
        for i in 0..tokens.len() {
            if !tokens[i].is_ident("use") {
                continue;
            }
            // `pub use`, `pub(crate) use`, `pub(super) use`.
            let public = (i >= 1 && tokens[i - 1].is_ident("pub"))
                || (i >= 4 && tokens[i - 1].is_punct(')') && tokens[i - 4].is_ident("pub"));
            let mut j = i + 1;
            let mut leaves = Vec::new();
            parse_use_tree(tokens, &mut j, &[], &mut leaves);
            let at = &modules[s][i];
            for leaf in leaves {
                let abs = absolute(&leaf.path, at, in_root_file);
                if public && let Some(name) = &leaf.name {
                    let target = abs.clone().map_or(Target::External, Target::Internal);
                    graph
                        .exports
                        .entry(at.clone())
                        .or_default()
                        .insert(name.clone(), target);
                }
                uses.push((s, tokens[i].line, public, leaf, abs));
            }
        }
    }

    let mut edges = Edges::new();
    let mut add = |from: &[String], to: Option<Vec<String>>, file: &str, line: usize| {
        if let Some(to) = to
            && !from.is_empty()
            && from != to.as_slice()
        {
            edges
                .entry((from.to_vec(), to))
                .or_default()
                .insert(format!("{file}:{line}"));
        }
    };

    // Pass 2a: `use` leaves; a `pub use` only when its file uses the name again.
    for (s, line, public, leaf, abs) in &uses {
        let src = &sources[*s];
        let Some(abs) = abs else { continue };
        if *public {
            let Some(name) = &leaf.name else {
                add(&src.module, graph.resolve(abs, 0), &src.display, *line);
                continue;
            };
            let mentions = src.tokens.iter().filter(|t| t.is_ident(name)).count();
            if mentions <= 1 {
                continue;
            }
        }
        add(&src.module, graph.resolve(abs, 0), &src.display, *line);
    }

    // Pass 2b: paths in code (`crate::observe::micros(…)`, `$crate::backend::…`).
    for (s, src) in sources.iter().enumerate() {
        let tokens = &src.tokens;
        let mut in_use = false;
        for i in 0..tokens.len() {
            let t = &tokens[i];
            if t.is_ident("use") {
                in_use = true;
            } else if t.is_punct(';') {
                in_use = false;
            }
            if in_use {
                continue;
            }
            let starts = ["crate", "$crate", "super", "self"].iter().any(|w| t.is_ident(w));
            let after_path = i >= 1 && tokens[i - 1].tok == Tok::Path;
            if !starts || after_path || tokens.get(i + 1).is_none_or(|n| n.tok != Tok::Path) {
                continue;
            }
            let mut path = vec![t.ident().unwrap_or_default().to_string()];
            let mut j = i + 1;
            while tokens.get(j).is_some_and(|n| n.tok == Tok::Path)
                && let Some(word) = tokens.get(j + 1).and_then(Token::ident)
            {
                path.push(word.to_string());
                j += 2;
            }
            let abs = absolute(&path, &modules[s][i], src.module.is_empty());
            add(
                &src.module,
                abs.and_then(|a| graph.resolve(&a, 0)),
                &src.display,
                t.line,
            );
        }
    }
    (graph, edges)
}

fn name(module: &[String]) -> String {
    module.join("::")
}

/// Strongly connected components of more than one node (Tarjan).
fn circles(nodes: &BTreeSet<Vec<String>>, edges: &Edges) -> Vec<Vec<Vec<String>>> {
    let index: BTreeMap<&Vec<String>, usize> = nodes.iter().enumerate().map(|(i, n)| (n, i)).collect();
    let names: Vec<&Vec<String>> = nodes.iter().collect();
    let mut adj = vec![Vec::new(); nodes.len()];
    for (from, to) in edges.keys() {
        if let (Some(f), Some(t)) = (index.get(from), index.get(to)) {
            adj[*f].push(*t);
        }
    }
    struct Tarjan<'a> {
        adj: &'a [Vec<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    impl Tarjan<'_> {
        fn visit(&mut self, v: usize) {
            self.index[v] = Some(self.next);
            self.low[v] = self.next;
            self.next += 1;
            self.stack.push(v);
            self.on_stack[v] = true;
            for w in self.adj[v].clone() {
                match self.index[w] {
                    None => {
                        self.visit(w);
                        self.low[v] = self.low[v].min(self.low[w]);
                    }
                    Some(iw) if self.on_stack[w] => self.low[v] = self.low[v].min(iw),
                    Some(_) => {}
                }
            }
            if Some(self.low[v]) == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack[w] = false;
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort_unstable();
                    self.out.push(component);
                }
            }
        }
    }
    let mut t = Tarjan {
        adj: &adj,
        index: vec![None; nodes.len()],
        low: vec![0; nodes.len()],
        on_stack: vec![false; nodes.len()],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..nodes.len() {
        if t.index[v].is_none() {
            t.visit(v);
        }
    }
    t.out
        .into_iter()
        .map(|c| c.into_iter().map(|i| names[i].clone()).collect())
        .collect()
}

fn module(path: &str) -> Vec<String> {
    path.split("::").map(String::from).collect()
}

#[test]
fn the_parser_sees_the_graph() {
    let (graph, edges) = build();
    // A parser that found nothing would pass the circle test vacuously.
    assert!(graph.nodes.contains(&module("engine::cleanup")), "{:?}", graph.nodes);
    assert!(graph.nodes.contains(&module("kinds::semaphore")));
    let has = |from: &str, to: &str| edges.contains_key(&(module(from), module(to)));
    // `use crate::engine::…` in manager.rs.
    assert!(has("manager", "engine"));
    // A root re-export (`crate::Error`) followed to its module.
    assert!(has("backend", "error"));
    // `super::guard::…` in a kind.
    assert!(has("kinds::rw", "kinds::guard"));
    // `crate::validate::validate_key` in a kind.
    assert!(has("kinds::rw", "validate"));
    assert!(graph.resolve(&module("raw::RenewBatch"), 0) == Some(module("batch")));
}

#[test]
fn lock_core_has_no_import_circle() {
    let (graph, edges) = build();
    // `cargo test --test it module_graph -- --nocapture` prints the graph.
    for (from, to) in edges.keys() {
        println!("{} -> {}", name(from), name(to));
    }
    let found = circles(&graph.nodes, &edges);
    let mut report = String::new();
    for component in &found {
        let members: BTreeSet<&Vec<String>> = component.iter().collect();
        report.push_str(&format!(
            "circle: {}\n",
            component.iter().map(|m| name(m)).collect::<Vec<_>>().join(", ")
        ));
        for ((from, to), at) in &edges {
            if members.contains(from) && members.contains(to) {
                let at: Vec<&str> = at.iter().map(String::as_str).collect();
                report.push_str(&format!("  {} -> {}  ({})\n", name(from), name(to), at.join(", ")));
            }
        }
    }
    assert!(found.is_empty(), "lock-core has import circles:\n{report}");
}
