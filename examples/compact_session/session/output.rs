//! The text the generated session's tools answer with: source files in the
//! repository's languages, grep, test, bench and build output, diffs.

use context_assembler::workload::Rng;

use super::Task;

/// Lines of context a generated diff shows.
const DIFF_CONTEXT: usize = 30;

/// A line an edit inserts into `path`, in that file's language.
pub(super) fn inserted_line(rng: &mut Rng, path: &str) -> &'static str {
    if path.ends_with(".toml") {
        rng.pick(&[
            "serde = { version = \"1.0.210\", features = [\"derive\"] }",
            "version = \"0.4.0\"",
        ])
    } else if path.ends_with(".md") {
        rng.pick(&[
            "- `check.max_errors = 0` disables the limit.",
            "- Diagnostics show the source line with a caret under the span.",
        ])
    } else if path.starts_with("tests/") || path.starts_with("benches/") {
        rng.pick(&[
            "    assert_eq!(out.diagnostics.len(), 1, \"{out:?}\");",
            "    assert!(out.stdout.ends_with('\\n'));",
        ])
    } else {
        rng.pick(&[
            "        debug_assert!(self.pos <= self.src.len());",
            "        // The closing quote is consumed by the caller.",
            "        self.diagnostics.truncate(MAX_DIAGNOSTICS);",
            "        let span = Span::new(start, self.pos);",
        ])
    }
}

/// Sizes, in bytes, a generated file or output is filled up to: drawn
/// from a narrow range so that any 40 messages weigh about the same.
const SOURCE_BYTES: (usize, usize) = (3_500, 6_000);
const TEST_SOURCE_BYTES: (usize, usize) = (2_500, 4_500);
const GREP_BYTES: (usize, usize) = (1_200, 2_400);

/// A number in `lo..hi`.
fn between(rng: &mut Rng, (lo, hi): (usize, usize)) -> usize {
    lo + rng.below(hi - lo)
}

/// `text` with `cat -n` line numbers starting at `first`.
pub(super) fn numbered(text: &str, first: usize) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 4);
    for (i, line) in text.lines().enumerate() {
        out.push_str(&format!("{:>6}\t{line}\n", first + i));
    }
    out
}

/// Plausible contents of `path`.
pub(super) fn file_text(rng: &mut Rng, path: &str, symbol: &str) -> String {
    match path.rsplit_once('.').map(|(_, ext)| ext) {
        Some("rs") if path.starts_with("tests/") || path.starts_with("benches/") => test_source(rng, path),
        Some("rs") => rust_source(rng, path, symbol),
        Some("toml") if path.ends_with("Cargo.toml") => CARGO_TOML.to_owned(),
        Some("toml") => MINILANG_TOML.to_owned(),
        Some("lock") => cargo_lock(rng),
        _ => markdown(rng, path),
    }
}

fn stem(path: &str) -> &str {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.split('.').next().unwrap_or(name)
}

