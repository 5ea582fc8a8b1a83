//! The only module that knows tonic and prost: generated types, conversions
//! between wire and domain types, the error-to-status map, and the service.

pub mod admission;
pub mod auth;
pub mod codec;
pub mod convert;
pub mod count_request;
pub mod gate;
pub mod json;
pub mod service;
pub mod shape;
pub mod status;
pub mod trace;

/// Generated protobuf types, tonic stubs and proto3-JSON serde impls.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod pb {
    include!(concat!(env!("OUT_DIR"), "/context_assembler.v1.rs"));
    include!(concat!(env!("OUT_DIR"), "/context_assembler.v1.serde.rs"));

    pub use crate::grpc::count_request::{CountTokensRequest, count_tokens_request};

    /// The encoded descriptor set of `proto/`, for server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/context_assembler_descriptor.bin"));
}

pub use service::AssemblerService;
