//! The proto3 JSON mapping of requests and responses (what grpcurl sends and
//! prints), for the command line: JSON never reaches the domain directly.

use super::pb;
use crate::assemble::AssembleError;
use crate::prompt::{AssembleRequest, Assembly};

/// Why a JSON request could not become a domain request.
#[derive(Debug, thiserror::Error)]
pub enum JsonError {
    /// Not JSON, or not the shape of an `AssembleRequest`.
    #[error("invalid request JSON: {0}")]
    Syntax(#[from] serde_json::Error),
    /// Well-formed JSON with invalid values (unknown enum numbers, ...).
    #[error(transparent)]
    Invalid(#[from] AssembleError),
}

/// Parses the proto3 JSON of an `AssembleRequest`.
pub fn request_from_json(text: &str) -> Result<AssembleRequest, JsonError> {
    let wire: pb::AssembleRequest = serde_json::from_str(text)?;
    Ok(AssembleRequest::try_from(wire)?)
}

/// The proto3 JSON of the `AssembleResponse` for `assembly`.
pub fn response_to_json(assembly: Assembly) -> serde_json::Value {
    serde_json::to_value(pb::AssembleResponse::from(assembly))
        .unwrap_or_else(|e| serde_json::json!({"error": {"code": "INTERNAL", "message": e.to_string()}}))
}
