//! The layers of `src/` stay true: every `crate::` path in product code
//! points to a room in a lower layer than its own (the table below, drawn in
//! `src/lib.rs`). Rooms of one layer do not use each other. Inside a room,
//! no files name one another in a circle (`circles`), and no product file
//! or function outgrows what a newcomer can read (`sizes`).
//!
//! Plain Rust reading the sources. Test code (`tests.rs` files, `tests/`
//! folders, `test_support.rs`, and the top-level `#[cfg(test)]` items)
//! is not product code: a test of a lower room may build its fixtures from
//! the embedded configuration above it.

mod circles;
mod sizes;

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// Each room (a folder of `src/`, or a file beside `lib.rs`) and its layer;
/// a room may use rooms of lower layers only.
const LAYERS: &[(&str, u32)] = &[
    ("vocab", 0),
    ("telemetry", 0),
    ("http1", 0),
    ("tokens", 1),
    ("prompt", 1),
    ("prompt_cache", 2),
    ("compact", 2),
    ("memory", 2),
    ("workload", 2),
    ("provider_count", 2),
    ("assemble", 3),
    ("config", 4),
    ("grpc", 5),
    ("render", 5),
    ("gateway", 6),
    ("offline", 6),
    ("preview", 6),
    ("server", 7),
    ("main", 8),
    ("lib", 8),
];

fn layer(room: &str) -> Option<u32> {
    LAYERS.iter().find(|(r, _)| *r == room).map(|&(_, l)| l)
}

