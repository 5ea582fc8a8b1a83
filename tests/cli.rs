//! The `assemble` subcommand, run as a process: exit codes and output.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write as _;
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_context-assembler");
const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/request.json");

/// Runs the binary with `args`, feeding `input` on standard input.
fn run_with_stdin(args: &[&str], input: &[u8]) -> std::process::Output {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn assembles_the_example_as_a_table_and_as_json() {
    let out = Command::new(BIN).args(["assemble", EXAMPLE]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("--- message 0: system ---"));
    assert!(text.contains("filtered: pricing"));
    assert!(!text.contains("Internal margin table"));

    let out = Command::new(BIN)
        .args(["assemble", EXAMPLE, "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let usage = &json["usage"];
    assert!(usage["totalTokens"].as_u64().unwrap() <= usage["budget"].as_u64().unwrap());
    assert_eq!(
        json["messages"].as_array().unwrap().last().unwrap()["content"],
        "Yes - can I get my money back?"
    );
}

#[test]
fn reads_standard_input() {
    let out = run_with_stdin(&["assemble", "-"], &std::fs::read(EXAMPLE).unwrap());
    assert!(out.status.success());
}

#[test]
fn bad_input_exits_with_data_error_and_missing_file_with_no_input() {
    let out = run_with_stdin(&["assemble", "-"], br#"{"model": "gpt-4o", "query": ""}"#);
    assert_eq!(out.status.code(), Some(65));

    let out = Command::new(BIN)
        .args(["assemble", "/nonexistent/request.json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(66));
}

#[test]
fn bad_configuration_exits_64_before_binding() {
    let out = Command::new(BIN)
        .args(["--listen", "not-an-address"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--listen"));
    let out = Command::new(BIN).args(["--cache-mib", "lots"]).output().unwrap();
    assert_eq!(out.status.code(), Some(64));
    let out = Command::new(BIN)
        .env("CONTEXT_ASSEMBLER_LOG_FORMAT", "xml")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let out = Command::new(BIN).arg("--help").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn jsonl_answers_every_line_with_a_response_or_an_error() {
    let example: serde_json::Value = serde_json::from_slice(&std::fs::read(EXAMPLE).unwrap()).unwrap();
    let input = format!("{example}\n{{\"model\": \"nope\", \"query\": \"q\"}}\n\n{example}\n");
    let out = run_with_stdin(&["assemble", "--jsonl", "-"], input.as_bytes());
    assert!(out.status.success());
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    assert!(lines[0]["usage"]["totalTokens"].as_u64().unwrap() > 0);
    assert_eq!(lines[1]["error"]["code"], "INVALID_ARGUMENT");
    assert_eq!(lines[2]["usage"], lines[0]["usage"]);
    assert_eq!(lines[2]["cache"]["prefixCacheHit"], true);
}
