//! The layers of `src/` stay true: every `crate::` path in product code
//! points to a room in a lower layer than its own (the table below, drawn in
//! `src/lib.rs`). Rooms of one layer do not use each other.
//!
//! Plain Rust reading the sources. Test code (`tests.rs` files, `tests/`
//! folders, `test_support.rs`, and what follows a top-level `#[cfg(test)]`)
//! is not product code: a test of a lower room may build its fixtures from
//! the embedded configuration above it.

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

/// The product lines of a file: up to a top-level `#[cfg(test)]`, without
/// comment lines.
fn product_lines(text: &str) -> Vec<(usize, &str)> {
    text.lines()
        .enumerate()
        .take_while(|(_, l)| !l.starts_with("#[cfg(test)]"))
        .filter(|(_, l)| !l.trim_start().starts_with("//"))
        .map(|(i, l)| (i + 1, l))
        .collect()
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
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
        if let Some(group) = after.strip_prefix('{') {
            // Depth-1 names of the group.
            let mut level = 0;
            let mut start = true;
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
        } else {
            out.push(ident_at(after).to_owned());
        }
    }
    // `super::super::x` from a file `depth` modules deep: `depth` supers
    // reach the crate root when the file is the room's own module.
    let mut rest = line;
    while let Some(at) = rest.find("super::") {
        let mut chain = &rest[at..];
        let mut supers = 0;
        while let Some(r) = chain.strip_prefix("super::") {
            supers += 1;
            chain = r;
        }
        rest = chain;
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
                "{}: room `{}` has no layer in tests/layers.rs",
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

/// The longest product file a newcomer should have to read (lines before a
/// top-level `#[cfg(test)]`), and the longest function (issue 54).
const MAX_FILE_LINES: usize = 600;
/// See [`MAX_FILE_LINES`].
const MAX_FN_LINES: usize = 80;

/// Product files over [`MAX_FILE_LINES`] when the limit came, each at most
/// the size it had (path under `src/`, lines): the redesign shrinks them.
/// None may grow, none may join, and one back under the limit leaves the
/// list (the failure message prints the list as it stands).
const FILES_OVER: &[(&str, usize)] = &[
    ("assemble/allocate.rs", 748),
    ("assemble/assembler/templates.rs", 616),
    ("assemble/assembler.rs", 627),
    ("assemble/pipeline.rs", 857),
    ("compact/summary.rs", 649),
    ("gateway/ext_proc.rs", 623),
    ("tokens/template.rs", 703),
    ("tokens/tokenizer.rs", 867),
    ("bin/loadgen/drive.rs", 634),
    ("bin/loadgen/main.rs", 755),
    ("bin/loadgen/report.rs", 641),
];

/// Functions over [`MAX_FN_LINES`] when the limit came, as
/// [`FILES_OVER`] (path, name, lines).
const FNS_OVER: &[(&str, &str, usize)] = &[
    ("assemble/allocate.rs", "allocate", 132),
    ("assemble/allocate.rs", "fill_all", 100),
    ("assemble/allocate.rs", "fill", 84),
    ("assemble/allocate.rs", "summarize_turns", 86),
    ("assemble/assembler.rs", "assemble_inner", 250),
    ("assemble/batch.rs", "assemble_batch", 87),
    ("assemble/flow.rs", "batch", 83),
    ("assemble/layout.rs", "plan", 167),
    ("assemble/pipeline.rs", "run", 193),
    ("assemble/pipeline.rs", "measure", 103),
    ("assemble/report.rs", "decisions", 117),
    ("assemble/validate.rs", "validate", 213),
    ("compact/compactor.rs", "summarize", 100),
    ("compact/summary.rs", "extend_until", 91),
    ("config/catalog.rs", "model_table", 161),
    ("config/catalog.rs", "policy", 96),
    ("config/validate.rs", "memory", 94),
    ("gateway/chat.rs", "parse", 92),
    ("gateway/fit.rs", "fit_inner", 87),
    ("gateway/fit.rs", "splice", 81),
    ("gateway/http.rs", "respond", 81),
    ("gateway/messages.rs", "parse", 81),
    ("gateway/messages.rs", "blocks", 82),
    ("gateway/responses.rs", "parse", 160),
    ("grpc/convert.rs", "try_from", 90),
    ("memory/keeper/retain.rs", "prepare_retain", 107),
    ("prompt_cache/plan.rs", "plan", 88),
    ("server/mod.rs", "serve", 276),
    ("telemetry/metrics/describe.rs", "describe", 233),
    ("tokens/hf/fast.rs", "of", 81),
    ("tokens/hf.rs", "load", 125),
    ("workload/mod.rs", "request", 84),
    ("workload/replay.rs", "requests", 92),
    ("bin/loadgen/main.rs", "workload", 120),
    ("bin/loadgen/main.rs", "run", 157),
    ("bin/loadgen/report.rs", "text", 138),
    ("bin/loadgen/report.rs", "json", 98),
];

/// The functions of a rustfmt-formatted product text with a body: (name,
/// first line, lines from the signature's first line to the closing brace).
/// rustfmt closes a body with a brace alone at the indent its `fn` opened
/// with, which a nested item's never is.
fn functions(text: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = text
        .lines()
        .take_while(|l| !l.starts_with("#[cfg(test)]"))
        .collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        let mut rest = trimmed;
        if let Some(r) = rest.strip_prefix("pub") {
            rest = match r.strip_prefix('(') {
                Some(scoped) => scoped.split_once(") ").map_or("", |(_, r)| r),
                None => r.strip_prefix(' ').unwrap_or(""),
            };
        }
        for qualifier in ["const ", "async ", "unsafe ", "extern \"C\" "] {
            rest = rest.strip_prefix(qualifier).unwrap_or(rest);
        }
        let Some(signature) = rest.strip_prefix("fn ") else {
            continue;
        };
        // The signature ends at `{` (a body) or `;` (a declaration); a body
        // closed on the same line is one line long.
        let Some(open) = (i..lines.len()).find(|&j| {
            let l = lines[j].trim_end();
            l.ends_with('{') || l.ends_with(';') || l.ends_with('}')
        }) else {
            continue;
        };
        if !lines[open].trim_end().ends_with('{') {
            continue;
        }
        let close = format!("{indent}}}");
        if let Some(end) = (open + 1..lines.len()).find(|&j| lines[j] == close) {
            out.push((ident_at(signature).to_owned(), i + 1, end - i + 1));
        }
    }
    out
}