fn rust_files(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.map(|e| e.path()).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            // `src/bin/*` are crates of their own (they use the library
            // as a whole, through `context_assembler::`).
            if p.file_name().is_some_and(|n| n == "bin") && p.parent() == Some(root) {
                continue;
            }
            rust_files(root, &p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// A source file of `src/`: its room, its module depth inside the room
/// (`super::` taken that many times reaches the room), and whether it is
/// test code as a whole.
struct Source {
    path: PathBuf,
    room: String,
    depth: usize,
    test_only: bool,
}

fn source(src: &Path, path: &Path) -> Source {
    let rel = path.strip_prefix(src).unwrap_or(path);
    let parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let stem = |s: &str| s.trim_end_matches(".rs").to_owned();
    let room = stem(&parts[0]);
    // Module path below the room: `a/b.rs` is `room::a::b` (depth 2);
    // `mod.rs` adds nothing.
    let depth = parts[1..].iter().filter(|p| p.as_str() != "mod.rs").count();
    let name = parts.last().map_or("", String::as_str);
    let test_only = name == "tests.rs"
        || name == "test_support.rs"
        || parts[..parts.len() - 1].iter().any(|p| p == "tests");
    Source {
        path: path.to_owned(),
        room,
        depth,
        test_only,
    }
}

/// The lines of a file outside its top-level `#[cfg(test)]` items (`mod
/// tests;`, `mod tests { .. }`, a test-only `thread_local!` or function),
/// as (line number, line): product code, with its comments. Product code
/// after such an item counts as any other.
fn outside_tests(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((i, line)) = lines.next() {
        if !line.starts_with("#[cfg(test)]") {
            out.push((i + 1, line));
            continue;
        }
        // The item it gates: past further attributes, to the `;` or the
        // brace that ends it.
        let mut depth = 0i64;
        for (_, item) in lines.by_ref() {
            if depth == 0 && item.starts_with("#[") {
                continue;
            }
            depth += item.matches('{').count() as i64 - item.matches('}').count() as i64;
            let end = item.trim_end();
            if depth <= 0 && (end.ends_with(';') || end.ends_with('}')) {
                break;
            }
        }
    }
    out
}

/// The product lines of a file ([`outside_tests`]) without comment lines.
fn product_lines(text: &str) -> Vec<(usize, &str)> {
    outside_tests(text)
        .into_iter()
        .filter(|(_, l)| !l.trim_start().starts_with("//"))
        .collect()
}

/// Each `super::` chain of `text`: how many `super`s it climbs, and the text
/// after it.
fn super_chains(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("super::") {
        let mut chain = &rest[at..];
        let mut supers = 0;
        while let Some(r) = chain.strip_prefix("super::") {
            supers += 1;
            chain = r;
        }
        out.push((supers, chain));
        rest = chain;
    }
    out
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The top-level names a path names after `at` (a name, or a `{...}`
/// group's first segments, across lines).
fn names_after(at: &str) -> Vec<String> {
    let Some(group) = at.strip_prefix('{') else {
        return vec![ident_at(at).to_owned()];
    };
    let mut out = Vec::new();
    let (mut level, mut start) = (0, true);
    for (i, c) in group.char_indices() {
        match c {
            '{' => level += 1,
            '}' if level == 0 => break,
            '}' => level -= 1,
            ',' if level == 0 => start = true,
            c if start && !c.is_whitespace() => {
                start = false;
                out.push(ident_at(&group[i..]).to_owned());
            }
            _ => {}
        }
    }
    out
}

/// The rooms a line names through `crate::` (a path, or a `crate::{a, b}`
/// group's first segments), and through `super::` chains that leave the
/// file's room (`depth` is the file's module depth inside its room).
fn rooms_named(line: &str, depth: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().last();
        let after = &rest[at + "crate::".len()..];
        rest = after;
        // `context_assembler::` or `foo_crate::` are not this crate.
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        // A name, or a group's depth-1 names.
        out.extend(names_after(after));
    }
    // `super::super::x` from a file `depth` modules deep: `depth` supers
    // reach the crate root when the file is the room's own module.
    for (supers, chain) in super_chains(line) {
        if supers > depth {
            out.push(ident_at(chain).to_owned());
        }
    }
    out
}

#[test]
fn every_arrow_between_rooms_points_down() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &src, &mut files);
    assert!(files.len() > 50, "read {} files", files.len());
    let mut wrong = Vec::new();
    let mut rooms = BTreeSet::new();
    let mut arrows = 0;
    for path in &files {
        let f = source(&src, path);
        let Some(own) = layer(&f.room) else {
            wrong.push(format!(
                "{}: room `{}` has no layer in tests/layers/main.rs",
                f.path.display(),
                f.room
            ));
            continue;
        };
        rooms.insert(f.room.clone());
        if f.test_only {
            continue;
        }
        let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for (n, line) in product_lines(&text) {
            for named in rooms_named(line, f.depth) {
                if named == f.room {
                    continue;
                }
                let Some(theirs) = layer(&named) else {
                    // `crate::SomeItem` re-exported at the root, or a macro.
                    wrong.push(format!(
                        "{}:{n}: names `{named}`, which is no room",
                        f.path.display()
                    ));
                    continue;
                };
                arrows += 1;
                if theirs >= own {
                    wrong.push(format!(
                        "{}:{n}: `{}` (layer {own}) uses `{named}` (layer {theirs}): {}",
                        f.path.display(),
                        f.room,
                        line.trim()
                    ));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "arrows that do not point down:\n{}",
        wrong.join("\n")
    );
    // The walk saw the house: every room of the table.
    for (room, _) in LAYERS {
        assert!(rooms.contains(*room), "no sources found for room `{room}`");
    }
    assert!(
        arrows > 100,
        "only {arrows} arrows between rooms: is the scan reading the files?"
    );
}

#[test]
fn the_scan_sees_the_forms_an_upward_arrow_can_take() {
    assert_eq!(rooms_named("use crate::assemble::Assembler;", 1), ["assemble"]);
    assert_eq!(
        rooms_named("use crate::{grpc::pb, prompt::{Item, Block}, vocab};", 1),
        ["grpc", "prompt", "vocab"]
    );
    assert_eq!(
        rooms_named("let a = crate::config::default_catalog();", 0),
        ["config"]
    );
    // From `room/a.rs` (depth 1), one `super` is the room, two leave it.
    assert!(rooms_named("use super::x::Y;", 1).is_empty());
    assert_eq!(rooms_named("use super::super::grpc::pb;", 1), ["grpc"]);
    // From `room/mod.rs` (depth 0) one `super` leaves.
    assert_eq!(rooms_named("use super::server;", 0), ["server"]);
    assert!(rooms_named("use context_assembler::grpc::pb;", 0).is_empty());
    assert!(
        product_lines("use a;\n// crate::grpc\n#[cfg(test)]\nmod tests { use crate::grpc; }")
            .iter()
            .all(|(_, l)| !l.contains("grpc"))
    );
    // A test-only item in the middle hides nothing after it.
    let text = "use a;\n#[cfg(test)]\nthread_local! {\n    static X: u8 = 0;\n}\nfn b() {}\n#[cfg(test)]\nmod tests;\n#[cfg(test)]\n#[allow(dead_code)]\nfn t() {\n}\nfn c() {}";
    let kept: Vec<&str> = product_lines(text).iter().map(|(_, l)| *l).collect();
    assert_eq!(kept, ["use a;", "fn b() {}", "fn c() {}"]);
}

/// The wire stops at `grpc/`: the domain rooms and the rooms under them
/// never name tonic, prost or the generated code, in product code.
/// (`telemetry`'s span exporter is a tonic client of its own collector,
/// not a domain room.)
#[test]
fn the_domain_names_no_wire_type() {
    const WIRE: [&str; 4] = ["tonic::", "prost::", "tonic_types::", "pbjson::"];
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &src, &mut files);
    let mut wrong = Vec::new();
    for path in &files {
        let f = source(&src, path);
        const DOMAIN: [&str; 7] = [
            "vocab",
            "tokens",
            "prompt",
            "prompt_cache",
            "compact",
            "memory",
            "assemble",
        ];
        let domain = DOMAIN.contains(&f.room.as_str());
        if f.test_only || !domain {
            continue;
        }
        let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for (n, line) in product_lines(&text) {
            if let Some(w) = WIRE.iter().find(|w| line.contains(*w)) {
                wrong.push(format!("{}:{n}: names `{w}`", f.path.display()));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "wire types in the domain:\n{}",
        wrong.join("\n")
    );
}
