//! `context-assembler preview`: a local web page over the assembler. It
//! assembles with the same embedded or `--config` catalog as `serve`, with
//! no gRPC server and no memory store, and shows what was kept, compacted,
//! dropped and filtered, the messages and their cache marks.
//!
//! The content-safety rule: a filtered item's content never reaches the
//! page. Requests loaded on the server (the shipped examples, `FILE.json`)
//! stay there and are picked by name; every answer is built from the
//! assembly and its decision report only (`view.rs`), whose messages never
//! hold filtered content. `tests/process/preview.rs` plants a marker in a filtered
//! item and checks no answer carries it; `tests/preview/browser_test.py`
//! checks the page's DOM.
//!
//! The page and its API share one loopback listener (`http.rs`); a
//! non-loopback address needs `--allow-remote` (the page has no
//! authentication).

use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use crate::assemble::Assembler;
use crate::config::{ConfigError, EXIT_CONFIG, PreviewArgs, ServeArgs};
use crate::grpc::admission::Admission;
use crate::grpc::json::request_from_json;
use crate::prompt::AssembleRequest;

mod api;
mod http;
mod view;

/// Exit code for an unreadable `FILE.json` (EX_NOINPUT).
const EXIT_NO_INPUT: u8 = 66;
/// Exit code for a `FILE.json` that is not a request (EX_DATAERR).
const EXIT_DATA: u8 = 65;

/// The examples shipped in `examples/`, embedded: (name, title, JSON).
const EXAMPLES: &[(&str, &str, &str)] = &[
    (
        "support",
        "Support chat, 290-token budget (examples/request.json)",
        include_str!("../../examples/request.json"),
    ),
    (
        "rag-32k",
        "Retrieval chat of about 32k tokens (examples/rag-32k.json)",
        include_str!("../../examples/rag-32k.json"),
    ),
];

/// A request the server holds, picked by the page by name.
#[derive(Debug)]
struct Source {
    /// `example:NAME` or `file`.
    name: String,
    /// What the page shows in its picker.
    title: String,
    /// The parsed request, cloned for each assembly.
    request: AssembleRequest,
}

/// What the preview server works with.
#[derive(Debug)]
struct Preview {
    /// Warm across calls: moving the slider re-assembles from its caches.
    assembler: Assembler,
    /// The shipped examples, then `FILE.json` if given.
    sources: Vec<Source>,
    /// The configured limits: request size, blocks, items, concurrency.
    admission: Admission,
    /// Whether the page may be served under any `Host` (`--allow-remote`);
    /// else only under loopback names, against DNS rebinding.
    any_host: bool,
}

/// A validated `preview` configuration.
#[derive(Debug)]
struct PreviewConfig {
    listen: SocketAddr,
    state: Preview,
}

/// Why `preview` could not start, and its exit code.
#[derive(Debug)]
struct StartError {
    code: u8,
    message: String,
}

impl From<ConfigError> for StartError {
    fn from(e: ConfigError) -> Self {
        StartError {
            code: EXIT_CONFIG,
            message: e.to_string(),
        }
    }
}

/// Runs the subcommand until interrupted.
pub fn run(args: &PreviewArgs) -> ExitCode {
    let config = match validate(args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("context-assembler: {}", e.message);
            return ExitCode::from(e.code);
        }
    };
    // Connection errors and the like, on standard error (standard output
    // carries the one `preview listening on` line).
    crate::telemetry::init_tracing(false);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("context-assembler: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result: Result<(), String> = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", config.listen))?;
        let addr = listener
            .local_addr()
            .map_err(|e| format!("cannot read the bound address: {e}"))?;
        println!("preview listening on http://{addr}");
        let state = Arc::new(config.state);
        tokio::select! {
            () = http::serve(listener, state) => Ok(()),
            _ = tokio::signal::ctrl_c() => Ok(()),
        }
    });
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("context-assembler: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Checks the flags and the configuration, and loads the requests the
/// server holds, before anything is bound.
fn validate(args: &PreviewArgs) -> Result<PreviewConfig, StartError> {
    const KEY: &str = "--listen";
    let listen: SocketAddr = args
        .listen
        .parse()
        .map_err(|e| ConfigError::new(KEY, format!("{:?} is not a socket address: {e}", args.listen)))?;
    if !listen.ip().is_loopback() && !args.allow_remote {
        return Err(ConfigError::new(
            KEY,
            format!(
                "{listen} is not a loopback address: the page has no authentication; \
                 pass --allow-remote to serve it there anyway"
            ),
        )
        .into());
    }
    let serve = ServeArgs {
        config: args.config.clone(),
        ..ServeArgs::default()
    }
    .validate()?;
    let mut sources = Vec::with_capacity(EXAMPLES.len() + 1);
    for &(name, title, json) in EXAMPLES {
        let request = request_from_json(json).map_err(|e| StartError {
            code: EXIT_DATA,
            message: format!("the embedded example {name} is not a request: {e}"),
        })?;
        sources.push(Source {
            name: format!("example:{name}"),
            title: title.to_owned(),
            request,
        });
    }
    if let Some(path) = &args.file {
        sources.push(load_file(path)?);
    }
    let assembler = Assembler::new(serve.catalog, serve.cache_bytes);
    assembler.warm();
    Ok(PreviewConfig {
        listen,
        state: Preview {
            assembler,
            sources,
            admission: Admission::new(serve.limits),
            any_host: args.allow_remote,
        },
    })
}

/// Reads and parses `FILE.json`.
fn load_file(path: &Path) -> Result<Source, StartError> {
    let text = std::fs::read_to_string(path).map_err(|e| StartError {
        code: EXIT_NO_INPUT,
        message: format!("cannot read {}: {e}", path.display()),
    })?;
    let request = request_from_json(&text).map_err(|e| StartError {
        code: EXIT_DATA,
        message: format!("{}: {e}", path.display()),
    })?;
    let file_name = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    Ok(Source {
        name: "file".to_owned(),
        title: format!("{file_name} (from the command line)"),
        request,
    })
}
