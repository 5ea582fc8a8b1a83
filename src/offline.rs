//! `context-assembler assemble FILE.json`: one request, no server. Reads the
//! proto3 JSON of an `AssembleRequest` (what grpcurl sends) and prints the
//! messages and a decision table, or the response as JSON; `--jsonl` takes
//! one request per line (offline evaluation, reference cross-checks).

use std::fmt::Write as _;
use std::io::Read as _;
use std::process::ExitCode;

use crate::assemble::{Assembler, Catalog, DEFAULT_CACHE_BYTES};
use crate::config::{AssembleArgs, EXIT_CONFIG, ServeArgs};
use crate::grpc::json::{JsonError, request_from_json, response_to_json};
use crate::prompt::Assembly;

/// Exit code for an unreadable input file (EX_NOINPUT).
const EXIT_NO_INPUT: u8 = 66;
/// Exit code for a request that cannot be assembled (EX_DATAERR).
const EXIT_DATA: u8 = 65;

/// Runs the subcommand.
pub fn assemble(args: &AssembleArgs) -> ExitCode {
    let catalog = match (ServeArgs {
        config: args.config.clone(),
        ..ServeArgs::default()
    })
    .validate()
    {
        Ok(c) => c.catalog,
        Err(e) => {
            eprintln!("context-assembler: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let text = if args.file.as_os_str() == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s).map(|_| s)
    } else {
        std::fs::read_to_string(&args.file)
    };
    let text = match text {
        Ok(t) => t,
        Err(e) => {
            eprintln!("context-assembler: cannot read {}: {e}", args.file.display());
            return ExitCode::from(EXIT_NO_INPUT);
        }
    };
    if args.jsonl {
        print!("{}", run_lines(catalog, &text));
        return ExitCode::SUCCESS;
    }
    match run(catalog, &text, args.json) {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("context-assembler: {e}");
            ExitCode::from(EXIT_DATA)
        }
    }
}

/// Assembles the JSON request `text`; returns what to print.
pub fn run(catalog: Catalog, text: &str, json: bool) -> Result<String, String> {
    let assembler = Assembler::new(catalog, DEFAULT_CACHE_BYTES);
    let assembly = assemble_one(&assembler, text).map_err(|(_, message)| message)?;
    if json {
        return serde_json::to_string_pretty(&response_to_json(assembly))
            .map(|s| s + "\n")
            .map_err(|e| format!("cannot encode the response: {e}"));
    }
    Ok(table(&assembly))
}

/// Why a request failed: a stable code and a message.
type Failure = (&'static str, String);

fn assemble_one(assembler: &Assembler, text: &str) -> Result<Assembly, Failure> {
    let req = request_from_json(text).map_err(|e| match &e {
        JsonError::Syntax(_) => ("INVALID_JSON", e.to_string()),
        JsonError::Invalid(inner) => (inner.code(), e.to_string()),
    })?;
    assembler.assemble(req).map_err(|e| (e.code(), e.to_string()))
}

/// Assembles one JSON request per non-empty line with one warm assembler;
/// returns one JSON line per request.
pub fn run_lines(catalog: Catalog, text: &str) -> String {
    let assembler = Assembler::new(catalog, DEFAULT_CACHE_BYTES);
    let mut out = String::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let value = match assemble_one(&assembler, line) {
            Ok(a) => response_to_json(a),
            Err((code, message)) => serde_json::json!({"error": {"code": code, "message": message}}),
        };
        out.push_str(&value.to_string());
        out.push('\n');
    }
    out
}

fn table(a: &Assembly) -> String {
    let mut out = String::new();
    for (i, m) in a.messages.iter().enumerate() {
        let _ = writeln!(out, "--- message {i}: {} ---", m.role.as_str());
        if !m.tool_call_ids.is_empty() {
            let _ = writeln!(out, "(tool calls: {})", m.tool_call_ids.join(", "));
        }
        if !m.tool_call_id.is_empty() {
            let _ = writeln!(out, "(answers: {})", m.tool_call_id);
        }
        let _ = writeln!(out, "{}", m.content.trim_end_matches('\n'));
    }
    let u = &a.usage;
    let _ = writeln!(
        out,
        "\nmodel {}  tokenizer {}{}  budget {}  total {} (static {}, dynamic {})  prefix {}{}",
        a.model,
        u.tokenizer,
        if u.exact { "" } else { " (estimated)" },
        u.budget,
        u.total_tokens,
        u.static_tokens,
        u.dynamic_tokens,
        &a.cache.prefix_hash[..16.min(a.cache.prefix_hash.len())],
        if a.cache.prefix_cache_hit { " (hit)" } else { "" },
    );
    let _ = writeln!(
        out,
        "\n{:<20} {:<13} {:>4} {:<10} {:>8} {:>8}  reason",
        "block", "kind", "prio", "outcome", "offered", "kept"
    );
    for d in &a.decisions {
        let _ = writeln!(
            out,
            "{:<20} {:<13} {:>4} {:<10} {:>8} {:>8}  {}",
            d.name,
            d.kind.as_str(),
            d.priority,
            d.outcome.as_str(),
            format!(
                "{}{}",
                if d.tokens_offered_is_lower_bound { ">=" } else { "" },
                d.tokens_offered
            ),
            d.tokens_kept,
            d.reason
        );
        for (label, ids) in [
            ("dropped", &d.dropped_item_ids),
            ("filtered", &d.filtered_item_ids),
            ("compacted", &d.compacted_item_ids),
        ] {
            if !ids.is_empty() {
                let _ = writeln!(out, "{:<20} {label}: {}", "", ids.join(", "));
            }
        }
    }
    for w in &a.warnings {
        let _ = writeln!(out, "warning {}: {}", w.code, w.message);
    }
    out
}
