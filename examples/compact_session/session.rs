//! The generated coding-agent session of the `compact_session` example:
//! deterministic requests, plans, tool calls and realistic tool output.

use context_assembler::compact::{Content, Msg};
use context_assembler::vocab::Role;
use context_assembler::workload::Rng;
use serde_json::json;

mod output;

use output::{
    bench_output, build_output, diff_output, file_text, grep_output, inserted_line, numbered, test_output,
};

/// One user request and what working on it touches.
struct Task {
    /// What the user asks.
    ask: &'static str,
    /// The file changed, its test file, and one more read along the way.
    files: [&'static str; 3],
    /// The command that checks the work.
    test: &'static str,
    /// The identifier the work is about.
    symbol: &'static str,
    /// What the assistant reports when done.
    done: &'static str,
    /// The pending-work sentence that closes the report.
    next: &'static str,
}

const TASKS: &[Task] = &[
    Task {
        ask: "Fix the failing test in src/parser/lexer.rs: `lexes_escaped_quotes` broke after yesterday's \
              refactor.",
        files: ["src/parser/lexer.rs", "tests/lexer.rs", "src/parser/token.rs"],
        test: "cargo test --test lexer",
        symbol: "lex_string",
        done: "The lexer now consumes the backslash before it looks for the closing quote, so \
               `lexes_escaped_quotes` passes again.",
        next: "Next I will add a regression test for a string that ends in an escaped backslash.",
    },
    Task {
        ask: "Next: add a --json flag to `minilang check` so CI can parse the diagnostics.",
        files: ["src/cli.rs", "tests/cli.rs", "src/report.rs"],
        test: "cargo test --test cli",
        symbol: "print_diagnostics",
        done: "`minilang check --json` prints one JSON object per diagnostic (file, line, column, severity, \
               message) and keeps the human output as the default.",
        next: "TODO: document the JSON fields in docs/cli.md.",
    },
    Task {
        ask: "The Windows CI job fails in src/fs/walk.rs: paths come back with backslashes and the snapshot \
              tests break.",
        files: ["src/fs/walk.rs", "tests/walk.rs", "src/fs/mod.rs"],
        test: "cargo test --test walk",
        symbol: "relative_path",
        done: "`relative_path` now joins components with `/` on every platform, and the snapshots compare \
               normalized paths.",
        next: "Pending: the Windows job itself has not run on this branch yet.",
    },
    Task {
        ask: "Bump serde to 1.0.210 and make sure Cargo.toml and Cargo.lock agree.",
        files: ["Cargo.toml", "Cargo.lock", "src/config.rs"],
        test: "cargo build --locked",
        symbol: "Deserialize",
        done: "serde and serde_derive are at 1.0.210 in Cargo.toml and Cargo.lock; `cargo build --locked` \
               is clean.",
        next: "Next I will check whether toml 0.8 still needs the `preserve_order` feature.",
    },
    Task {
        ask: "Add a criterion benchmark for the lexer in benches/lex.rs with 1k, 10k and 100k line inputs.",
        files: ["benches/lex.rs", "Cargo.toml", "src/parser/lexer.rs"],
        test: "cargo bench --bench lex -- --quick",
        symbol: "bench_lex",
        done: "benches/lex.rs measures the lexer over 1k, 10k and 100k lines; 10k lines take about 1.9 ms.",
        next: "TODO: the 100k input is generated on every run; cache it in target/ if the bench gets slow.",
    },
    Task {
        ask: "Refactor src/parser/ast.rs so binary operands are Box<Expr> instead of indices into the arena.",
        files: ["src/parser/ast.rs", "tests/parser.rs", "src/parser/parse.rs"],
        test: "cargo test parser::",
        symbol: "BinaryOp",
        done: "`Expr::Binary` holds `Box<Expr>` operands now; the arena is gone from the parser and the \
               evaluator walks the tree directly.",
        next: "Remaining: src/fmt/printer.rs still has a helper that takes arena indices.",
    },
    Task {
        ask: "clippy complains about needless_borrow in src/eval/env.rs; clean those up without changing \
              behaviour.",
        files: ["src/eval/env.rs", "tests/eval.rs", "src/eval/mod.rs"],
        test: "cargo clippy --all-targets -- -D warnings",
        symbol: "lookup",
        done: "The seven needless borrows in src/eval/env.rs are gone and clippy is clean with -D warnings.",
        next: "Next I will look at the two `clippy::too_many_arguments` allows in src/eval/interp.rs.",
    },
    Task {
        ask: "Make the parser recover after a bad statement instead of stopping at the first error.",
        files: ["src/parser/parse.rs", "tests/parser.rs", "src/parser/error.rs"],
        test: "cargo test --test parser recovery",
        symbol: "synchronize",
        done: "After an error the parser skips to the next `;` or `}` and keeps going, so one file can \
               report several diagnostics.",
        next: "TODO: cap the diagnostics per file, or a binary file produces thousands.",
    },
    Task {
        ask: "Write docs for the config file format in docs/config.md, with an example minilang.toml.",
        files: ["docs/config.md", "src/config.rs", "examples/minilang.toml"],
        test: "cargo test --doc",
        symbol: "Config",
        done: "docs/config.md documents every key of minilang.toml with its default, and the example file \
               is checked by a doc test.",
        next: "Next I will link the page from README.md.",
    },
    Task {
        ask: "The REPL panics on Ctrl-D in src/repl.rs; it should exit cleanly with status 0.",
        files: ["src/repl.rs", "tests/repl.rs", "src/main.rs"],
        test: "cargo test --test repl",
        symbol: "read_line",
        done: "End of input now ends the REPL loop and `main` returns `ExitCode::SUCCESS`; the new test \
               pipes an empty stdin.",
        next: "Follow-up: Ctrl-C during a long evaluation still kills the whole process.",
    },
    Task {
        ask: "Add `let` destructuring for tuples: `let (a, b) = pair;`.",
        files: ["src/parser/parse.rs", "tests/eval.rs", "src/eval/interp.rs"],
        test: "cargo test destructuring",
        symbol: "parse_let",
        done: "`let (a, b) = pair;` parses into a tuple pattern and binds both names; arity mismatches are \
               runtime errors with the pattern's span.",
        next: "TODO: nested patterns like `let ((a, b), c)` parse but are not bound yet.",
    },
    Task {
        ask: "Error messages should show the source line with a caret under the column, like rustc does.",
        files: ["src/report.rs", "tests/cli.rs", "src/parser/error.rs"],
        test: "cargo test --test cli snapshots",
        symbol: "render_diagnostic",
        done: "Diagnostics print the offending line with a gutter and a `^` run under the span; the CLI \
               snapshots are updated.",
        next: "Next I will handle tabs in the source line, which currently shift the caret.",
    },
    Task {
        ask: "Integer overflow in src/eval/interp.rs should be a runtime error, not a panic.",
        files: ["src/eval/interp.rs", "tests/eval.rs", "src/eval/value.rs"],
        test: "cargo test overflow",
        symbol: "checked_add",
        done: "Arithmetic uses checked operations and reports `integer overflow` at the operator's span.",
        next: "Pending: division by zero still panics in the same way.",
    },
    Task {
        ask: "Speed up lookups in src/eval/env.rs; the fib(30) benchmark got 40% slower last week.",
        files: ["src/eval/env.rs", "benches/eval.rs", "src/eval/interp.rs"],
        test: "cargo bench --bench eval -- fib",
        symbol: "Scope",
        done: "Scopes resolve names to slots at parse time, so lookups index a Vec; fib(30) is back to \
               412 ms.",
        next: "Next I will check that closures still capture by slot correctly.",
    },
    Task {
        ask: "Add a `--max-errors N` flag to `minilang check`, default 20.",
        files: ["src/cli.rs", "tests/cli.rs", "src/report.rs"],
        test: "cargo test --test cli max_errors",
        symbol: "Args",
        done: "`--max-errors` stops reporting after N diagnostics and prints how many were suppressed.",
        next: "TODO: make `--max-errors 0` mean unlimited.",
    },
    Task {
        ask: "The formatter drops comments at the end of a block in src/fmt/printer.rs.",
        files: ["src/fmt/printer.rs", "tests/fmt.rs", "src/parser/lexer.rs"],
        test: "cargo test --test fmt",
        symbol: "trailing_comments",
        done: "Comments before a closing brace are attached to the block and printed before the `}`.",
        next: "Next I will run the formatter over examples/ to look for other lost comments.",
    },
    Task {
        ask: "Run the whole test suite and fix whatever is still red before I cut 0.4.0.",
        files: ["tests/eval.rs", "tests/cli.rs", "CHANGELOG.md"],
        test: "cargo test --all-targets",
        symbol: "ignore",
        done: "All 214 tests pass; the one ignored test is the slow fuzz corpus run.",
        next: "Remaining: the CHANGELOG entry and the version bump.",
    },
    Task {
        ask: "Update CHANGELOG.md for 0.4.0 and bump the version in Cargo.toml.",
        files: ["CHANGELOG.md", "Cargo.toml", "src/main.rs"],
        test: "cargo build --release",
        symbol: "VERSION",
        done: "CHANGELOG.md has a 0.4.0 section and Cargo.toml says version 0.4.0; `minilang --version` \
               agrees.",
        next: "Next I will tag v0.4.0 once you confirm.",
    },
    Task {
        ask: "Add string interpolation: \"hello {name}\" should evaluate `name` in the current scope.",
        files: ["src/parser/lexer.rs", "tests/lexer.rs", "src/eval/interp.rs"],
        test: "cargo test interpolation",
        symbol: "lex_interpolation",
        done: "The lexer splits interpolated strings into parts and the evaluator concatenates their values.",
        next: "TODO: `{{` should produce a literal brace.",
    },
    Task {
        ask: "Make `minilang fmt --check` exit with status 1 when a file would change.",
        files: ["src/cli.rs", "tests/cli.rs", "src/fmt/mod.rs"],
        test: "cargo test --test cli fmt_check",
        symbol: "run_fmt",
        done: "`fmt --check` lists the files that would change and exits with status 1, without writing them.",
        next: "Next I will add the check to CI.",
    },
];

const SYSTEM_PROMPT: &str = "You are minilang-agent, a coding agent working in the minilang repository, a \
small interpreted language written in Rust (lexer, parser, tree-walking evaluator, formatter and CLI).

Tools: read_file(path), bash(command), edit_file(path, old_str, new_str), grep(pattern, path).

Conventions:
- Keep changes minimal and focused on the request; do not reformat unrelated code.
- Run the relevant tests after every change, and the whole suite before saying a task is done.
- Errors are values: no unwrap() or expect() outside tests.
- Every public item has a doc comment; every bug fix comes with a regression test named after what it guards.
- When you finish a task, say what changed and what is left, in two or three sentences.";

/// What the assistant does in one round of tool use.
#[derive(Debug, Clone, Copy)]
enum Call {
    Read(&'static str),
    Grep,
    Edit(&'static str),
    Test { pass: bool },
    Build { pass: bool },
    Diff,
}

#[derive(Debug, Clone, Copy)]
enum Phase {
    /// The user asks for the next task.
    Request,
    /// The assistant works on it: the round, and the rounds left.
    Work { round: usize, left: usize },
    /// The assistant reports what it did and what is next.
    Wrap,
}

/// A deterministic agent session, generated a message at a time.
pub struct Agent {
    rng: Rng,
    messages: usize,
    calls: usize,
    task: usize,
    phase: Phase,
}

impl Agent {
    pub fn new(seed: u64) -> Self {
        Agent {
            rng: Rng::new(seed),
            messages: 0,
            calls: 0,
            task: 0,
            phase: Phase::Request,
        }
    }

    /// The next `n` messages; the first batch starts with the system
    /// prompt. A tool call and its results always land in the same batch.
    pub fn generate(&mut self, n: usize) -> Vec<Msg> {
        let mut out = Vec::with_capacity(n);
        if self.messages == 0 && n > 0 {
            self.push(&mut out, Role::System, vec![Content::text(SYSTEM_PROMPT)]);
        }
        while out.len() < n {
            self.step(n - out.len(), &mut out);
        }
        out
    }

    fn push(&mut self, out: &mut Vec<Msg>, role: Role, content: Vec<Content>) {
        out.push(Msg {
            id: format!("m{:03}", self.messages),
            role,
            content,
        });
        self.messages += 1;
    }

    /// Appends at most `room` messages.
    fn step(&mut self, room: usize, out: &mut Vec<Msg>) {
        let task = &TASKS[self.task % TASKS.len()];
        match self.phase {
            Phase::Request => {
                self.push(out, Role::User, vec![Content::text(task.ask)]);
                let left = 4 + self.rng.below(6);
                self.phase = Phase::Work { round: 0, left };
            }
            Phase::Work { .. } if room < 2 => self.phase = Phase::Wrap,
            Phase::Work { round, left } => {
                let calls = self.plan(task, round, left, room);
                self.work(task, &calls, out);
                self.phase = if left > 1 {
                    Phase::Work {
                        round: round + 1,
                        left: left - 1,
                    }
                } else {
                    Phase::Wrap
                };
            }
            Phase::Wrap => {
                let mut text = format!("{} {}", task.done, task.next);
                if self.rng.below(3) == 0 {
                    text.push(' ');
                    text.push_str(self.rng.pick(ASIDES));
                }
                self.push(out, Role::Assistant, vec![Content::Text(text)]);
                self.task += 1;
                self.phase = Phase::Request;
            }
        }
    }

    /// The calls of one round: the first round looks around (sometimes two
    /// reads at once), the last one runs the tests and passes.
    fn plan(&mut self, task: &Task, round: usize, left: usize, room: usize) -> Vec<Call> {
        let [main, test, other] = task.files;
        if left == 1 {
            return vec![Call::Test { pass: true }];
        }
        let two = room >= 3 && self.rng.below(2) == 0;
        if round == 0 {
            return match (two, self.rng.below(2)) {
                (true, 0) => vec![Call::Read(main), Call::Read(test)],
                (true, _) => vec![Call::Grep, Call::Read(main)],
                (false, 0) => vec![Call::Read(main)],
                (false, _) => vec![Call::Grep],
            };
        }
        if two {
            return vec![Call::Read(other), Call::Grep];
        }
        match self.rng.below(7) {
            0 => vec![Call::Read(other)],
            1 => vec![Call::Read(main)],
            2 | 3 => vec![Call::Edit(if self.rng.below(3) == 0 { test } else { main })],
            4 => vec![Call::Test {
                pass: self.rng.below(2) == 0,
            }],
            5 => vec![Call::Build {
                pass: self.rng.below(2) == 0,
            }],
            _ => vec![Call::Diff],
        }
    }

    /// One assistant message making `calls`, then one tool message per call.
    fn work(&mut self, task: &Task, calls: &[Call], out: &mut Vec<Msg>) {
        let mut content = Vec::with_capacity(calls.len() + 1);
        if calls.len() > 1 || self.rng.below(4) != 0 {
            content.push(Content::Text(self.thought(task, calls)));
        }
        let mut results = Vec::with_capacity(calls.len());
        for &call in calls {
            let id = format!("toolu_{:03}", self.calls);
            self.calls += 1;
            let (name, input, output, is_error) = self.run(task, call);
            content.push(Content::ToolUse {
                id: id.clone(),
                name: name.into(),
                input,
            });
            results.push(Content::ToolResult {
                tool_use_id: id,
                output,
                is_error,
            });
        }
        self.push(out, Role::Assistant, content);
        for r in results {
            self.push(out, Role::Tool, vec![r]);
        }
    }

    /// The sentence the assistant says before its calls.
    fn thought(&mut self, task: &Task, calls: &[Call]) -> String {
        let [main, test, _] = task.files;
        let symbol = task.symbol;
        if let [Call::Read(a), Call::Read(b)] = calls {
            return format!("I'll read {a} and {b} together to see the code and what the tests expect.");
        }
        if calls.len() > 1 {
            return format!(
                "Reading the surrounding code and searching for every use of `{symbol}` at once."
            );
        }
        let options: [String; 3] = match calls.first() {
            Some(Call::Read(path)) => [
                format!("Let me read {path} to see how `{symbol}` is handled."),
                format!("I'll open {path} first."),
                format!("Before changing anything I want to see {path}."),
            ],
            Some(Call::Grep) => [
                format!("Searching for every use of `{symbol}` before changing it."),
                format!("Let me find where `{symbol}` is defined and called."),
                format!("I'll grep for `{symbol}` to see how far the change reaches."),
            ],
            Some(Call::Edit(path)) => [
                format!(
                    "The problem is in `{symbol}`: it returns before the last span is pushed. Fixing it in {path}."
                ),
                format!("I'll make the change in {path}; the rest of the module can stay as it is."),
                format!("Updating {path}. Next I will run `{}` to confirm.", task.test),
            ],
            Some(Call::Test { .. }) => [
                format!("Running `{}` to check.", task.test),
                format!("Next I will run the tests in {test} to confirm the fix."),
                format!("Let me run `{}` now that {main} compiles.", task.test),
            ],
            Some(Call::Build { .. }) => [
                "Let me make sure everything still compiles.".to_owned(),
                "Building before the tests, so a compile error does not hide in test output.".to_owned(),
                format!("Checking that the change to {main} builds."),
            ],
            Some(Call::Diff) | None => [
                "Let me look at the diff so far.".to_owned(),
                "Reviewing what changed before running the tests.".to_owned(),
                format!("Checking the diff: only {main} and {test} should have changed."),
            ],
        };
        let i = self.rng.below(options.len());
        options[i].clone()
    }

    /// Runs one call: (tool name, JSON input, output, is_error).
    fn run(&mut self, task: &Task, call: Call) -> (&'static str, String, String, bool) {
        let rng = &mut self.rng;
        match call {
            Call::Read(path) => {
                let missing = path.starts_with("examples/") && rng.below(2) == 0;
                let output = if missing {
                    format!("Error: {path}: No such file or directory (os error 2)")
                } else {
                    numbered(&file_text(rng, path, task.symbol), 1)
                };
                ("read_file", json!({ "path": path }).to_string(), output, missing)
            }
            Call::Grep => {
                let input = json!({ "pattern": task.symbol, "path": "src", "glob": "*.rs" });
                ("grep", input.to_string(), grep_output(rng, task), false)
            }
            Call::Edit(path) => {
                let body = file_text(rng, path, task.symbol);
                let lines: Vec<&str> = body.lines().collect();
                let at = rng.below(lines.len().saturating_sub(12).max(1));
                let old = lines[at..(at + 3).min(lines.len())].join("\n");
                let new = format!("{old}\n{}", inserted_line(rng, path));
                let input = json!({ "path": path, "old_str": old, "new_str": new });
                if rng.below(8) == 0 {
                    let output = format!(
                        "<tool_use_error>String to replace not found in file.\nString: {old}</tool_use_error>"
                    );
                    return ("edit_file", input.to_string(), output, true);
                }
                let end = (at + 30 + rng.below(30)).min(lines.len());
                let snippet = numbered(&lines[at..end].join("\n"), at + 1);
                let output = format!(
                    "The file {path} has been updated. Here's the result of running `cat -n` on a snippet \
                     of the edited file:\n{snippet}"
                );
                ("edit_file", input.to_string(), output, false)
            }
            Call::Test { pass } => {
                let input = json!({ "command": task.test, "timeout": 120_000 });
                let (output, pass) = if task.test.starts_with("cargo test") {
                    (test_output(rng, task, pass), pass)
                } else if task.test.starts_with("cargo bench") {
                    (bench_output(rng, task), true)
                } else {
                    (build_output(rng, task, task.test, pass), pass)
                };
                ("bash", input.to_string(), output, !pass)
            }
            Call::Build { pass } => {
                let command = if rng.below(2) == 0 {
                    "cargo build"
                } else {
                    "cargo clippy --all-targets -- -D warnings"
                };
                let input = json!({ "command": command });
                (
                    "bash",
                    input.to_string(),
                    build_output(rng, task, command, pass),
                    !pass,
                )
            }
            Call::Diff => {
                let input = json!({ "command": format!("git diff -- {}", task.files[0]) });
                ("bash", input.to_string(), diff_output(rng, task), false)
            }
        }
    }
}

const ASIDES: &[&str] = &[
    "TODO: the error path still allocates a String per call; worth a look later.",
    "Follow-up: the CHANGELOG needs an entry for this.",
    "I did not touch the formatter; it has its own tests.",
    "Remaining: nothing else fails locally.",
    "Pending review: the new test takes 0.4 s, the slowest in the suite.",
];
