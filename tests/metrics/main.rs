//! In-process servers whose tests read their metrics as exact counts: each
//! server records into a registry of its own, so a test reads the deltas of
//! its own server's counters, whatever the other tests do meanwhile. Trace
//! export is here too: its spans move the trace counters that
//! `server::grpc` expects at zero.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;

mod batch;
mod gateway;
mod otel;
mod single_flight;
mod sources;