/// Lines of product code: before a top-level `#[cfg(test)]`.
fn file_lines(text: &str) -> usize {
    text.lines()
        .take_while(|l| !l.starts_with("#[cfg(test)]"))
        .count()
}

#[test]
fn no_product_file_or_function_outgrows_what_a_newcomer_can_read() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &src, &mut files);
    rust_files(&src.join("bin"), &src.join("bin"), &mut files);
    let (mut files_over, mut fns_over) = (Vec::new(), Vec::new());
    let mut functions_seen = 0;
    for path in &files {
        if source(&src, path).test_only {
            continue;
        }
        let rel = path
            .strip_prefix(&src)
            .unwrap_or(path)
            .to_string_lossy()
            .replace('\\', "/");
        let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let n = file_lines(&text);
        if n > MAX_FILE_LINES {
            files_over.push((rel.clone(), n));
        }
        for (name, _, lines) in functions(&text) {
            functions_seen += 1;
            if lines > MAX_FN_LINES {
                fns_over.push((rel.clone(), name, lines));
            }
        }
    }
    assert!(functions_seen > 1_000, "only {functions_seen} functions read");
    let mut wrong = Vec::new();
    for (path, n) in &files_over {
        match FILES_OVER.iter().find(|(p, _)| p == path) {
            None => wrong.push(format!("src/{path}: {n} lines, over {MAX_FILE_LINES}")),
            Some(&(_, was)) if *n > was => wrong.push(format!("src/{path}: grew from {was} to {n} lines")),
            Some(_) => {}
        }
    }
    for (path, name, n) in &fns_over {
        match FNS_OVER.iter().find(|(p, f, _)| p == path && f == name) {
            None => wrong.push(format!("src/{path}: fn {name} is {n} lines, over {MAX_FN_LINES}")),
            Some(&(_, _, was)) if *n > was => {
                wrong.push(format!("src/{path}: fn {name} grew from {was} to {n} lines"))
            }
            Some(_) => {}
        }
    }
    for (path, _) in FILES_OVER
        .iter()
        .filter(|(p, _)| !files_over.iter().any(|(q, _)| q == p))
    {
        wrong.push(format!(
            "src/{path}: no longer over {MAX_FILE_LINES} lines: take it off FILES_OVER"
        ));
    }
    for (path, name, _) in FNS_OVER
        .iter()
        .filter(|(p, f, _)| !fns_over.iter().any(|(q, g, _)| q == p && g == f))
    {
        wrong.push(format!(
            "src/{path}: fn {name} no longer over {MAX_FN_LINES} lines: take it off FNS_OVER"
        ));
    }
    let listed_files: Vec<String> = files_over
        .iter()
        .map(|(p, n)| format!("    (\"{p}\", {n}),"))
        .collect();
    let listed_fns: Vec<String> = fns_over
        .iter()
        .map(|(p, f, n)| format!("    (\"{p}\", \"{f}\", {n}),"))
        .collect();
    assert!(
        wrong.is_empty(),
        "{}\n\nas they stand:\nconst FILES_OVER: &[(&str, usize)] = &[\n{}\n];\nconst FNS_OVER: &[(&str, &str, usize)] = &[\n{}\n];",
        wrong.join("\n"),
        listed_files.join("\n"),
        listed_fns.join("\n")
    );
}

#[test]
fn the_size_scan_reads_a_function_from_its_signature_to_its_brace() {
    let text = "\
/// Doc, not counted as a function.
pub(crate) fn long(
    a: u32,
) -> u32 {
    let f = |x: u32| {
        x + 1
    };
    fn nested() {}
    f(a)
}

pub trait T {
    fn declared(&self) -> u32;
    fn given(&self) -> u32 {
        1
    }
}

const fn one_line() -> u32 { 1 }
pub async fn spelled_out() {
    let s = \"}\";
}

#[cfg(test)]
mod tests {
    fn in_a_test() {
    }
}
";
    let found = functions(text);
    assert_eq!(
        found,
        vec![
            ("long".to_owned(), 2, 9),
            ("given".to_owned(), 14, 3),
            ("spelled_out".to_owned(), 20, 3),
        ]
    );
    assert_eq!(file_lines(text), 23);
}
