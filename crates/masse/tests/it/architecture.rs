//! The engine crate's shape, checked on its sources (issue 15): no function
//! longer than 80 lines, and no circle in the module graph.
//!
//! The module graph: one node per source file of `crates/masse/src` (a
//! directory's `mod.rs` is the directory's module; `lib.rs`, the crate map, is
//! not a node). An edge A → B when A's code names B: a `use` of it, or a path
//! through it (`crate::a::b::X`, `super::X`). A name reached through a
//! re-export (`pub use` in `lib.rs` or in a directory's `mod.rs`) counts as an
//! edge to the file that defines it, since that is the code depended on. A
//! file's own directory module (`mod.rs` above it) is its namespace, not a
//! dependency: a child may use what its `mod.rs` defines (`device/file.rs`
//! implements `device::Device`), while the `mod.rs` depends on the children it
//! uses. Every other edge counts: siblings, and modules across directories,
//! must form a graph without circles. Test
//! modules (`#[cfg(test)]` onwards) and comments are left out: tests may reach
//! anywhere. Run with `--nocapture` to see the graph.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Longest a function in the engine crate may be.
const MAX_FN_LINES: usize = 80;

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read src dir")
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The file's lines before its test module, if any.
fn non_test_lines(text: &str) -> Vec<&str> {
    text.lines()
        .take_while(|l| l.trim() != "#[cfg(test)]")
        .collect()
}

/// A line without string and char literals and `//` comments (enough for
/// brace counting and path scanning; the crate has no raw strings with braces
/// in non-test code).
fn code_of(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let b: Vec<char> = line.chars().collect();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            '/' if b.get(i + 1) == Some(&'/') => break,
            '"' => {
                i += 1;
                while i < b.len() && b[i] != '"' {
                    i += if b[i] == '\\' { 2 } else { 1 };
                }
                out.push_str("\"\"");
            }
            '\'' if b.get(i + 2) == Some(&'\'') || (b.get(i + 1) == Some(&'\\')) => {
                // A char literal ('x' or '\n'); lifetimes ('a) are kept.
                let end = (i + 1..b.len()).find(|&j| b[j] == '\'' && j > i + 1);
                i = end.unwrap_or(i);
                out.push_str("' '");
            }
            c => out.push(c),
        }
        i += 1;
    }
    out
}

/// `(name, first line, lines)` of every function, the way
/// `shared/tools/fn_lengths.py` counts them (nested functions belong to theirs).
fn functions(text: &str) -> Vec<(String, usize, usize)> {
    let lines = non_test_lines(text);
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(name) = fn_name(lines[i]) else {
            i += 1;
            continue;
        };
        let (mut depth, mut started, mut j) = (0i64, false, i);
        while j < lines.len() {
            let c = code_of(lines[j]);
            let open = c.matches('{').count() as i64;
            depth += open - c.matches('}').count() as i64;
            started |= open > 0;
            if (started && depth <= 0) || (!started && c.trim_end().ends_with(';')) {
                break;
            }
            j += 1;
        }
        if started {
            out.push((name, i + 1, j - i + 1));
            i = j + 1;
        } else {
            i += 1;
        }
    }
    out
}

fn fn_name(line: &str) -> Option<String> {
    let mut words = line.split_whitespace().peekable();
    while let Some(w) = words.next() {
        let qualifier = w == "pub"
            || w.starts_with("pub(")
            || ["const", "async", "unsafe", "extern", "\"C\""].contains(&w);
        if w == "fn" {
            let n: String = words
                .next()?
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            return (!n.is_empty()).then_some(n);
        }
        if !qualifier {
            return None;
        }
    }
    None
}

#[test]
fn no_engine_function_is_longer_than_80_lines() {
    let mut files = Vec::new();
    rust_files(&src_dir(), &mut files);
    let mut long = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).expect("read source");
        for (name, line, n) in functions(&text) {
            if n > MAX_FN_LINES {
                long.push(format!("{n:4} lines  {}:{line} {name}", f.display()));
            }
        }
    }
    assert!(
        long.is_empty(),
        "functions over {MAX_FN_LINES} lines (split them into named steps):\n{}",
        long.join("\n")
    );
}

