//! The JSON API of the page: `GET /api/models`, `GET /api/examples`,
//! `POST /api/assemble`. Errors are `{"error": {"code", "message",
//! "details"}}` under the codes and messages the gRPC API uses.

use std::sync::Arc;
use std::time::Instant;

use hyper::StatusCode;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::{Preview, view};
use crate::assemble::flow;
use crate::assemble::{AssembleError, Options};
use crate::grpc::admission::{Permit, Refusal};
use crate::grpc::json::{JsonError, request_from_json};
use crate::grpc::status::{
    REASON_OVERLOADED, REASON_REQUEST_TOO_LARGE, REASON_TOO_MANY_BLOCKS, REASON_TOO_MANY_ITEMS,
    invalid_message, reported_violations,
};
use crate::prompt::AssembleRequest;

/// An error answer.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// A stable code (`INVALID_JSON`, `BUDGET_OVERFLOW`, ...).
    pub code: &'static str,
    /// What went wrong.
    pub message: String,
    /// Structured facts (numbers, fields).
    pub details: Value,
}

impl ApiError {
    pub(super) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            details: json!({}),
        }
    }

    /// The JSON body.
    pub(super) fn body(&self) -> Value {
        json!({ "error": { "code": self.code, "message": self.message, "details": self.details } })
    }

    /// 400 for JSON that is not JSON or not the expected shape.
    fn syntax(e: &serde_json::Error, what: &str) -> Self {
        ApiError {
            details: json!({ "line": e.line(), "column": e.column() }),
            ..ApiError::new(
                StatusCode::BAD_REQUEST,
                "INVALID_JSON",
                format!("invalid {what} JSON: {e}"),
            )
        }
    }

    /// 413 for a body over `limit` bytes, of `bytes` when its length was
    /// declared.
    pub(super) fn too_large(bytes: Option<u64>, limit: u32) -> Self {
        match bytes {
            Some(b) => refused(Refusal::TooLarge {
                bytes: crate::vocab::saturating_u32(b),
                limit,
            }),
            None => ApiError {
                details: json!({ "limit": limit }),
                ..ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    REASON_REQUEST_TOO_LARGE,
                    format!("request body exceeds the limit of {limit} bytes (limits.max_request_bytes)"),
                )
            },
        }
    }
}

/// 422 for a request the assembler rejects, with the facts the gRPC status
/// carries (`grpc::status::to_status`). Violations are clipped as the gRPC
/// status clips them (`grpc::status::reported_violations`): a request of
/// many bad fields, or of a very long id, gets a bounded answer.
impl From<AssembleError> for ApiError {
    fn from(e: AssembleError) -> Self {
        let details = match &e {
            AssembleError::InvalidArgument(violations) => {
                let (reported, more) = reported_violations(violations);
                let message = invalid_message(&reported, more);
                let listed: Vec<Value> = reported
                    .into_iter()
                    .map(|(field, description)| json!({ "field": field, "description": description }))
                    .collect();
                return ApiError {
                    details: json!({ "violations": listed, "more": more }),
                    ..ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, e.code(), message)
                };
            }
            AssembleError::BudgetOverflow {
                non_cuttable_tokens,
                budget,
                model,
                needs,
            } => {
                let blocks: Vec<Value> = (needs.blocks.iter())
                    .map(|b| json!({ "index": b.index, "name": b.name, "kind": b.kind.as_str(), "tokens": b.tokens, "cuttable": b.cuttable }))
                    .collect();
                json!({
                    "nonCuttableTokens": non_cuttable_tokens,
                    "budget": budget,
                    "model": model,
                    "staticPrefixTokens": needs.static_prefix,
                    "toolsTokens": needs.tools,
                    "queryTokens": needs.query,
                    "framingTokens": needs.framing,
                    "templateTokens": needs.template,
                    "blocks": blocks,
                })
            }
            AssembleError::TemplateRefused { model, .. } => json!({ "model": model }),
            AssembleError::Cancelled => json!({}),
        };
        ApiError {
            details,
            ..ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, e.code(), e.to_string())
        }
    }
}

/// `GET /api/models`: the model table and the policies.
pub(super) fn models(state: &Preview) -> Value {
    let catalog = state.assembler.catalog();
    let models: Vec<Value> = catalog
        .models
        .entries()
        .iter()
        .map(|m| {
            json!({
                "name": m.name,
                "prefix": m.prefix,
                "tokenizer": m.tokenizer.to_string(),
                "exact": m.tokenizer.is_exact(),
                "chatTemplate": m.tokenizer.hf_model().is_some_and(|h| h.template().is_some()),
                "contextWindow": m.context_window,
                "outputReserve": m.output_reserve,
            })
        })
        .collect();
    let policies: Vec<&String> = catalog.policies.keys().collect();
    json!({ "models": models, "policies": policies })
}

