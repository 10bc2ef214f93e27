//! The modules of the core (and of the tokio drivers, `net/`) are layers: no module refers,
//! directly or through others, to a module that refers back to it. The compiler enforces this
//! between crates only, so this test reads the sources (`crate::` paths outside comments and
//! tests) and fails on any cycle, naming the lines that make it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// module → (module it refers to → the first place it does)
type Graph = BTreeMap<String, BTreeMap<String, String>>;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The identifiers that follow `crate::` in `line`, and those inside `use crate::{…}` groups.
fn references(line: &str, group: &mut Option<String>, out: &mut Vec<String>) {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    if let Some(open) = group {
        open.push_str(line);
        if line.contains("};") {
            let body = std::mem::take(open);
            *group = None;
            for item in body.split(',') {
                let name = ident(item.trim());
                if !name.is_empty() {
                    out.push(name);
                }
            }
        }
        return;
    }
    let mut rest = line;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(body) = rest.strip_prefix('{') {
            if body.contains("};") {
                for item in body.split('}').next().unwrap().split(',') {
                    let name = ident(item.trim());
                    if !name.is_empty() {
                        out.push(name);
                    }
                }
            } else {
                *group = Some(body.to_owned());
            }
            return;
        }
        out.push(ident(rest));
    }
}

/// The module graph of the crate whose sources are in `src` (relative to this crate's folder).
fn graph(src: &str) -> Graph {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(src);
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let top = |path: &Path| -> String {
        let relative = path.strip_prefix(&src).unwrap();
        let first = relative.components().next().unwrap().as_os_str();
        first.to_string_lossy().trim_end_matches(".rs").to_owned()
    };
    let modules: BTreeSet<String> = files.iter().map(|f| top(f)).collect();
    let mut graph = Graph::new();
    for file in &files {
        let module = top(file);
        if module == "lib" || file.file_name().unwrap() == "tests.rs" {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap();
        let mut group = None;
        for (number, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("#[cfg(test)]") {
                break; // unit tests may use anything
            }
            if code.starts_with("//") {
                continue;
            }
            let mut found = Vec::new();
            references(code, &mut group, &mut found);
            for target in found {
                if target != module && modules.contains(&target) {
                    let place = format!("{}:{}", file.display(), number + 1);
                    graph
                        .entry(module.clone())
                        .or_default()
                        .entry(target)
                        .or_insert(place);
                }
            }
        }
    }
    graph
}

/// A cycle through `start`, if there is one (depth-first search).
fn cycle_from(graph: &Graph, start: &str) -> Option<Vec<String>> {
    fn visit(
        graph: &Graph,
        at: &str,
        start: &str,
        path: &mut Vec<String>,
        seen: &mut BTreeSet<String>,
    ) -> bool {
        for next in graph.get(at).into_iter().flat_map(|m| m.keys()) {
            if next == start {
                return true;
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if visit(graph, next, start, path, seen) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    let mut path = vec![start.to_owned()];
    visit(graph, start, start, &mut path, &mut BTreeSet::new()).then_some(path)
}

fn assert_layered(src: &str) {
    let graph = graph(src);
    assert!(graph.len() > 5, "{src}: too few modules found ({graph:?})");
    for module in graph.keys() {
        if let Some(cycle) = cycle_from(&graph, module) {
            let mut report = String::new();
            for (i, from) in cycle.iter().enumerate() {
                let to = &cycle[(i + 1) % cycle.len()];
                report.push_str(&format!("  {from} -> {to} ({})\n", graph[from][to]));
            }
            panic!("the modules of {src} form a cycle:\n{report}");
        }
    }
}

#[test]
fn no_module_of_the_core_refers_back_to_a_module_that_refers_to_it() {
    assert_layered("src");
}

#[test]
fn no_module_of_the_tokio_drivers_refers_back_to_a_module_that_refers_to_it() {
    assert_layered("../net/src");
}

#[test]
fn the_checker_sees_references_and_would_report_a_cycle() {
    // The parser reads both forms a reference takes.
    let mut found = Vec::new();
    references(
        "use crate::client::{CallId, ClientError};",
        &mut None,
        &mut found,
    );
    let mut group = None;
    references("use crate::{", &mut group, &mut found);
    references("    codec::Request, hlc,", &mut group, &mut found);
    references("};", &mut group, &mut found);
    references(
        "let x = crate::jobs::parse_api(api);",
        &mut None,
        &mut found,
    );
    assert_eq!(found, ["client", "codec", "hlc", "jobs"]);

    // And the search finds a cycle when there is one.
    let mut graph = graph("src");
    assert!(graph.contains_key("session") && graph["session"].contains_key("client"));
    graph
        .entry("client".into())
        .or_default()
        .insert("session".into(), "injected".into());
    assert!(cycle_from(&graph, "client").is_some());
}
