//! In-process servers whose tests read the process's metrics as exact
//! counts: one recorder serves every server in a process, so every test here
//! takes its turn first (`common::turn`) and runs alone. Trace export is
//! here too: its spans move the trace counters that `server::grpc` expects
//! at zero.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;

mod batch;
mod gateway;
mod otel;
mod single_flight;
mod sources;