/// `GET /api/examples`: the requests the server holds, by name (their
/// content stays on the server).
pub(super) fn examples(state: &Preview) -> Value {
    let examples: Vec<Value> = state
        .sources
        .iter()
        .map(|s| {
            let r = &s.request;
            json!({
                "source": s.name,
                "title": s.title,
                "model": r.model,
                "maxInputTokens": r.max_input_tokens,
                "outputReserve": r.output_reserve,
                "policy": r.policy,
                "blocks": r.blocks.len(),
                "items": r.blocks.iter().map(|b| b.items.len()).sum::<usize>(),
            })
        })
        .collect();
    json!({ "examples": examples })
}

/// The body of `POST /api/assemble`: one of `source` and `request`, and
/// overrides.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct AssembleCall {
    /// `example:NAME` or `file`.
    source: Option<String>,
    /// A proto3-JSON `AssembleRequest`, as an object or as its text; kept
    /// as its raw text, so it is parsed once, into the request.
    request: Option<Box<RawValue>>,
    /// Overrides `max_input_tokens` (the budget).
    #[serde(alias = "budget")]
    max_input_tokens: Option<u32>,
    /// Overrides `output_reserve`.
    output_reserve: Option<u32>,
    /// Overrides `model`.
    model: Option<String>,
    /// Overrides `policy` (empty = default).
    policy: Option<String>,
    /// Overrides `previous_fingerprint`: the `fingerprint` of an earlier
    /// answer, base64 as bytes are in proto3 JSON (decoded by the decoder
    /// the request's own field uses).
    #[serde(default, deserialize_with = "proto3_bytes")]
    previous_fingerprint: Option<Vec<u8>>,
}

/// Bytes as proto3 JSON writes them: base64, standard or URL-safe, with or
/// without padding.
fn proto3_bytes<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
    use base64::Engine as _;
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    const EITHER_PADDING: GeneralPurposeConfig =
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent);
    const STANDARD: GeneralPurpose = GeneralPurpose::new(&base64::alphabet::STANDARD, EITHER_PADDING);
    const URL_SAFE: GeneralPurpose = GeneralPurpose::new(&base64::alphabet::URL_SAFE, EITHER_PADDING);
    let Some(text) = <Option<String> as serde::Deserialize>::deserialize(d)? else {
        return Ok(None);
    };
    let engine = if text.contains(['-', '_']) {
        &URL_SAFE
    } else {
        &STANDARD
    };
    engine.decode(text).map(Some).map_err(serde::de::Error::custom)
}

/// `POST /api/assemble`, under `permit` (taken before the body was read):
/// the permit moves into the blocking task and is held until the assembly
/// itself ends, and a caller that goes away cancels the assembly.
pub(super) async fn assemble(state: Arc<Preview>, permit: Permit, body: &[u8]) -> Result<Value, ApiError> {
    let call: AssembleCall = serde_json::from_slice(body).map_err(|e| ApiError::syntax(&e, "body"))?;
    let mut request = match (&call.source, &call.request) {
        (Some(name), None) => state
            .sources
            .iter()
            .find(|s| s.name == *name)
            .map(|s| s.request.clone())
            .ok_or_else(|| {
                ApiError::new(
                    StatusCode::NOT_FOUND,
                    "UNKNOWN_SOURCE",
                    format!("no request named {name:?}: see GET /api/examples"),
                )
            })?,
        (None, Some(raw)) if raw.get().starts_with('"') => {
            let text: String = serde_json::from_str(raw.get()).map_err(|e| ApiError::syntax(&e, "body"))?;
            parse(&text)?
        }
        (None, Some(raw)) => parse(raw.get())?,
        _ => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "INVALID_ARGUMENT",
                "give exactly one of \"source\" and \"request\"",
            ));
        }
    };
    if let Some(b) = call.max_input_tokens {
        request.max_input_tokens = Some(b);
    }
    if let Some(r) = call.output_reserve {
        request.output_reserve = Some(r);
    }
    if let Some(m) = call.model.filter(|m| !m.is_empty()) {
        request.model = m;
    }
    if let Some(p) = call.policy {
        request.policy = p;
    }
    if let Some(f) = call.previous_fingerprint {
        request.previous_fingerprint = f;
    }
    let items: usize = request.blocks.iter().map(|b| b.items.len()).sum();
    state
        .admission
        .check_shape(request.blocks.len(), items)
        .map_err(refused)?;
    // What the view reads of the request (ids, compact forms), taken
    // before the request moves into the assembler.
    let outline = view::Outline::of(&request);
    let worker = Arc::clone(&state);
    let done = flow::blocking::<_, _, ()>(permit, move |cancel| {
        let started = Instant::now();
        let catalog = worker.assembler.catalog();
        let assembly = worker
            .assembler
            .run(&catalog, request, Options::new(cancel))
            .done()?;
        let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        Ok(view::answer(&worker.assembler, &outline, assembly, micros))
    })
    .await;
    // Never the panic payload (`blocking` logs `panicked` only): it may
    // quote request content, even a filtered item's.
    done.map_err(|_| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "INTERNAL",
            "internal error while assembling",
        )
    })?
}