fn camel(s: &str) -> String {
    s.split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

const VERBS: &[&str] = &[
    "parse", "lex", "eval", "resolve", "emit", "check", "bind", "skip", "expect", "peek", "advance", "render",
];
const NOUNS: &[&str] = &[
    "token", "expr", "stmt", "block", "number", "ident", "scope", "path", "span", "comment", "args",
    "pattern",
];
const FIELDS: &[&str] = &["tokens", "scopes", "spans", "diagnostics", "pending", "names"];
const KINDS: &[&str] = &[
    "LParen", "RParen", "LBrace", "RBrace", "Ident", "Number", "Str", "Let", "Fn", "Return", "Semi", "Comma",
];
const TYPES: &[&str] = &["Token", "Expr", "Stmt", "Span", "Value", "Symbol"];

/// A Rust module with a struct and a few methods, one of them `symbol`
/// when it is an identifier.
fn rust_source(rng: &mut Rng, path: &str, symbol: &str) -> String {
    let ty = camel(stem(path));
    let err = format!("{ty}Error");
    let mut s = format!(
        "//! The {} of minilang.\n\nuse std::collections::HashMap;\nuse std::fmt;\n\n\
         use crate::parser::token::{{Span, Token, TokenKind}};\nuse crate::report::Diagnostic;\n\n\
         /// Errors of [`{ty}`].\n#[derive(Debug, Clone, PartialEq, Eq)]\npub enum {err} {{\n    \
         /// An unexpected token.\n    Unexpected {{ at: Span, found: TokenKind }},\n    \
         /// Input ended early.\n    Eof {{ at: Span }},\n}}\n\n\
         /// {ty} state for one source file.\n#[derive(Debug)]\npub struct {ty}<'src> {{\n    \
         src: &'src str,\n    pos: usize,\n    depth: usize,\n    tokens: Vec<Token>,\n    \
         scopes: Vec<HashMap<String, usize>>,\n    spans: Vec<Span>,\n    diagnostics: Vec<Diagnostic>,\n}}\n\n\
         impl<'src> {ty}<'src> {{\n",
        stem(path).replace('_', " ")
    );
    let bytes = between(rng, SOURCE_BYTES);
    let named = symbol.chars().all(|c| c.is_ascii_lowercase() || c == '_');
    let mut first = true;
    while s.len() < bytes {
        let name = if first && named {
            symbol.to_owned()
        } else {
            format!("{}_{}", rng.pick(VERBS), rng.pick(NOUNS))
        };
        if !first {
            s.push('\n');
        }
        s.push_str(&method(rng, &name, &err));
        first = false;
    }
    s.push_str("}\n");
    if rng.below(2) == 0 {
        s.push_str(&format!(
            "\nimpl fmt::Display for {err} {{\n    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {{\n        \
             match self {{\n            {err}::Unexpected {{ found, .. }} => write!(f, \"unexpected {{found:?}}\"),\n            \
             {err}::Eof {{ .. }} => f.write_str(\"unexpected end of input\"),\n        }}\n    }}\n}}\n"
        ));
    }
    s
}

fn method(rng: &mut Rng, name: &str, err: &str) -> String {
    let t = rng.pick(TYPES);
    let field = rng.pick(FIELDS);
    let (k1, k2) = (rng.pick(KINDS), rng.pick(KINDS));
    let noun = rng.pick(NOUNS);
    match rng.below(4) {
        0 => format!(
            "    /// Reads one {noun} starting at the cursor.\n    pub fn {name}(&mut self) -> Result<{t}, {err}> {{\n        \
             let start = self.pos;\n        while let Some(c) = self.src[self.pos..].chars().next() {{\n            \
             if !(c.is_alphanumeric() || c == '_') {{\n                break;\n            }}\n            \
             self.pos += c.len_utf8();\n        }}\n        if self.pos == start {{\n            \
             return Err({err}::Eof {{ at: Span::new(start, start) }});\n        }}\n        \
             Ok({t}::new(&self.src[start..self.pos], Span::new(start, self.pos)))\n    }}\n"
        ),
        1 => format!(
            "    /// The innermost binding of `name`, if any.\n    fn {name}(&self, name: &str) -> Option<usize> {{\n        \
             self.scopes\n            .iter()\n            .rev()\n            .find_map(|scope| scope.get(name))\n            \
             .copied()\n    }}\n"
        ),
        2 => format!(
            "    /// Handles one token, tracking nesting depth.\n    pub fn {name}(&mut self, token: Token) {{\n        \
             match token.kind {{\n            TokenKind::{k1} => self.{field}.push(token.span.into()),\n            \
             TokenKind::{k2} | TokenKind::RBrace => {{\n                \
             self.depth = self.depth.saturating_sub(1);\n                \
             self.{field}.truncate(self.depth);\n            }}\n            \
             _ => self.diagnostics.push(Diagnostic::error(token.span, \"unexpected {noun}\")),\n        }}\n    }}\n"
        ),
        _ => format!(
            "    /// Parses a comma-separated list up to the closing token.\n    \
             fn {name}(&mut self) -> Result<Vec<{t}>, {err}> {{\n        \
             let open = self.expect(TokenKind::{k1})?;\n        let mut items = Vec::new();\n        loop {{\n            \
             if self.eat(TokenKind::{k2}) {{\n                break;\n            }}\n            \
             items.push(self.parse_{noun}()?);\n            if !self.eat(TokenKind::Comma) {{\n                \
             self.expect(TokenKind::{k2})?;\n                break;\n            }}\n        }}\n        \
             self.spans.push(open.span);\n        Ok(items)\n    }}\n"
        ),
    }
}

const TEST_NAMES: &[&str] = &[
    "lexes_identifiers",
    "lexes_numbers_with_underscores",
    "lexes_escaped_quotes",
    "parses_nested_calls",
    "reports_unterminated_string",
    "recovers_after_bad_statement",
    "json_output_is_one_object_per_line",
    "check_exits_nonzero_on_error",
    "walk_returns_forward_slashes",
    "formats_trailing_comments",
    "overflow_is_a_runtime_error",
    "destructures_tuples",
    "repl_exits_on_eof",
    "interpolates_names",
    "max_errors_suppresses_the_rest",
    "fmt_check_exits_one_on_change",
];

const SNIPPETS: &[&str] = &[
    "let x = 1 + 2 * 3;",
    "fn add(a, b) { return a + b; }",
    "let s = \"a\\\"b\";",
    "let (a, b) = pair;",
    "print(\"hello {name}\");",
    "let n = 9223372036854775807 + 1;",
    "if x { y } // trailing",
];

/// An integration test file (or a bench) with a few cases.
fn test_source(rng: &mut Rng, path: &str) -> String {
    let module = stem(path);
    let mut s = format!(
        "//! Integration tests for the {module} stage, through the public API.\n\n\
         use minilang::{{Diagnostic, Output}};\n\nfn run(src: &str) -> Output {{\n    \
         minilang::run_str(src).unwrap_or_else(|e| panic!(\"{{src}}: {{e}}\"))\n}}\n"
    );
    let bytes = between(rng, TEST_SOURCE_BYTES);
    while s.len() < bytes {
        let name = rng.pick(TEST_NAMES);
        let src = rng.pick(SNIPPETS);
        let n = rng.below(4);
        s.push_str(&format!(
            "\n#[test]\nfn {name}() {{\n    let src = r#\"{src}\"#;\n    let out = run(src);\n    \
             assert_eq!(out.diagnostics.len(), {n}, \"{{:?}}\", out.diagnostics);\n    \
             assert!(out.diagnostics.iter().all(|d: &Diagnostic| d.span.end <= src.len()));\n}}\n"
        ));
    }
    s
}

const CARGO_TOML: &str = r#"[package]
name = "minilang"
version = "0.3.2"
edition = "2021"
rust-version = "1.74"
description = "A small interpreted language: lexer, parser, tree-walking evaluator and formatter"
license = "MIT OR Apache-2.0"
repository = "https://github.com/example/minilang"

[dependencies]
clap = { version = "4.5", features = ["derive"] }
serde = { version = "1.0.197", features = ["derive"] }
serde_json = "1.0.114"
toml = "0.8"
rustyline = "14"
unicode-ident = "1"

[dev-dependencies]
criterion = "0.5"
insta = { version = "1.36", features = ["json"] }
tempfile = "3"

[[bench]]
name = "lex"
harness = false

[[bench]]
name = "eval"
harness = false

[profile.release]
debug = "line-tables-only"
"#;

const MINILANG_TOML: &str = r#"# Example minilang.toml
[check]
max_errors = 20
warnings_as_errors = false

[fmt]
indent = 4
max_width = 100
trailing_commas = "always"

[repl]
history_file = "~/.minilang_history"
prompt = "ml> "
"#;

/// Dependencies, as Cargo.lock and build output list them.
const CRATES: &[(&str, &str)] = &[
    ("anstream", "0.6.13"),
    ("clap", "4.5.4"),
    ("clap_builder", "4.5.2"),
    ("clap_derive", "4.5.4"),
    ("criterion", "0.5.1"),
    ("insta", "1.38.0"),
    ("itoa", "1.0.11"),
    ("proc-macro2", "1.0.79"),
    ("quote", "1.0.35"),
    ("rustyline", "14.0.0"),
    ("ryu", "1.0.17"),
    ("serde", "1.0.197"),
    ("serde_derive", "1.0.197"),
    ("serde_json", "1.0.115"),
    ("syn", "2.0.58"),
    ("toml", "0.8.12"),
    ("unicode-ident", "1.0.12"),
];

fn cargo_lock(rng: &mut Rng) -> String {
    let mut s = String::from(
        "# This file is automatically @generated by Cargo.\n# It is not intended for manual editing.\nversion = 3\n",
    );
    for (name, version) in CRATES {
        let checksum: String = (0..4).map(|_| format!("{:016x}", rng.next_u64())).collect();
        s.push_str(&format!(
            "\n[[package]]\nname = \"{name}\"\nversion = \"{version}\"\n\
             source = \"registry+https://github.com/rust-lang/crates.io-index\"\nchecksum = \"{checksum}\"\n"
        ));
    }
    s
}

fn markdown(rng: &mut Rng, path: &str) -> String {
    const PARAGRAPHS: &[&str] = &[
        "minilang reads its settings from `minilang.toml` in the current directory, then from \
         `$XDG_CONFIG_HOME/minilang/config.toml`. Command-line flags override both.",
        "`check.max_errors` (integer, default 20): stop reporting after this many diagnostics per run. \
         The count of suppressed diagnostics is printed at the end.",
        "`fmt.indent` (integer, default 4) and `fmt.max_width` (integer, default 100) control the \
         formatter. `fmt.trailing_commas` is one of `always`, `never` or `multiline`.",
        "### Fixed\n\n- The lexer accepts escaped quotes inside strings again.\n- `minilang check` no \
         longer panics on an empty file.\n- Paths in diagnostics use `/` on Windows.",
        "### Added\n\n- `minilang check --json` prints machine-readable diagnostics.\n- `--max-errors N`.\n\
         - Tuple destructuring in `let`.\n- String interpolation.",
    ];
    let title = camel(stem(path));
    let mut s = format!("# {title}\n");
    for _ in 0..3 + rng.below(3) {
        s.push('\n');
        s.push_str(rng.pick(PARAGRAPHS));
        s.push('\n');
    }
    s
}

pub(super) fn grep_output(rng: &mut Rng, task: &Task) -> String {
    let symbol = task.symbol;
    let patterns = [
        format!("    pub fn {symbol}(&mut self) -> Result<Token, Error> {{"),
        format!("        let token = self.{symbol}()?;"),
        format!("            Some(c) => self.{symbol}(c, start),"),
        format!("    // `{symbol}` must not allocate on the hot path."),
        format!("        .map(|item| {symbol}(item, &env))"),
        format!("use crate::parser::{symbol};"),
        format!("    assert_eq!({symbol}(\"a\\\"b\"), Ok(expected));"),
    ];
    let files = [
        task.files[0],
        task.files[2],
        "src/parser/parse.rs",
        "src/eval/interp.rs",
        "src/lib.rs",
    ];
    let bytes = between(rng, GREP_BYTES);
    let mut out = String::new();
    while out.len() < bytes {
        let file = files[rng.below(files.len())];
        let line = 10 + rng.below(400);
        out.push_str(&format!(
            "{file}:{line}:{}\n",
            patterns[rng.below(patterns.len())]
        ));
    }
    out
}

pub(super) fn test_output(rng: &mut Rng, task: &Task, pass: bool) -> String {
    // Integration tests run from their file; anything else from the library's unit tests.
    let (file, binary, rerun) = match task.files[1] {
        f if f.starts_with("tests/") => (f, stem(f), format!("--test {}", stem(f))),
        _ => (task.files[0], "minilang", "--lib".to_owned()),
    };
    let running = if file.starts_with("tests/") {
        file.to_owned()
    } else {
        "unittests src/lib.rs".to_owned()
    };
    let hash = rng.next_u64();
    let seconds = 2.0 + rng.below(900) as f64 / 100.0;
    let mut s = format!(
        "   Compiling minilang v0.3.2 (/home/dev/minilang)\n    Finished `test` profile [unoptimized + \
         debuginfo] target(s) in {seconds:.2}s\n     Running {running} (target/debug/deps/{binary}-{hash:016x})\n\n"
    );
    let n = 16 + rng.below(30);
    let failing = if pass { None } else { Some(rng.below(n)) };
    s.push_str(&format!("running {n} tests\n"));
    let names: Vec<&str> = (0..n).map(|_| rng.pick(TEST_NAMES)).collect();
    for (i, name) in names.iter().enumerate() {
        let verdict = if failing == Some(i) { "FAILED" } else { "ok" };
        s.push_str(&format!("test {name}_{i} ... {verdict}\n"));
    }
    let Some(f) = failing else {
        s.push_str(&format!(
            "\ntest result: ok. {n} passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.0{}s\n",
            1 + rng.below(9)
        ));
        return s;
    };
    let name = format!("{}_{f}", names[f]);
    let line = 20 + rng.below(200);
    s.push_str(&format!(
        "\nfailures:\n\n---- {name} stdout ----\n\nthread '{name}' panicked at {file}:{line}:5:\n\
         assertion `left == right` failed: [Diagnostic {{ severity: Error, span: 4..9, message: \"unterminated \
         string\" }}]\n  left: 1\n right: 0\nnote: run with `RUST_BACKTRACE=1` environment variable to display a \
         backtrace\n\n\nfailures:\n    {name}\n\ntest result: FAILED. {} passed; 1 failed; 0 ignored; 0 measured; \
         0 filtered out; finished in 0.03s\n\nerror: test failed, to rerun pass `{rerun}`\n",
        n - 1
    ));
    s
}

/// Criterion's report for a few input sizes.
pub(super) fn bench_output(rng: &mut Rng, task: &Task) -> String {
    let bench = stem(
        task.files
            .iter()
            .find(|f| f.starts_with("benches/"))
            .unwrap_or(&"benches/lex.rs"),
    );
    let hash = rng.next_u64();
    let mut s = format!(
        "   Compiling minilang v0.3.2 (/home/dev/minilang)\n    Finished `bench` profile [optimized] target(s) \
         in {}.{}s\n     Running benches/{bench}.rs (target/release/deps/{bench}-{hash:016x})\n\
         Gnuplot not found, using plotters backend\n",
        30 + rng.below(30),
        rng.below(10)
    );
    for (size, micros) in [("1k", 180), ("10k", 1_900), ("100k", 19_500)] {
        let t = micros + rng.below(micros / 10 + 1);
        let change = rng.below(80);
        s.push_str(&format!(
            "{bench}/{size:<20}time:   [{:.3} ms {:.3} ms {:.3} ms]\n                        change: [-{}.{}% \
             -{}.{}% +0.{}%] (p = 0.0{} < 0.05)\n                        Performance has improved.\n\
             Found {} outliers among 100 measurements ({}.00%)\n  {} (2.00%) high mild\n  1 (1.00%) high severe\n",
            t as f64 * 0.98 / 1000.0,
            t as f64 / 1000.0,
            t as f64 * 1.02 / 1000.0,
            change / 10 + 2,
            change % 10,
            change / 10,
            change % 10,
            rng.below(10),
            1 + rng.below(4),
            3 + rng.below(3),
            3 + rng.below(3),
            2
        ));
    }
    s
}

pub(super) fn build_output(rng: &mut Rng, task: &Task, command: &str, pass: bool) -> String {
    let verb = if command.contains("clippy") {
        "Checking"
    } else {
        "Compiling"
    };
    // A touched Cargo.toml or a new toolchain rebuilds a run of dependencies.
    let mut s = String::new();
    let first = rng.below(CRATES.len());
    for (name, version) in &CRATES[first..] {
        s.push_str(&format!("{verb:>12} {name} v{version}\n"));
    }
    s.push_str(&format!("{verb:>12} minilang v0.3.2 (/home/dev/minilang)\n"));
    if pass {
        s.push_str(&format!(
            "    Finished `dev` profile [unoptimized + debuginfo] target(s) in {}.{:02}s\n",
            1 + rng.below(6),
            rng.below(100)
        ));
        return s;
    }
    let path = task.files[0];
    let line = 40 + rng.below(300);
    let col = 9 + rng.below(30);
    if command.contains("clippy") {
        s.push_str(&format!(
            "error: this expression creates a reference which is immediately dereferenced by the compiler\n  \
             --> {path}:{line}:{col}\n   |\n{line} |         let slot = self.lookup(&name)?;\n   |                    \
                        ^^^^^ help: change this to: `name`\n   |\n   = help: for further information visit \
             https://rust-lang.github.io/rust-clippy/master/index.html#needless_borrow\n   = note: `-D \
             clippy::needless-borrow` implied by `-D warnings`\n\nerror: could not compile `minilang` (lib) due \
             to 1 previous error\n"
        ));
    } else {
        s.push_str(&format!(
            "error[E0308]: mismatched types\n   --> {path}:{line}:{col}\n    |\n{line} |         return \
             Ok(span);\n    |                   -- ^^^^ expected `Token`, found `Span`\n    |                   \
             |\n    |                   arguments to this enum variant are incorrect\n    |\nhelp: the type \
             constructed contains `Span` due to the type of the argument passed\n   --> {path}:{line}:{}\n\n\
             error[E0599]: no method named `{}` found for struct `Parser` in the current scope\n   --> \
             src/parser/parse.rs:{}:14\n    |\n    = help: items from traits can only be used if the trait is \
             in scope\n\nSome errors have detailed explanations: E0308, E0599.\nFor more information about an \
             error, try `rustc --explain E0308`.\nerror: could not compile `minilang` (lib) due to 2 previous \
             errors\n",
            col - 3,
            task.symbol,
            100 + rng.below(300)
        ));
    }
    s
}

pub(super) fn diff_output(rng: &mut Rng, task: &Task) -> String {
    let path = task.files[0];
    let body = file_text(rng, path, task.symbol);
    let lines: Vec<&str> = body.lines().collect();
    let at = rng.below(lines.len().saturating_sub(DIFF_CONTEXT).max(1));
    let hash = index_hash(at, path);
    let first = at + 1;
    let mut s = format!(
        "diff --git a/{path} b/{path}\nindex {hash:07x}..{:07x} 100644\n--- a/{path}\n+++ b/{path}\n\
         @@ -{first},{DIFF_CONTEXT} +{first},{} @@\n",
        hash ^ 0x5a_5a5a,
        DIFF_CONTEXT + 1
    );
    for (i, line) in lines.iter().skip(at).take(DIFF_CONTEXT).enumerate() {
        if i == DIFF_CONTEXT / 2 {
            s.push_str(&format!(
                "-{line}\n+{line} // checked\n+{}\n",
                inserted_line(rng, path)
            ));
        } else {
            s.push_str(&format!(" {line}\n"));
        }
    }
    s
}

/// A stable short hash for a diff's index line.
fn index_hash(at: usize, path: &str) -> u64 {
    path.bytes().fold(at as u64 ^ 0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    }) & 0x0fff_ffff
}
