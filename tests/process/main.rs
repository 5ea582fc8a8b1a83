//! The built binary as a child process (`common::BIN`): subcommands and
//! exit codes, signals (drain, reload), logs, mutual TLS identities and the
//! preview server. Each test owns its child, so they run side by side; a
//! child-process test that measures memory is a bound, in `tests/limits`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;

mod auth;
mod cli;
mod preview;
mod privacy;
mod process;
mod reload;
