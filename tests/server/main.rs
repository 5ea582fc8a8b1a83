//! The real server in process on 127.0.0.1:0, its tests side by side. A
//! test belongs here when it needs nothing of the process but its own
//! server: one that reads the process's metrics as exact counts goes to
//! `tests/metrics`, a bound held against clients to `tests/limits`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;

mod compact;
mod counting;
mod ext_proc;
mod grpc;
mod render;
mod scopes;
mod sources;
mod tls;
mod uds;
