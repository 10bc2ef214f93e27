//! The modules of the core (and of the tokio drivers, `net/`, the server, `server/`, and the
//! command, `cli/`) are layers: no module refers, directly or through others, to a module that
//! refers back to it — at every level, submodules among their siblings too. The compiler
//! enforces this between crates only, so this test reads the sources (`crate::`, `super::` and
//! `self::` paths outside comments and tests, through re-exports) and fails on any cycle,
//! naming the lines that make it.

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

/// The paths a line refers to: what follows `crate::`, `super::` and `self::` (as
/// `crate::…`, `super::…`, `self::…`, each with its first two segments), inside `use …::{…}`
/// groups too (`group` carries a group over lines: its prefix and what was read so far).
fn references(line: &str, group: &mut Option<(String, String)>, out: &mut Vec<String>) {
    let path = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
            .collect::<String>()
            .trim_end_matches(':')
            .to_owned()
    };
    let items = |prefix: &str, body: &str, out: &mut Vec<String>| {
        for item in body.split(',') {
            let item = path(item.trim().trim_start_matches('{'));
            if !item.is_empty() && item != "self" {
                out.push(format!("{prefix}::{item}"));
            }
        }
    };
    if let Some((prefix, open)) = group {
        open.push_str(line);
        if line.contains("};") {
            let (prefix, body) = (prefix.clone(), std::mem::take(open));
            *group = None;
            items(&prefix, &body, out);
        }
        return;
    }
    let mut rest = line;
    loop {
        let found = ["crate::", "super::", "self::"]
            .iter()
            .filter_map(|root| rest.find(root).map(|at| (at, *root)))
            .min();
        let Some((at, root)) = found else { break };
        // `super::super::x` and `crate::a::{…}`: the path before a group is its prefix.
        let start = &rest[at..];
        let head: String = start
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        let after = &start[head.len()..];
        let prefix = head.trim_end_matches(':').to_owned();
        if let Some(body) = after.strip_prefix('{') {
            if body.contains("};") || body.contains('}') {
                items(&prefix, body.split('}').next().unwrap(), out);
                rest = &body[body.find('}').unwrap()..];
                continue;
            }
            *group = Some((prefix, body.to_owned()));
            return;
        }
        if prefix != root.trim_end_matches(':') {
            out.push(prefix);
        }
        rest = &start[head.len().max(root.len())..];
    }
}

/// The module path (`["jobs", "groups"]`) of a source file under `src`.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).unwrap();
    let mut parts: Vec<String> = relative
        .components()
        .map(|c| {
            c.as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_owned()
        })
        .collect();
    if parts
        .last()
        .is_some_and(|p| p == "mod" || p == "lib" || p == "main")
    {
        parts.pop();
    }
    parts
}

/// Where a path written in module `from` leads: the deepest module it names (`crate::jobs::
/// model::Job` → `jobs::model`), through the re-exports of a module's own file (`pub use
/// model::Job` in `jobs/mod.rs` makes `jobs::Job` lead to `jobs::model`).
fn resolve(
    from: &[String],
    path: &str,
    modules: &BTreeSet<Vec<String>>,
    reexports: &BTreeMap<(Vec<String>, String), Vec<String>>,
) -> Option<Vec<String>> {
    let mut segments = path.split("::");
    let mut at: Vec<String> = match segments.next()? {
        "crate" => Vec::new(),
        "self" => from.to_vec(),
        "super" => from[..from.len().checked_sub(1)?].to_vec(),
        _ => return None,
    };
    for segment in segments {
        if segment == "super" {
            at.pop();
            continue;
        }
        let mut next = at.clone();
        next.push(segment.to_owned());
        if modules.contains(&next) {
            at = next;
        } else if let Some(target) = reexports.get(&(at.clone(), segment.to_owned())) {
            at = target.clone();
            break;
        } else {
            break;
        }
    }
    Some(at)
}

/// The `pub use child::{A, B}` lines of a module's file: which child each name comes from.
fn reexports_in(
    text: &str,
    module: &[String],
    modules: &BTreeSet<Vec<String>>,
) -> Vec<(String, Vec<String>)> {
    let mut found = Vec::new();
    let text = text.replace('\n', " ");
    for statement in text.split(';') {
        let statement = statement.trim();
        let Some(rest) = statement
            .strip_prefix("pub use ")
            .or_else(|| statement.strip_prefix("pub(crate) use "))
        else {
            continue;
        };
        let rest = rest.trim_start_matches("self::");
        let Some((child, names)) = rest.split_once("::") else {
            continue;
        };
        let mut target = module.to_vec();
        target.push(child.to_owned());
        if !modules.contains(&target) {
            continue;
        }
        for name in names.trim_matches(|c| c == '{' || c == '}').split(',') {
            let name = name.trim().rsplit(" as ").next().unwrap_or("").trim();
            let name = name.rsplit("::").next().unwrap_or(name);
            if !name.is_empty() {
                found.push((name.to_owned(), target.clone()));
            }
        }
    }
    found
}

