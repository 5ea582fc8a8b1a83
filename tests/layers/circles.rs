//! No circle of files inside a room (issue 54), but those there when the
//! check came, which the redesign breaks.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

use super::{names_after, product_lines, rust_files, source, super_chains};

/// Circles of files inside a room when the check came (issue 54), as
/// "room: a, b, c" (the room's modules that reach one another, sorted): the
/// redesign breaks them. No other may form; one broken leaves the list.
const CIRCLES: &[&str] = &[];

/// Text without its comment lines (product code: outside the top-level
/// `#[cfg(test)]` items).
fn product_text(text: &str) -> String {
    product_lines(text)
        .iter()
        .map(|(_, l)| *l)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The room's top-level modules a product file of module path `module`
/// (below its room) names: through `super::` chains that reach the room's
/// root, and through `crate::room::`.
fn modules_named(text: &str, room: &str, module: &[String]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (supers, chain) in super_chains(text) {
        if supers == module.len() {
            out.extend(names_after(chain));
        }
    }
    let own = format!("crate::{room}::");
    let mut rest = text;
    while let Some(at) = rest.find(&own) {
        rest = &rest[at + own.len()..];
        out.extend(names_after(rest));
    }
    out
}

#[test]
fn no_circle_of_files_inside_a_room() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &src, &mut files);
    // Per room: each top-level module and the room's modules it names.
    let mut rooms: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = Default::default();
    for path in &files {
        let f = source(&src, path);
        let rel = path.strip_prefix(&src).unwrap_or(path);
        let module: Vec<String> = rel
            .components()
            .skip(1)
            .map(|c| c.as_os_str().to_string_lossy().trim_end_matches(".rs").to_owned())
            .filter(|p| p != "mod")
            .collect();
        let Some(node) = module.first().cloned() else {
            continue;
        };
        let modules = rooms.entry(f.room.clone()).or_default();
        let named = modules.entry(node.clone()).or_default();
        if f.test_only {
            continue;
        }
        let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        named.extend(modules_named(&product_text(&text), &f.room, &module));
        named.remove(&node);
    }
    let mut found = BTreeSet::new();
    for (room, modules) in &rooms {
        let reach = |from: &str| {
            let mut seen = BTreeSet::new();
            let mut todo = vec![from.to_owned()];
            while let Some(m) = todo.pop() {
                for n in modules.get(&m).into_iter().flatten() {
                    if modules.contains_key(n) && seen.insert(n.clone()) {
                        todo.push(n.clone());
                    }
                }
            }
            seen
        };
        let reached: BTreeMap<&String, BTreeSet<String>> = modules.keys().map(|m| (m, reach(m))).collect();
        for (m, r) in &reached {
            let circle: Vec<&str> = r
                .iter()
                .filter(|n| reached.get(n).is_some_and(|back| back.contains(*m)))
                .map(String::as_str)
                .collect();
            if !circle.is_empty() {
                found.insert(format!("{room}: {}", circle.join(", ")));
            }
        }
    }
    let mut wrong: Vec<String> = found
        .iter()
        .filter(|c| !CIRCLES.contains(&c.as_str()))
        .map(|c| format!("a circle of files: {c}"))
        .collect();
    wrong.extend(
        CIRCLES
            .iter()
            .filter(|c| !found.contains(**c))
            .map(|c| format!("no longer a circle: {c} (take it off CIRCLES)")),
    );
    let listed: Vec<String> = found.iter().map(|c| format!("    \"{c}\",")).collect();
    assert!(
        wrong.is_empty(),
        "{}\n\nas they stand:\nconst CIRCLES: &[&str] = &[\n{}\n];",
        wrong.join("\n"),
        listed.join("\n")
    );
}

#[test]
fn the_module_scan_reads_groups_across_lines_and_leaves_deeper_paths() {
    let text = "use super::{\n    measure::Measured,\n    policy::{self, Policy},\n};\nuse super::super::x::Y;\nuse crate::assemble::shrink::Shrinker;\nuse crate::tokens::cache;";
    let module = vec!["allocate".to_owned()];
    let named: Vec<String> = modules_named(text, "assemble", &module).into_iter().collect();
    assert_eq!(named, ["measure", "policy", "shrink"]);
    // Two levels down, one `super::` stays in the file's own module.
    let deeper = vec!["allocate".to_owned(), "plan".to_owned()];
    let named: Vec<String> = modules_named(text, "assemble", &deeper).into_iter().collect();
    assert_eq!(named, ["shrink", "x"]);
}
