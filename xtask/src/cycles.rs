//! No module of any crate imports a module that imports it back.
//!
//! A crate's modules are its top-level modules: `src/foo.rs`, `src/foo/mod.rs` and every
//! file under `src/foo/` are the module `foo`; `src/lib.rs` or `src/main.rs` is the crate
//! root. Module `a` imports module `b` when a file of `a` names `crate::b…` (or, at the top
//! level of a top-level file, `super::b…`), or, for the root, names `b::…`. A name the root
//! re-exports from a module (`pub use b::Thing;`) is that module's, and one it re-exports
//! from another crate (`pub use other_crate::Thing;`) is no module's; any other name in the
//! root (an item defined there) makes the importer import the root. The check reads paths,
//! not types: what it reports is a loop of `use`s and paths a reader would follow, which is
//! what a layering is about. Test code is left out (files named `tests.rs`, inline `mod
//! tests { … }`): a test may reach across a crate to set up what it checks.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// The root's name in the graph.
const ROOT: &str = "crate";

/// Every crate of the workspace (`crates/*`, `bins/*`, `xtask`): its name and `src/`.
pub(crate) fn workspace_crates(root: &Path) -> Result<Vec<(String, PathBuf)>> {
    let mut crates = Vec::new();
    for group in ["crates", "bins"] {
        let dir = root.join(group);
        let entries = std::fs::read_dir(&dir).with_context(|| format!("read {}", dir.display()))?;
        for entry in entries {
            let src = entry?.path().join("src");
            if src.is_dir() {
                crates.push((crate_name(&src), src));
            }
        }
    }
    crates.push(("xtask".into(), root.join("xtask/src")));
    crates.sort();
    Ok(crates)
}

fn crate_name(src: &Path) -> String {
    src.parent()
        .and_then(Path::file_name)
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// One import cycle: its modules in order, and each import between them with the names it
/// takes (`a -> b: X, Y`).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Cycle {
    pub(crate) modules: Vec<String>,
    pub(crate) imports: Vec<String>,
}

/// The import cycles among the top-level modules of the crate whose sources are in `src`.
pub(crate) fn cycles(src: &Path) -> Result<Vec<Cycle>> {
    let mut files = Vec::new();
    sources(src, &mut files)?;
    let mut modules = BTreeSet::new();
    for file in &files {
        modules.insert(module_of(src, file));
    }
    let root_text = files
        .iter()
        .find(|f| module_of(src, f) == ROOT)
        .map(std::fs::read_to_string)
        .transpose()?
        .unwrap_or_default();
    let reexported = reexports(&strip_comments(&root_text), &modules);
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut used: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let from = module_of(src, file);
        let text =
            std::fs::read_to_string(file).with_context(|| format!("read {}", file.display()))?;
        let top_level_file = file.parent() == Some(src);
        for (name, item) in imports(&text, from == ROOT, top_level_file) {
            let to = if modules.contains(&name) && name != ROOT {
                name
            } else if let Some(module) = reexported.get(&name) {
                match module {
                    Reexport::Module(module) => module.clone(),
                    Reexport::Extern => continue,
                }
            } else if from == ROOT {
                // A bare path in the root that is not a module: an extern crate.
                continue;
            } else {
                ROOT.to_owned()
            };
            if to != from {
                used.entry((from.clone(), to.clone()))
                    .or_default()
                    .insert(item);
                edges.entry(from.clone()).or_default().insert(to);
            }
        }
    }
    Ok(strongly_connected(&modules, &edges)
        .into_iter()
        .map(|modules| {
            let imports = used
                .iter()
                .filter(|((from, to), _)| modules.contains(from) && modules.contains(to))
                .map(|((from, to), names)| {
                    let names: Vec<&str> = names.iter().map(String::as_str).collect();
                    format!("{from} -> {to}: {}", names.join(", "))
                })
                .collect();
            Cycle { modules, imports }
        })
        .collect())
}

