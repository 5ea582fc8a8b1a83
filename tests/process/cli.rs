//! The `assemble` and `config` subcommands and configuration errors, run as
//! a process: exit codes and output.

use std::io::Write as _;
use std::process::{Command, Stdio};

use crate::common::BIN;

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
fn the_standard_otel_environment_is_honoured_and_a_bad_endpoint_exits_64_before_binding() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    // The environment wins over the file.
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(b"[telemetry]\notlp_endpoint = \"http://file-collector:4317\"\n")
        .unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--listen", &addr, "--metrics-listen", "off"])
        .env("CONTEXT_ASSEMBLER_CONFIG", file.path())
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "collector-without-scheme:4317")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("OTEL_EXPORTER_OTLP_ENDPOINT"), "{stderr}");
    // The flag wins over the environment: its bad value is the one named.
    let out = Command::new(BIN)
        .args(["serve", "--listen", &addr, "--metrics-listen", "off"])
        .args(["--otlp-endpoint", "ftp://flag:1"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env-collector:4317")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("ftp://flag:1"), "{stderr}");
    let out = Command::new(BIN)
        .args(["serve", "--listen", &addr, "--metrics-listen", "off"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env-collector:4317")
        .env("OTEL_SERVICE_NAME", "n".repeat(300))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("OTEL_SERVICE_NAME"), "{stderr}");
}

/// A model folder that is missing or not a tokenizer stops the start with
/// exit 64, naming the entry's key and the file.
#[test]
fn a_bad_model_folder_exits_64_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("sidecar.toml");
    let entry =
        "[[models]]\nname = \"m\"\ntokenizer_dir = \"model\"\ncontext_window = 8000\noutput_reserve = 100\n";
    std::fs::write(&config, entry).unwrap();
    let check = || {
        let out = Command::new(BIN)
            .args(["config", "--check"])
            .arg(&config)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stderr) = check();
    assert_eq!(code, Some(64));
    assert!(stderr.contains("models[0].tokenizer_dir"), "{stderr}");
    std::fs::create_dir(dir.path().join("model")).unwrap();
    std::fs::write(
        dir.path().join("model/tokenizer.json"),
        "{\"model\": {\"type\": \"WordLevel\"}}",
    )
    .unwrap();
    let (code, stderr) = check();
    assert_eq!(code, Some(64));
    assert!(
        stderr.contains("models[0].tokenizer_dir") && stderr.contains("WordLevel"),
        "{stderr}"
    );
}

#[test]
fn a_bad_configuration_file_exits_64_naming_the_key_before_any_port_is_bound() {
    // The port is taken: a server that bound before validating would fail
    // with a bind error (exit 1) instead.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(b"[limits]\nmax_concurrency = 0\n").unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--listen", &addr, "--metrics-listen", "off"])
        .env("CONTEXT_ASSEMBLER_CONFIG", file.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("limits.max_concurrency"), "{stderr}");

    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(b"[[models]]\nname = \"m\"\nencoding = \"o200k_base\"\ncontext_window = 9\nwindow = 1\n")
        .unwrap();
    let out = Command::new(BIN)
        .args(["config", "--check"])
        .arg(file.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("unknown field `window`") && stderr.contains("line 5"),
        "{stderr}"
    );
}

#[test]
fn the_printed_default_is_the_embedded_file_and_checks_clean() {
    let out = Command::new(BIN)
        .args(["config", "--print-default"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let printed = String::from_utf8(out.stdout).unwrap();
    let shipped =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/config/default.toml")).unwrap();
    assert_eq!(printed, shipped);
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(printed.as_bytes()).unwrap();
    let out = Command::new(BIN)
        .args(["config", "--check"])
        .arg(file.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("35 models, 2 policies"));
}

#[test]
fn assemble_uses_the_policies_of_a_configuration_file() {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(b"[policies.default]\ncontext_role = \"system\"\n")
        .unwrap();
    let out = Command::new(BIN)
        .args(["assemble", EXAMPLE, "--json", "--config"])
        .arg(file.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let messages = json["messages"].as_array().unwrap();
    let context = &messages[messages.len() - 2];
    assert!(
        context["content"]
            .as_str()
            .unwrap()
            .contains("<state id=\"plan\">"),
        "{context}"
    );
    assert_eq!(context["role"], "ROLE_SYSTEM");
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
