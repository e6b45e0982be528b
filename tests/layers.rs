//! The structure drawn from the imports: the code layout follows the data flow, so every
//! file of `src/` may use files of its own layer and the layers below it, never above, and no
//! files of different folders import each other in a circle.
//!
//! The imports are read from the source text: `use` trees, and paths that start with
//! `crate::`, `super::`, `self::` or a child module's name, in code outside `#[cfg(test)]`
//! modules and comments. A path names the deepest file it reaches (`crate::nnet::Nnet` names
//! `nnet/mod.rs`, `crate::nnet::network::Nnet` names `nnet/network.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, lowest first: a file may import files of its own layer and of lower ones.
/// A layer is named by the first folder below `src/` (or the file's stem for files directly
/// in `src/`).
const LAYERS: &[&[&str]] = &[
    &["error", "index", "limits", "random", "kaldi_rand"],
    &["matrix"],
    &["io", "collective"],
    &["log", "gradient", "hmm"],
    &["nnet"],
    &["frontend", "compile", "egs"],
    &["run"],
    &["train"],
    &["cli"],
];

/// Files outside the layering: the crate root, the binaries and the test support.
fn outside(rel: &str) -> bool {
    rel == "lib.rs" || rel == "main.rs" || rel.starts_with("bin/") || rel.starts_with("testing/")
}

fn rank(room: &str) -> usize {
    LAYERS
        .iter()
        .position(|l| l.contains(&room))
        .unwrap_or_else(|| panic!("src/{room} is in no layer of tests/layers.rs: add it"))
}

fn room(rel: &str) -> &str {
    let first = rel.split('/').next().unwrap();
    first.strip_suffix(".rs").unwrap_or(first)
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The code of a file without comments, string literals and its `#[cfg(test)]` modules.
fn code_of(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]") {
            // Skip the item that follows: up to its matching closing brace (or `;`).
            let mut depth = 0i32;
            let mut opened = false;
            for l in lines.by_ref() {
                let l = strip_comment(l);
                depth += l.matches('{').count() as i32 - l.matches('}').count() as i32;
                opened |= l.contains('{');
                if (opened && depth <= 0) || (!opened && l.trim_end().ends_with(';')) {
                    break;
                }
            }
            continue;
        }
        out.push_str(&strip_comment(line));
        out.push('\n');
    }
    out
}

/// A line without its `//` comment and with string literals blanked.
fn strip_comment(line: &str) -> String {
    let mut out = String::new();
    let mut in_str = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if in_str {
            if c == '\\' {
                chars.next();
            } else if c == '"' {
                in_str = false;
                out.push('"');
            }
            continue;
        }
        match c {
            '"' => {
                in_str = true;
                out.push('"');
            }
            '/' if chars.peek() == Some(&'/') => break,
            '\'' => {
                // A char literal ('x', '\n') or a lifetime ('a): skip a literal whole.
                let rest: String = chars.clone().take(3).collect();
                if let Some(escaped) = rest.strip_prefix('\\') {
                    if let Some(end) = escaped.find('\'') {
                        for _ in 0..end + 2 {
                            chars.next();
                        }
                    }
                } else if rest.chars().nth(1) == Some('\'') {
                    chars.next();
                    chars.next();
                }
                out.push(' ');
            }
            _ => out.push(c),
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Expands a `use` tree (`a::{b, c::{d, e}}`) into its paths.
fn expand_use(tree: &str, prefix: &str, out: &mut Vec<String>) {
    let tree = tree.trim();
    if let Some(open) = tree.find('{') {
        let head = tree[..open].trim().trim_end_matches("::");
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        let base = join(prefix, head);
        let mut depth = 0;
        let mut start = 0;
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand_use(&inner[start..i], &base, out);
                    start = i + 1;
                }
                _ => {}
            }
        }
        expand_use(&inner[start..], &base, out);
    } else if !tree.is_empty() {
        let item = tree.split(" as ").next().unwrap().trim();
        out.push(join(prefix, item));
    }
}

fn join(a: &str, b: &str) -> String {
    match (a.is_empty(), b.is_empty()) {
        (true, _) => b.to_string(),
        (_, true) => a.to_string(),
        _ => format!("{a}::{b}"),
    }
}

/// Every path the code names: those of `use` items and the qualified paths in expressions.
fn paths_in(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("use ") {
        let before_ok = i == 0 || !is_ident(rest[..i].chars().last().unwrap());
        let after = &rest[i + 4..];
        let end = after.find(';').unwrap_or(after.len());
        if before_ok {
            expand_use(&after[..end], "", &mut out);
        }
        rest = &after[end.min(after.len())..];
    }
    // Qualified paths anywhere: maximal runs of `ident(::ident)+`.
    let bytes: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        if is_ident(bytes[i]) && (i == 0 || !(is_ident(bytes[i - 1]) || bytes[i - 1] == ':')) {
            let mut j = i;
            let mut path = String::new();
            loop {
                let s = j;
                while j < bytes.len() && is_ident(bytes[j]) {
                    j += 1;
                }
                path.extend(&bytes[s..j]);
                if j + 2 < bytes.len()
                    && bytes[j] == ':'
                    && bytes[j + 1] == ':'
                    && is_ident(bytes[j + 2])
                {
                    path.push_str("::");
                    j += 2;
                } else {
                    break;
                }
            }
            if path.contains("::") {
                out.push(path);
            }
            i = j.max(i + 1);
        } else {
            i += 1;
        }
    }
    out
}