/// The Rust sources under `dir`, test files (`tests.rs`) left out, sorted.
pub(crate) fn sources(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("read {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            sources(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs")
            && path.file_name().is_some_and(|n| n != "tests.rs")
        {
            out.push(path);
        }
    }
    out.sort();
    Ok(())
}

/// The top-level module a file belongs to.
fn module_of(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).unwrap_or(file);
    let first = relative
        .components()
        .next()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .unwrap_or_default();
    match first.strip_suffix(".rs") {
        Some("lib" | "main") if relative.components().count() == 1 => ROOT.to_owned(),
        Some(name) => name.to_owned(),
        None => first,
    }
}

/// The crate paths a file names (`crate::x`, `crate::{x, y::z}`, at the top level of a
/// top-level file `super::x`; in the root also `x::`), comments left out: each path's first
/// segment, and the path as written.
fn imports(text: &str, is_root: bool, top_level_file: bool) -> Vec<(String, String)> {
    let code = strip_comments(text);
    let bytes = code.as_bytes();
    let mut names = Vec::new();
    // For each open brace: whether it opens an inline `mod name {`.
    let mut braces: Vec<bool> = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c == b'{' {
            let before = code[..i].trim_end();
            let inline_mod = before
                .rsplit(|ch: char| !(ch.is_alphanumeric() || ch == '_' || ch == ' '))
                .next()
                .is_some_and(|tail| {
                    let words: Vec<&str> = tail.split_whitespace().collect();
                    words.len() >= 2 && words[words.len() - 2] == "mod"
                });
            braces.push(inline_mod);
            i += 1;
            continue;
        }
        if c == b'}' {
            braces.pop();
            i += 1;
            continue;
        }
        let starts_word = i == 0 || !is_ident(bytes[i - 1]) && bytes[i - 1] != b':';
        if starts_word && is_ident(c) {
            let end = (i..bytes.len())
                .find(|&j| !is_ident(bytes[j]))
                .unwrap_or(bytes.len());
            let word = &code[i..end];
            if code[end..].starts_with("::") {
                let rest = &code[end + 2..];
                let crate_path = word == "crate"
                    || (word == "super" && top_level_file && !braces.iter().any(|m| *m));
                if crate_path {
                    names.extend(first_segments(rest));
                } else if is_root && !matches!(word, "self" | "super" | "std" | "core" | "alloc") {
                    let item = leading_path(rest);
                    names.push((word.to_owned(), format!("{word}::{item}")));
                }
            }
            i = end;
            continue;
        }
        i += 1;
    }
    names
}

/// The code of a text: line comments, string and character literals blanked out, and
/// inline `mod tests { … }` blocks left out.
fn strip_comments(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '"'
            || (c == 'r' && matches!(next, Some('"' | '#')) && !prev_is_ident(&chars, i))
        {
            i = skip_string(&chars, i);
            out.push_str("\"\"");
        } else if c == '\'' && next == Some('\\') {
            // '\n', '\'', '\u{..}': up to the closing quote.
            i += 2;
            while i < chars.len() && chars[i] != '\'' {
                i += 1;
            }
            i += 1;
        } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            i += 3;
        } else {
            out.push(c);
            i += 1;
        }
    }
    skip_test_modules(&out)
}

fn prev_is_ident(chars: &[char], i: usize) -> bool {
    i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_')
}

/// The index after the string literal (plain or raw) that starts at `start`.
fn skip_string(chars: &[char], start: usize) -> usize {
    let mut i = start;
    if chars[i] == 'r' {
        i += 1;
        let mut hashes = 0;
        while chars.get(i) == Some(&'#') {
            hashes += 1;
            i += 1;
        }
        i += 1; // the opening quote
        while i < chars.len() {
            if chars[i] == '"' && (1..=hashes).all(|k| chars.get(i + k) == Some(&'#')) {
                return i + 1 + hashes;
            }
            i += 1;
        }
        return i;
    }
    i += 1;
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '"' => return i + 1,
            _ => i += 1,
        }
    }
    i
}