#[test]
fn the_function_counter_can_fail() {
    let body = "    let x = 1;\n".repeat(MAX_FN_LINES);
    let text = format!("pub(crate) fn long() {{\n{body}}}\nfn short() {{ \"}}\" }}\n");
    let f = functions(&text);
    assert_eq!(f[0], ("long".to_string(), 1, MAX_FN_LINES + 2));
    assert_eq!(f[1], ("short".to_string(), MAX_FN_LINES + 3, 1));
}

/// A source file as a module: its path from the crate root.
fn module_of(src: &Path, f: &Path) -> Vec<String> {
    let rel = f.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|s| s.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

/// Every path a file's code names, as segments (`use` groups expanded).
fn paths_named(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    // `use` statements, with their brace groups expanded.
    let mut rest = code;
    while let Some(at) = find_word(rest, "use") {
        let stmt = &rest[at + 3..];
        let end = stmt.find(';').unwrap_or(stmt.len());
        expand_use(stmt[..end].trim(), &mut Vec::new(), &mut out);
        rest = &stmt[end..];
    }
    // Inline paths: crate::a::b, super::x.
    for start in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(k) = code[from..].find(start) {
            let at = from + k;
            from = at + start.len();
            if at > 0 && code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':')
            {
                continue;
            }
            let tail: String = code[at..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            if tail.ends_with("::") {
                continue; // `crate::a::{b, c}`: the `use` expansion has it
            }
            out.push(
                tail.split("::")
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect(),
            );
        }
    }
    out
}

fn find_word(s: &str, w: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(k) = s[from..].find(w) {
        let at = from + k;
        let before = s[..at].chars().next_back();
        let after = s[at + w.len()..].chars().next();
        let boundary = |c: Option<char>| !c.is_some_and(|c| c.is_alphanumeric() || c == '_');
        if boundary(before) && after.is_some_and(char::is_whitespace) {
            return Some(at);
        }
        from = at + w.len();
    }
    None
}

/// `a::{b, c::{d, e}}` → a::b, a::c::d, a::c::e.
fn expand_use(s: &str, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let s = s.trim();
    if let Some(open) = s.find('{') {
        let head: Vec<String> = s[..open]
            .split("::")
            .map(|x| x.trim().to_string())
            .filter(|x| !x.is_empty())
            .collect();
        let inner = &s[open + 1..s.rfind('}').unwrap_or(s.len())];
        let n = prefix.len();
        prefix.extend(head);
        for part in split_top(inner) {
            expand_use(part, prefix, out);
        }
        prefix.truncate(n);
        return;
    }
    let mut p = prefix.clone();
    let name = s.split(" as ").next().unwrap_or(s);
    p.extend(
        name.split("::")
            .map(|x| x.trim().to_string())
            .filter(|x| !x.is_empty()),
    );
    out.push(p);
}

/// Split at commas outside braces.
fn split_top(s: &str) -> Vec<&str> {
    let (mut depth, mut last, mut out) = (0, 0, Vec::new());
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[last..i]);
                last = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[last..]);
    out.into_iter().filter(|p| !p.trim().is_empty()).collect()
}

/// The crate's modules, their code, and the names each directory module and
/// the crate root re-export (`name` → where it comes from).
struct Crate {
    code: BTreeMap<Vec<String>, String>,
    reexports: BTreeMap<Vec<String>, BTreeMap<String, Vec<String>>>,
}

impl Crate {
    fn load() -> Crate {
        let src = src_dir();
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        let mut code = BTreeMap::new();
        let mut reexports = BTreeMap::new();
        for f in files {
            let text = std::fs::read_to_string(&f).expect("read source");
            let m = module_of(&src, &f);
            let c: String = non_test_lines(&text)
                .iter()
                .map(|l| code_of(l))
                .collect::<Vec<_>>()
                .join("\n");
            let mut re = BTreeMap::new();
            for line in c.lines().filter(|l| l.trim_start().starts_with("pub use ")) {
                let mut paths = Vec::new();
                let stmt = line.trim_start().trim_start_matches("pub use ");
                expand_use(stmt.trim_end_matches(';'), &mut Vec::new(), &mut paths);
                for p in paths {
                    if let Some(last) = p.last() {
                        re.insert(last.clone(), p);
                    }
                }
            }
            reexports.insert(m.clone(), re);
            code.insert(m, c);
        }
        Crate { code, reexports }
    }

