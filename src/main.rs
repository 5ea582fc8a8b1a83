//! The `context-assembler` binary: parse, initialise, run, exit code.

use std::process::ExitCode;

use clap::Parser as _;
use context_assembler::config::{Cli, Command, EXIT_CONFIG, LogFormat, ServeArgs};
use context_assembler::{cli, server, telemetry};

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
        Some(Command::Assemble(args)) => cli::assemble(&args),
        Some(Command::Serve(args)) => serve(&args),
        None => serve(&cli.serve),
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
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("context-assembler: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        let bound = server::Bound::bind(&config).await?;
        bound.serve(server::shutdown_signal()).await
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(err = %e, "server failed");
            eprintln!("context-assembler: {e}");
            ExitCode::FAILURE
        }
    }
}
