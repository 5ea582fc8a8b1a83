//! The memory stores: their contract on every backend, directly and through
//! the server, on SQLite always and on PostgreSQL when
//! `CONTEXT_ASSEMBLER_TEST_POSTGRES_URL` names a server (`common::postgres`
//! says whether; each test uses its own database or subjects), and the
//! provider counts sidecars share through PostgreSQL.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;

mod memory;
mod memory_parse;
mod memory_store;
mod postgres_tls;
mod shared_counts;
mod store_outage;

/// The stand-in provider counting endpoint (`shared_counts`).
#[path = "../provider_count/standin.rs"]
#[allow(dead_code)]
mod standin;
