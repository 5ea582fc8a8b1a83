//! The `context-assembler` binary: parse, initialise, run, exit code.

use std::process::ExitCode;

use clap::Parser as _;
use context_assembler::config::{
    Cli, Command, ConfigArgs, EMBEDDED_DEFAULT, EXIT_CONFIG, LogFormat, ServeArgs,
};
use context_assembler::{offline, preview, server, telemetry};

/// mimalloc, not glibc's malloc: a request allocates and frees a few
/// hundred strings and vectors, and glibc's bins (its consolidation and
/// unlinking of freed chunks) were a sixth of a warm `Assemble`'s time.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version are not errors; every bad flag or env value is
            // a configuration error.
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(EXIT_CONFIG)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    match cli.command {
        Some(Command::Assemble(args)) => offline::assemble(&args),
        Some(Command::Serve(args)) => serve(&args),
        Some(Command::Config(args)) => config(&args),
        Some(Command::Preview(args)) => preview::run(&args),
        None => serve(&cli.serve),
    }
}

fn config(args: &ConfigArgs) -> ExitCode {
    if args.print_default {
        print!("{EMBEDDED_DEFAULT}");
        return ExitCode::SUCCESS;
    }
    let check = ServeArgs {
        config: args.check.clone(),
        ..ServeArgs::default()
    };
    match check.validate() {
        Ok(c) => {
            println!(
                "configuration is valid: {} models, {} policies",
                c.catalog.models.entries().len(),
                c.catalog.policies.len()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("context-assembler: {e}");
            ExitCode::from(EXIT_CONFIG)
        }
    }
}

fn serve(args: &ServeArgs) -> ExitCode {
    let config = match args.validate() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("context-assembler: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    telemetry::init_tracing(config.log_format == LogFormat::Json);
    // Blocking threads run the domain; admission keeps at most
    // max_concurrency of them busy, plus a few for warm-up and reloads.
    let blocking = usize::try_from(config.limits.max_concurrency)
        .unwrap_or(usize::MAX)
        .saturating_add(8);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(blocking)
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("context-assembler: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        let bound = server::Bound::bind(config).await?;
        bound.serve(server::shutdown_signal()).await
    });
    // After the drain, blocking work still running (a request abandoned at
    // the end of the grace period) must not hold the exit.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(err = %e, "server failed");
            eprintln!("context-assembler: {e}");
            ExitCode::FAILURE
        }
    }
}
