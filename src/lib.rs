//! context-assembler: a gRPC sidecar that turns the parts of an LLM prompt
//! into one assembled, budgeted, cache-friendly prompt.
//!
//! The rooms, in layers; a room uses only rooms below it (`tests/layers/`):
//!
//! ```text
//! 7  server (bind, serve, drain, series)
//! 6  gateway: Envoy's external processor and the HTTP fit (provider bodies)
//!    offline (assemble a JSON file)   preview (a local web page)
//! 5  grpc: wire <-> domain, errors -> Status, admission, auth (tonic/prost)
//!    render: vLLM's render contract over HTTP/1.1 (token ids for routers)
//! 4  config: flags, env and files -> one validated configuration
//! 3  assemble: filter, measure, reserve, allocate, lay out, report
//! 2  compact   prompt_cache   memory   workload   provider_count
//! 1  tokens: tokenizer, models, count cache, chat formula    prompt: types
//! 0  vocab: Role, Warning, FieldViolation, Cancel, escaping   telemetry   http1
//! ```
//!
//! - [`vocab`], [`telemetry`] and [`http1`] import nothing from the crate:
//!   the shared words, metric names with recorders that take plain values,
//!   and the plain HTTP/1.1 listener of `/metrics` and the preview.
//! - [`tokens`] is how text becomes tokens for a model; [`prompt`] is the
//!   domain's input and output types, free of wire types.
//! - [`compact`] summarizes conversations without breaking tool-call pairs;
//!   [`prompt_cache`] keeps prefixes stable and says how to cache them;
//!   [`memory`] retains and recalls; [`workload`] generates test prompts;
//!   [`provider_count`] learns pieces' counts from a provider in the
//!   background.
//! - [`assemble`] is the pipeline; it compacts turns before dropping them.
//! - [`grpc`] and [`server`] are the only rooms that know tonic: `grpc`
//!   converts and maps errors in one place, `server` binds and serves.
//! - [`gateway`] fits a provider's chat request in the gateway's path:
//!   Envoy's external processor and the HTTP fit, over the same flow.
//! - [`offline`] assembles requests from JSON files without a server;
//!   [`preview`] serves a local page that does so interactively.

pub mod assemble;
pub mod compact;
pub mod config;
pub mod gateway;
pub mod grpc;
pub mod http1;
pub mod memory;
pub mod offline;
pub mod preview;
pub mod prompt;
pub mod prompt_cache;
pub mod provider_count;
pub mod render;
pub mod server;
pub mod telemetry;
pub mod tokens;
pub mod vocab;
pub mod workload;