    /// The module (file) a path from module `from` lands in, following re-exports.
    fn resolve(&self, from: &[String], path: &[String]) -> Option<Vec<String>> {
        let mut cur: Vec<String> = match path.first()?.as_str() {
            "crate" => Vec::new(),
            "super" => from[..from.len().saturating_sub(1)].to_vec(),
            "self" => from.to_vec(),
            first
                if self
                    .code
                    .contains_key(&[from, &[first.to_string()]].concat()) =>
            {
                from.to_vec()
            }
            _ => return None, // another crate, or a name in scope
        };
        let skip = usize::from(matches!(path[0].as_str(), "crate" | "super" | "self"));
        for seg in &path[skip..] {
            let child = [cur.clone(), vec![seg.clone()]].concat();
            if self.code.contains_key(&child) {
                cur = child;
                continue;
            }
            // Not a module: an item of `cur`, perhaps re-exported from elsewhere.
            if let Some(target) = self.reexports.get(&cur).and_then(|r| r.get(seg)) {
                if let Some(m) = self.resolve(&cur, target) {
                    return Some(m);
                }
            }
            break;
        }
        Some(cur)
    }

    fn graph(&self) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
        let mut g = BTreeMap::new();
        for (m, c) in &self.code {
            if m.is_empty() {
                continue; // lib.rs: the crate map
            }
            let mut deps = BTreeSet::new();
            for p in paths_named(c) {
                if let Some(t) = self.resolve(m, &p) {
                    if &t != m && !t.is_empty() && !m.starts_with(&t) {
                        deps.insert(t);
                    }
                }
            }
            g.insert(m.clone(), deps);
        }
        g
    }
}

/// A circle in `g`, if there is one.
fn find_circle(g: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Option<Vec<Vec<String>>> {
    fn visit(
        n: &Vec<String>,
        g: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        state: &mut BTreeMap<Vec<String>, u8>,
        stack: &mut Vec<Vec<String>>,
    ) -> Option<Vec<Vec<String>>> {
        state.insert(n.clone(), 1);
        stack.push(n.clone());
        for d in g.get(n).into_iter().flatten() {
            match state.get(d).copied().unwrap_or(0) {
                1 => {
                    let at = stack.iter().position(|x| x == d).unwrap_or(0);
                    let mut c = stack[at..].to_vec();
                    c.push(d.clone());
                    return Some(c);
                }
                0 => {
                    if let Some(c) = visit(d, g, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(n.clone(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in g.keys() {
        if state.get(n).copied().unwrap_or(0) == 0 {
            if let Some(c) = visit(n, g, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

fn show(m: &[String]) -> String {
    m.join("::")
}

#[test]
fn the_module_graph_has_no_circle() {
    let g = Crate::load().graph();
    for (m, deps) in &g {
        let d: Vec<String> = deps.iter().map(|d| show(d)).collect();
        println!("{:<24} -> {}", show(m), d.join(", "));
    }
    if let Some(c) = find_circle(&g) {
        let c: Vec<String> = c.iter().map(|m| show(m)).collect();
        panic!("import circle: {}", c.join(" -> "));
    }
}

#[test]
fn the_circle_finder_can_fail() {
    let m = |s: &str| vec![s.to_string()];
    let mut g = BTreeMap::new();
    g.insert(m("a"), BTreeSet::from([m("b")]));
    g.insert(m("b"), BTreeSet::from([m("c")]));
    g.insert(m("c"), BTreeSet::new());
    assert!(find_circle(&g).is_none());
    g.insert(m("c"), BTreeSet::from([m("a")]));
    assert_eq!(find_circle(&g).map(|c| c.len()), Some(4));
    // Paths and re-exports resolve to the defining file.
    let code = "use super::band::{BandState, Bands};\nlet x = crate::format::Loc(1);";
    let p = paths_named(code);
    assert!(p.contains(&vec!["super".into(), "band".into(), "Bands".into()]));
    assert!(p.contains(&vec!["crate".into(), "format".into(), "Loc".into()]));
}
