//! The module graph of a crate, read from its sources: which top-level modules (files or
//! folders under `src/`) import which (`crate::<module>` in code, test code and comments left
//! out), and the first cycle, if any. The layering tests of agent-common and the agent use it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The lines of a source file outside test code: an item under `#[cfg(test)]` (a test
/// module, a test function, an import) is left out up to its end (its braces balanced, or
/// its `;`), and the code after it is read (a test item in the middle of a file used to end
/// the reading there, and hid the imports below it).
pub fn non_test_lines(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if !line.trim_start().starts_with("#[cfg(test)]") {
            out.push(line);
            continue;
        }
        // Skip the item the attribute is on: further attributes, then up to its `;` at depth
        // 0 or until its braces close.
        let mut depth: i64 = 0;
        let mut opened = false;
        for l in lines.by_ref() {
            let t = l.trim_start();
            if !opened && t.starts_with("#[") {
                continue;
            }
            for c in l.chars() {
                match c {
                    '{' => {
                        depth += 1;
                        opened = true;
                    }
                    '}' => depth -= 1,
                    _ => {}
                }
            }
            if opened && depth <= 0 {
                break;
            }
            if !opened && t.ends_with(';') {
                break;
            }
        }
    }
    out
}

/// `crate::<module>` references of a source file's non-test code (comments left out).
pub fn imports(text: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in non_test_lines(text) {
        let l = line.trim_start();
        if l.starts_with("//") {
            continue;
        }
        let mut rest = l;
        while let Some(i) = rest.find("crate::") {
            rest = &rest[i + 7..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if modules.contains(&name) {
                out.insert(name);
            }
        }
    }
    out
}

/// The top-level module a source file belongs to (`headers/ipv4.rs` -> `headers`).
pub fn module_of(rel: &Path) -> String {
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

/// Every `.rs` file below `src`.
pub fn rust_files(src: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read src").flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    files
}

/// The graph: module -> the modules it imports (itself left out).
pub fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let files = rust_files(src);
    let rel = |p: &Path| p.strip_prefix(src).expect("under src").to_path_buf();
    let modules: BTreeSet<String> = files
        .iter()
        .map(|p| module_of(&rel(p)))
        .filter(|m| m != "lib" && m != "main" && !m.ends_with("_tests"))
        .collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for p in &files {
        let m = module_of(&rel(p));
        if !modules.contains(&m) {
            continue;
        }
        let deps = imports(&std::fs::read_to_string(p).expect("read"), &modules);
        graph
            .entry(m.clone())
            .or_default()
            .extend(deps.into_iter().filter(|d| *d != m));
    }
    graph
}

/// The first import cycle of the graph, as a path that ends where it starts.
pub fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    // Depth-first search; a back edge is a cycle.
    fn visit(
        m: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match state.get(m) {
            Some(2) => return None,
            Some(1) => {
                let at = path.iter().position(|x| x == m).unwrap();
                let mut c = path[at..].to_vec();
                c.push(m.to_string());
                return Some(c);
            }
            _ => {}
        }
        state.insert(m.to_string(), 1);
        path.push(m.to_string());
        for d in g.get(m).into_iter().flatten() {
            if let Some(c) = visit(d, g, state, path) {
                return Some(c);
            }
        }
        path.pop();
        state.insert(m.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    graph
        .keys()
        .find_map(|m| visit(m, graph, &mut state, &mut Vec::new()))
}

/// The module path of a source file under `src/` (`export/report.rs` -> `export::report`,
/// `export/metrics/mod.rs` -> `export::metrics`, `lib.rs` -> "").
pub fn module_path(rel: &Path) -> String {
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| {
            c.as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_string()
        })
        .collect();
    if parts
        .last()
        .is_some_and(|l| l == "mod" || l == "lib" || l == "main")
    {
        parts.pop();
    }
    parts.join("::")
}

/// The graph between files: a file's module -> the modules its non-test code names through
/// `crate::a::b` or `super::x` paths (each resolved to the longest module that exists; a
/// file's own children and its own module left out).
pub fn file_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let files = rust_files(src);
    let rel = |p: &Path| p.strip_prefix(src).expect("under src").to_path_buf();
    let is_test = |p: &Path| {
        let n = p
            .file_stem()
            .map(|s| s.to_string_lossy().to_string())
            .unwrap_or_default();
        n.ends_with("_tests") || n == "tests"
    };
    let modules: BTreeSet<String> = files
        .iter()
        .filter(|p| !is_test(p))
        .map(|p| module_path(&rel(p)))
        .filter(|m| !m.is_empty())
        .collect();
    let resolve = |segs: &[String]| -> Option<String> {
        (1..=segs.len())
            .rev()
            .map(|n| segs[..n].join("::"))
            .find(|m| modules.contains(m))
    };
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for p in files.iter().filter(|p| !is_test(p)) {
        let me = module_path(&rel(p));
        if me.is_empty() {
            continue;
        }
        // The module a `super::` in this file means: the parent of this file's module.
        let parent: Vec<String> = {
            let mut v: Vec<String> = me.split("::").map(str::to_string).collect();
            v.pop();
            v
        };
        let text = std::fs::read_to_string(p).expect("read");
        let mut deps = BTreeSet::new();
        for line in non_test_lines(&text) {
            let l = line.trim_start();
            if l.starts_with("//") {
                continue;
            }
            for (prefix, base) in [("crate::", Vec::new()), ("super::", parent.clone())] {
                let mut rest = l;
                while let Some(i) = rest.find(prefix) {
                    // `super::super::` and `crate::` inside a longer word are not ours.
                    let before = &rest[..i];
                    rest = &rest[i + prefix.len()..];
                    if before.ends_with("super::")
                        || before.ends_with(|c: char| c.is_alphanumeric() || c == '_')
                    {
                        continue;
                    }
                    let mut segs = base.clone();
                    segs.extend(
                        rest.split("::")
                            .map(|s| {
                                s.chars()
                                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                                    .collect::<String>()
                            })
                            .take_while(|s| !s.is_empty()),
                    );
                    // `use super::{a, b}` names several.
                    if let Some(braced) = rest.strip_prefix('{') {
                        let inner: String = braced.chars().take_while(|c| *c != '}').collect();
                        for name in inner.split(',') {
                            let name: String = name
                                .trim()
                                .chars()
                                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                                .collect();
                            let mut s = base.clone();
                            s.push(name);
                            if let Some(m) = resolve(&s) {
                                deps.insert(m);
                            }
                        }
                        continue;
                    }
                    if let Some(m) = resolve(&segs) {
                        deps.insert(m);
                    }
                }
            }
        }
        deps.retain(|d| {
            *d != me && !d.starts_with(&format!("{me}::")) && !me.starts_with(&format!("{d}::"))
        });
        graph.entry(me).or_default().extend(deps);
    }
    graph
}