/// The module graph of the crate whose sources are in `src` (relative to this crate's
/// folder), between siblings: a reference from `jobs::groups` to `jobs::model` is an edge
/// `jobs::groups → jobs::model`; one from `engine::scan_token` to `jobs::wire` is `engine →
/// jobs` (the children of the modules they share no parent below). A module's references to
/// its own parents and children are its nesting, not edges.
fn graph(src: &str) -> Graph {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(src);
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| module_of(&src, f)).collect();
    let texts: Vec<(Vec<String>, &PathBuf, String)> = files
        .iter()
        .map(|f| (module_of(&src, f), f, std::fs::read_to_string(f).unwrap()))
        .collect();
    let mut reexports = BTreeMap::new();
    for (module, _, text) in &texts {
        for (name, target) in reexports_in(text, module, &modules) {
            reexports.insert((module.clone(), name), target);
        }
    }
    let mut graph = Graph::new();
    for (module, file, text) in &texts {
        if module.is_empty() || file.file_name().unwrap() == "tests.rs" {
            continue;
        }
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
            for path in found {
                let Some(target) = resolve(module, &path, &modules, &reexports) else {
                    continue;
                };
                // The first segment where they part: siblings under their common parent.
                let shared = module
                    .iter()
                    .zip(&target)
                    .take_while(|(a, b)| a == b)
                    .count();
                if shared == module.len() || shared == target.len() {
                    continue; // a parent or a child
                }
                let from = module[..=shared].join("::");
                let to = target[..=shared].join("::");
                let place = format!("{}:{}", file.display(), number + 1);
                graph.entry(from).or_default().entry(to).or_insert(place);
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

/// Fails on every cycle among the modules of `src`, which has at least `least` modules with
/// references (fewer means the reader failed).
fn assert_layered(src: &str, least: usize) {
    let graph = graph(src);
    assert!(
        graph.len() >= least,
        "{src}: too few modules found ({graph:?})"
    );
    let mut seen = BTreeSet::new();
    let mut report = String::new();
    for module in graph.keys() {
        if let Some(cycle) = cycle_from(&graph, module) {
            let members: BTreeSet<&String> = cycle.iter().collect();
            if !seen.insert(format!("{members:?}")) {
                continue;
            }
            for (i, from) in cycle.iter().enumerate() {
                let to = &cycle[(i + 1) % cycle.len()];
                report.push_str(&format!("  {from} -> {to} ({})\n", graph[from][to]));
            }
            report.push('\n');
        }
    }
    assert!(
        report.is_empty(),
        "the modules of {src} form cycles:\n{report}"
    );
}

#[test]
fn no_module_of_the_core_refers_back_to_a_module_that_refers_to_it() {
    assert_layered("src", 20);
}

#[test]
fn no_module_of_the_tokio_drivers_refers_back_to_a_module_that_refers_to_it() {
    assert_layered("../net/src", 4);
}

#[test]
fn no_module_of_the_server_refers_back_to_a_module_that_refers_to_it() {
    assert_layered("../server/src", 6);
}

#[test]
fn no_module_of_the_command_refers_back_to_a_module_that_refers_to_it() {
    assert_layered("../cli/src", 4);
}

#[test]
fn the_checker_sees_references_and_would_report_a_cycle() {
    // The parser reads every form a reference takes.
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
    references("use super::model::{Job, Status};", &mut None, &mut found);
    references("use super::super::hlc::Hlc;", &mut None, &mut found);
    assert_eq!(
        found,
        [
            "crate::client::CallId",
            "crate::client::ClientError",
            "crate::codec::Request",
            "crate::hlc",
            "crate::jobs::parse_api",
            "super::model::Job",
            "super::model::Status",
            "super::super::hlc::Hlc",
        ]
    );
    // Submodules, `super::` and re-exports resolve to the module they lead to.
    let core = graph("src");
    assert!(core["server"].contains_key("engine"), "{core:?}");
    assert!(
        core.keys().any(|m| m.starts_with("jobs::")),
        "submodules are nodes: {core:?}"
    );

    // And the search finds a cycle when there is one.
    let mut graph = graph("src");
    assert!(graph.contains_key("session") && graph["session"].contains_key("client"));
    graph
        .entry("client".into())
        .or_default()
        .insert("session".into(), "injected".into());
    assert!(cycle_from(&graph, "client").is_some());
}