struct Tree {
    /// Module path (`["nnet", "network"]`) → file relative to `src/`.
    files: BTreeMap<Vec<String>, String>,
}

impl Tree {
    /// The deepest file a module path reaches.
    fn resolve(&self, segs: &[String]) -> Option<&String> {
        (1..=segs.len())
            .rev()
            .find_map(|n| self.files.get(&segs[..n]))
    }
}

fn module_path(rel: &str) -> Vec<String> {
    let mut segs: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(String::from)
        .collect();
    if segs.last().is_some_and(|s| s == "mod") {
        segs.pop();
    }
    segs
}

/// The files each file imports.
fn import_graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    let rels: Vec<String> = paths
        .iter()
        .map(|p| {
            p.strip_prefix(&src)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/")
        })
        .filter(|r| !outside(r))
        .collect();
    let tree = Tree {
        files: rels.iter().map(|r| (module_path(r), r.clone())).collect(),
    };
    let mut graph = BTreeMap::new();
    for rel in &rels {
        let code = code_of(&std::fs::read_to_string(src.join(rel)).unwrap());
        let me = module_path(rel);
        let children: BTreeSet<String> = code
            .lines()
            .filter_map(|l| {
                let t = l
                    .trim()
                    .trim_start_matches("pub ")
                    .trim_start_matches("pub(crate) ");
                t.strip_prefix("mod ")?.strip_suffix(';').map(String::from)
            })
            .collect();
        let mut targets = BTreeSet::new();
        for path in paths_in(&code) {
            let mut segs: Vec<String> = path.split("::").map(String::from).collect();
            let mut base: Vec<String> = match segs[0].as_str() {
                "crate" => Vec::new(),
                "self" => me.clone(),
                "super" => me[..me.len().saturating_sub(1)].to_vec(),
                c if children.contains(c) => {
                    let mut b = me.clone();
                    b.push(c.to_string());
                    segs.remove(0);
                    b.append(&mut segs);
                    if let Some(t) = tree.resolve(&b) {
                        targets.insert(t.clone());
                    }
                    continue;
                }
                _ => continue,
            };
            segs.remove(0);
            while segs.first().is_some_and(|s| s == "super") {
                base.pop();
                segs.remove(0);
            }
            base.extend(segs);
            if let Some(t) = tree.resolve(&base) {
                targets.insert(t.clone());
            }
        }
        targets.remove(rel);
        graph.insert(rel.clone(), targets);
    }
    graph
}

fn folder(rel: &str) -> &str {
    rel.rsplit_once('/').map_or("", |(d, _)| d)
}

/// Strongly connected components (Tarjan), each as a sorted list of files.
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph[v].iter() {
            if !s.index.contains_key(w.as_str()) {
                visit(s, w);
                let lw = s.low[w.as_str()];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w.as_str()) {
                let iw = s.index[w.as_str()];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = s.stack.pop().unwrap();
                s.on_stack.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            comp.sort();
            s.out.push(comp);
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

#[test]
fn no_file_imports_a_higher_layer() {
    let graph = import_graph();
    let mut wrong = Vec::new();
    for (from, targets) in &graph {
        for to in targets {
            if rank(room(to)) > rank(room(from)) {
                wrong.push(format!("src/{from} → src/{to}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports from a lower layer to a higher one:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn no_import_circle_spans_two_folders() {
    let graph = import_graph();
    let bad: Vec<String> = circles(&graph)
        .into_iter()
        .filter(|c| c.iter().map(|f| folder(f)).collect::<BTreeSet<_>>().len() > 1)
        .map(|c| c.join(" ⇄ "))
        .collect();
    assert!(
        bad.is_empty(),
        "import circles across folders:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_import_reader_sees_the_paths_it_must() {
    // A check of the checker: the forms of import it has to recognise.
    let code = code_of(
        "use crate::a::{b, c::{d, e as f}};\nfn x() { super::g::h(); child::k(); }\n\
         // use crate::commented::out;\n#[cfg(test)]\nmod tests {\n use crate::tested::x;\n}\n",
    );
    let paths = paths_in(&code);
    for want in [
        "crate::a::b",
        "crate::a::c::d",
        "crate::a::c::e",
        "super::g::h",
        "child::k",
    ] {
        assert!(paths.iter().any(|p| p == want), "{want} not in {paths:?}");
    }
    assert!(!paths
        .iter()
        .any(|p| p.contains("commented") || p.contains("tested")));
    let graph = import_graph();
    assert!(
        graph["cli/mod.rs"].contains("cli/fit.rs"),
        "child paths are read"
    );
    assert!(
        graph["run/computer.rs"]
            .iter()
            .any(|t| t.starts_with("compile/")),
        "crate paths are read"
    );
}