/// Parses a request the page sent, through the path `assemble FILE.json`
/// takes.
fn parse(text: &str) -> Result<AssembleRequest, ApiError> {
    request_from_json(text).map_err(|e| match e {
        JsonError::Syntax(e) => ApiError::syntax(&e, "request"),
        JsonError::Invalid(e) => ApiError::from(e),
    })
}

/// The answer for a request refused by admission, with the reason and
/// numbers the gRPC status carries (`grpc::status::refusal_status`).
pub(super) fn refused(r: Refusal) -> ApiError {
    // `value` is the measured number, present only when there is one: not
    // for OVERLOADED (the limit is all there is to say).
    let (status, reason, limit, value) = match r {
        Refusal::TooLarge { bytes, limit } => (
            StatusCode::PAYLOAD_TOO_LARGE,
            REASON_REQUEST_TOO_LARGE,
            u64::from(limit),
            Some(u64::from(bytes)),
        ),
        Refusal::TooManyBlocks { count, limit } => (
            StatusCode::PAYLOAD_TOO_LARGE,
            REASON_TOO_MANY_BLOCKS,
            u64::from(limit),
            Some(count as u64),
        ),
        Refusal::TooManyItems { count, limit } => (
            StatusCode::PAYLOAD_TOO_LARGE,
            REASON_TOO_MANY_ITEMS,
            u64::from(limit),
            Some(count as u64),
        ),
        Refusal::Overloaded { limit } => (
            StatusCode::SERVICE_UNAVAILABLE,
            REASON_OVERLOADED,
            u64::from(limit),
            None,
        ),
        // Not raised here: the preview has no batches, upload budget or
        // deadlines.
        _ => (StatusCode::SERVICE_UNAVAILABLE, "UNAVAILABLE", 0, None),
    };
    let details = match value {
        Some(value) => json!({ "limit": limit, "value": value }),
        None => json!({ "limit": limit }),
    };
    ApiError {
        details,
        ..ApiError::new(status, reason, r.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::FieldViolation;

    /// 1,000 violations of 10,000-character fields answer 16 of them, each
    /// clipped, and the count of the rest, as the gRPC status does.
    #[test]
    fn invalid_argument_bodies_are_clipped() {
        let long = "x".repeat(10_000);
        let violations = vec![FieldViolation::new(long.clone(), long); 1_000];
        let e = ApiError::from(AssembleError::InvalidArgument(violations));
        assert_eq!(e.status, StatusCode::UNPROCESSABLE_ENTITY);
        let listed = e.details["violations"].as_array().map_or(0, Vec::len);
        assert_eq!(listed, 16);
        assert_eq!(e.details["more"], 984);
        let field = e.details["violations"][0]["field"].as_str().unwrap_or_default();
        assert_eq!(field.len(), 103, "100 characters and \"...\"");
        assert!(e.message.len() < 16 * 2 * 110 + 100, "{}", e.message.len());
        assert!(e.body().to_string().len() < 8 * 1024);
    }

    /// OVERLOADED says its limit, and no value (there is none to measure).
    #[test]
    fn overloaded_carries_its_limit_only() {
        let e = refused(Refusal::Overloaded { limit: 3 });
        assert_eq!(e.details, json!({ "limit": 3 }));
        assert_eq!(ApiError::too_large(None, 10).details, json!({ "limit": 10 }));
        assert_eq!(
            ApiError::too_large(Some(12), 10).details,
            json!({ "limit": 10, "value": 12 })
        );
    }

    /// `previous_fingerprint` reads bytes as proto3 JSON writes them, and
    /// as it accepts them: standard or URL-safe base64, padded or not.
    #[test]
    fn a_previous_fingerprint_is_proto3_base64() {
        let read = |v: &str| {
            serde_json::from_str::<AssembleCall>(&format!("{{\"source\":\"x\",\"previousFingerprint\":{v}}}"))
                .map(|c| c.previous_fingerprint)
        };
        assert_eq!(read("\"AQID\"").ok(), Some(Some(vec![1, 2, 3])));
        assert_eq!(read("\"AQI=\"").ok(), Some(Some(vec![1, 2])));
        assert_eq!(read("\"AQI\"").ok(), Some(Some(vec![1, 2])));
        assert_eq!(read("\"-_8\"").ok(), Some(Some(vec![0xfb, 0xff])));
        assert_eq!(read("\"+/8=\"").ok(), Some(Some(vec![0xfb, 0xff])));
        assert_eq!(read("null").ok(), Some(None));
        assert!(read("\"!!\"").is_err(), "not base64");
        let absent =
            serde_json::from_str::<AssembleCall>("{\"source\":\"x\"}").map(|c| c.previous_fingerprint);
        assert_eq!(absent.ok(), Some(None));
    }
}
