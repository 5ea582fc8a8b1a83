//! Bounds the sidecar holds against its clients: a test belongs here when it
//! proves one (a size or count refused by field, CPU or memory per byte of
//! request, memory per connection, a deadline, a client that misbehaves).
//! The tests that measure CPU time, memory or latency take their turn first
//! (`common::turn`, which says why) and run alone; the others read deltas of
//! their own server's metrics and run beside them.
//!
//! Which module holds what:
//! - `limits`: the request size, blocks and items, and the concurrency and
//!   connection limits, in process;
//! - `cpu_bounds`: the lists a client sizes, refused by field, and the
//!   hostile shapes within them answered, in process;
//! - `complexity`: the hostile shapes (`tests/shapes`) at most n log n in
//!   their size, CPU time through the domain;
//! - `bounds`: peak memory per wire byte for every request shape, and the
//!   upload budget and drain of every RPC, in a child process;
//! - `connection_memory`: what a stalled connection holds, in a child
//!   process;
//! - `deadline`: an expired deadline stops the work;
//! - `faults`: clients that cancel, stall, churn or burst leave nothing
//!   behind;
//! - `hostile`: generated malformed and extreme requests over every RPC, in
//!   a child process (`HOSTILE_REQUESTS` for the long run).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;
/// Hostile request shapes (`examples/worst_case.rs` includes the same file).
#[path = "../shapes/mod.rs"]
mod shapes;

mod bounds;
mod complexity;
mod connection_memory;
mod cpu_bounds;
mod deadline;
mod faults;
mod hostile;
mod limits;