/// The code without its inline `mod tests { … }` blocks.
fn skip_test_modules(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find("mod tests") {
        let (before, after) = rest.split_at(at);
        out.push_str(before);
        let tail = after["mod tests".len()..].trim_start();
        if !tail.starts_with('{') {
            out.push_str("mod tests");
            rest = &after["mod tests".len()..];
            continue;
        }
        let open = after.len() - tail.len();
        let mut depth = 0usize;
        let mut end = after.len();
        for (k, ch) in after[open..].char_indices() {
            match ch {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + k + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// Where a name the root brings in with `use` comes from.
#[derive(Clone)]
enum Reexport {
    /// One of the crate's modules.
    Module(String),
    /// Another crate.
    Extern,
}

/// The names the root's `use` declarations bring in: name → where from
/// (`pub use b::{Thing, other::Other as O};` → `Thing` and `O` are `b`'s;
/// `pub use other_crate::Clock;` → `Clock` is another crate's).
fn reexports(root: &str, modules: &BTreeSet<String>) -> BTreeMap<String, Reexport> {
    let mut names = BTreeMap::new();
    let mut rest = root;
    while let Some(at) = rest.find("use ") {
        let starts_word = at == 0 || !is_ident(rest.as_bytes()[at - 1]);
        rest = &rest[at + 4..];
        if !starts_word {
            continue;
        }
        let Some(end) = rest.find(';') else { break };
        let tree = rest[..end].trim();
        rest = &rest[end..];
        let local = tree
            .strip_prefix("crate::")
            .or_else(|| tree.strip_prefix("self::"));
        let tree = local.unwrap_or(tree);
        let Some(first) = leading_ident(tree) else {
            continue;
        };
        let from = if modules.contains(&first) {
            Reexport::Module(first)
        } else if local.is_none() && first != "super" {
            Reexport::Extern
        } else {
            continue;
        };
        for name in leaf_names(tree) {
            names.insert(name, from.clone());
        }
    }
    names
}

/// The names a use tree makes visible: the last segment of each path, or its alias.
fn leaf_names(tree: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut current = String::new();
    let push = |item: &str, out: &mut Vec<String>| {
        let item = item.trim();
        let visible = match item.split_once(" as ") {
            Some((_, alias)) => alias.trim(),
            None => item.rsplit("::").next().unwrap_or(item).trim(),
        };
        if !visible.is_empty() && visible != "*" && visible != "self" {
            out.push(visible.to_owned());
        }
    };
    for ch in tree.chars() {
        match ch {
            '{' => {
                depth += 1;
                current.clear();
            }
            '}' => {
                push(&current, &mut out);
                current.clear();
                depth = depth.saturating_sub(1);
            }
            ',' if depth > 0 => {
                push(&current, &mut out);
                current.clear();
            }
            _ => current.push(ch),
        }
    }
    if depth == 0 && !tree.contains('{') {
        push(tree, &mut out);
    }
    out
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// A path as far as it goes (`a::b::C`).
fn leading_path(text: &str) -> String {
    let end = text
        .bytes()
        .position(|c| !(is_ident(c) || c == b':'))
        .unwrap_or(text.len());
    text[..end].trim_end_matches(':').to_owned()
}

/// `x::…` → `[x]`; `{x, y::z, self}` → `[x, y]`; each with its path.
fn first_segments(rest: &str) -> Vec<(String, String)> {
    let rest = rest.trim_start();
    if let Some(group) = rest.strip_prefix('{') {
        let mut depth = 0usize;
        let mut items = Vec::new();
        let mut current = String::new();
        for ch in group.chars() {
            match ch {
                '{' => {
                    depth += 1;
                    current.push(ch);
                }
                '}' if depth == 0 => break,
                '}' => {
                    depth -= 1;
                    current.push(ch);
                }
                ',' if depth == 0 => items.push(std::mem::take(&mut current)),
                _ => current.push(ch),
            }
        }
        items.push(current);
        return items
            .iter()
            .filter_map(|item| Some((leading_ident(item)?, leading_path(item.trim()))))
            .filter(|(name, _)| name != "self")
            .collect();
    }
    leading_ident(rest)
        .map(|name| (name, leading_path(rest)))
        .into_iter()
        .collect()
}

fn leading_ident(text: &str) -> Option<String> {
    let text = text.trim_start();
    let end = text
        .bytes()
        .position(|c| !is_ident(c))
        .unwrap_or(text.len());
    (end > 0).then(|| text[..end].to_owned())
}

/// Tarjan's strongly connected components of more than one module, each in order.
fn strongly_connected(
    nodes: &BTreeSet<String>,
    edges: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<Vec<String>> {
    struct State<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        next: usize,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(state: &mut State<'a>, node: &'a str) {
        state.index.insert(node, state.next);
        state.low.insert(node, state.next);
        state.next += 1;
        state.stack.push(node);
        state.on_stack.insert(node);
        if let Some(targets) = state.edges.get(node) {
            for target in targets {
                let target = target.as_str();
                if !state.index.contains_key(target) {
                    visit(state, target);
                    let low = state.low[node].min(state.low[target]);
                    state.low.insert(node, low);
                } else if state.on_stack.contains(target) {
                    let low = state.low[node].min(state.index[target]);
                    state.low.insert(node, low);
                }
            }
        }
        if state.low[node] == state.index[node] {
            let mut component = Vec::new();
            while let Some(top) = state.stack.pop() {
                state.on_stack.remove(top);
                component.push(top.to_owned());
                if top == node {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                state.found.push(component);
            }
        }
    }
    let mut state = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        found: Vec::new(),
    };
    for node in nodes {
        if !state.index.contains_key(node.as_str()) {
            visit(&mut state, node);
        }
    }
    state.found.sort();
    state.found
}

#[cfg(test)]
mod tests {
    use super::*;

    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    fn crate_with(files: &[(&str, &str)]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "xtask-cycles-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        for (path, text) in files {
            let path = dir.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        dir
    }

    #[test]
    fn finds_a_loop_of_uses_and_not_a_chain() {
        let src = crate_with(&[
            (
                "lib.rs",
                "mod a;\nmod b;\nmod c;\npub use c::{C, deep::Thing as T};\npub use other::Clock;\nfn f(_: a::A) {}\n",
            ),
            ("a.rs", "use crate::{b::B, c, C, T, Clock};\n"),
            (
                "b.rs",
                "use crate::c::C;\n// crate::a in a comment is no import\n",
            ),
            (
                "c.rs",
                "pub struct C;\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n",
            ),
        ]);
        assert_eq!(cycles(&src).unwrap(), Vec::new());
        std::fs::write(src.join("c.rs"), "fn f() { crate::a::x(); }\n").unwrap();
        let found = cycles(&src).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].modules, ["a", "b", "c"]);
        assert_eq!(
            found[0].imports,
            [
                "a -> b: b::B",
                "a -> c: C, T, c",
                "b -> c: c::C",
                "c -> a: a::x"
            ]
        );
        std::fs::remove_dir_all(&src).unwrap();
    }

    #[test]
    fn a_child_naming_an_item_of_the_root_that_names_the_child_is_a_loop() {
        let src = crate_with(&[
            (
                "lib.rs",
                "pub mod jwt;\npub struct P;\npub enum Auth { J(jwt::J) }\n",
            ),
            ("jwt.rs", "use super::P;\npub struct J;\n"),
            ("plain/mod.rs", "mod inner;\n"),
            (
                "plain/inner.rs",
                "use super::super::P;\nuse crate::plain::X;\n",
            ),
        ]);
        let found = cycles(&src).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].modules, ["crate", "jwt"]);
        assert_eq!(
            found[0].imports,
            ["crate -> jwt: jwt::J", "jwt -> crate: P"]
        );
        std::fs::remove_dir_all(&src).unwrap();
    }
}
