//! No product file over 600 lines, no function over 80 (issue 54), but
//! those over when the limits came, which may not grow.

use std::fs;
use std::path::Path;

use super::{ident_at, outside_tests, rust_files, source};

/// The longest product file a newcomer should have to read (lines before a
/// top-level `#[cfg(test)]`), and the longest function (issue 54).
const MAX_FILE_LINES: usize = 600;
/// See [`MAX_FILE_LINES`].
const MAX_FN_LINES: usize = 80;

/// Product files over [`MAX_FILE_LINES`] when the limit came, each at most
/// the size it had (path under `src/`, lines): the redesign shrinks them.
/// None may grow, none may join, and one back under the limit leaves the
/// list (the failure message prints the list as it stands).
const FILES_OVER: &[(&str, usize)] = &[];

/// Functions over [`MAX_FN_LINES`] when the limit came, as
/// [`FILES_OVER`] (path, name, lines).
const FNS_OVER: &[(&str, &str, usize)] = &[];

/// The functions of a rustfmt-formatted product text with a body: (name,
/// first line, lines from the signature's first line to the closing brace).
/// rustfmt closes a body with a brace alone at the indent its `fn` opened
/// with, which a nested item's never is.
fn functions(text: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = outside_tests(text).into_iter().map(|(_, l)| l).collect();
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

/// Lines of product code: outside the top-level `#[cfg(test)]` items.
fn file_lines(text: &str) -> usize {
    outside_tests(text).len()
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
