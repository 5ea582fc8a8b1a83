//! context-assembler: a gRPC sidecar that turns the parts of an LLM prompt
//! into one assembled, budgeted, cache-friendly prompt.
//!
//! Architecture:
//! - [`assemble`] is the domain (no gRPC): filter by permission, measure with
//!   the model's tokenizer through blake3-keyed caches, reserve what may never
//!   be cut, allocate the rest by priority, order for attention and caches.
//! - [`compact`] is the conversation compactor (no gRPC): a deterministic
//!   summary, tool-call-safe cuts, a per-session breaker and emergency trim.
//! - [`memory`] is retention and recall (no gRPC): XML parsing, ranking, and
//!   the SQLite or PostgreSQL store behind the MEMORY block.
//! - [`grpc`] is the only module that knows tonic/prost: it converts wire
//!   types to domain types and maps domain errors to `Status` in one place.
//! - [`server`] binds, serves health/reflection/metrics and drains on signal.
//! - [`config`] parses flags and env into one validated configuration.
//! - [`cli`] assembles one request from a JSON file without a server.
//! - [`telemetry`] holds the tracing setup and the metric catalogue.
//! - [`workload`] generates deterministic synthetic prompts for benches and tests.

pub mod assemble;
pub mod compact;
pub mod config;
pub mod grpc;
pub mod memory;
pub mod offline;
pub mod prompt;
pub mod prompt_cache;
pub mod server;
pub mod telemetry;
pub mod tokens;
pub mod vocab;
pub mod workload;
