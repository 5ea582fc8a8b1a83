//! The processor's answers in Envoy's types: body chunks and body answers,
//! header mutations, a fitted request's dynamic metadata, immediate
//! responses.

use bytes::Bytes;

use super::super::fit::Fitted;
use super::super::pb::core::{
    HeaderMap, HeaderValue, HeaderValueOption, header_value_option::HeaderAppendAction,
};
use super::super::pb::envoy::r#type::v3::HttpStatus;
use super::super::pb::ext_proc::{
    BodyMutation, BodyResponse, CommonResponse, HeaderMutation, ImmediateResponse, StreamedBodyResponse,
    body_mutation, common_response::ResponseStatus,
};
use super::{EXACT_HEADER, INPUT_TOKENS_HEADER, NAMESPACE};
use crate::render::source_headers;

/// A `streamed_response` body chunk.
pub(super) fn streamed(body: Bytes, end_of_stream: bool) -> BodyMutation {
    BodyMutation {
        mutation: Some(body_mutation::Mutation::StreamedResponse(StreamedBodyResponse {
            body,
            end_of_stream,
        })),
    }
}

/// A body answer carrying `mutation` and `headers` set.
pub(super) fn body_response(mutation: BodyMutation, headers: Vec<HeaderValueOption>) -> BodyResponse {
    BodyResponse {
        response: Some(CommonResponse {
            status: ResponseStatus::Continue as i32,
            header_mutation: (!headers.is_empty()).then(|| HeaderMutation {
                set_headers: headers,
                remove_headers: Vec::new(),
            }),
            body_mutation: Some(mutation),
            ..CommonResponse::default()
        }),
    }
}

/// A header set (overwritten when present).
fn set(key: &str, value: impl Into<String>) -> HeaderValueOption {
    HeaderValueOption {
        header: Some(HeaderValue {
            key: key.to_owned(),
            value: String::new(),
            raw_value: value.into().into_bytes().into(),
        }),
        append_action: HeaderAppendAction::OverwriteIfExistsOrAdd as i32,
        keep_empty_value: false,
    }
}

/// The headers a fitted request goes upstream with.
pub(super) fn mutation(f: &Fitted) -> HeaderMutation {
    let mut set_headers = vec![
        set(INPUT_TOKENS_HEADER, f.input_tokens.to_string()),
        set(EXACT_HEADER, if f.exact { "true" } else { "false" }),
    ];
    for (name, tokens) in source_headers(&f.sources) {
        set_headers.push(set(name, tokens.to_string()));
    }
    if let Some(b) = &f.body {
        set_headers.push(set("content-length", b.len().to_string()));
    }
    HeaderMutation {
        set_headers,
        remove_headers: Vec::new(),
    }
}

/// The dynamic metadata of a fitted request, in [`NAMESPACE`].
pub(super) fn metadata(f: &Fitted) -> prost_types::Struct {
    use prost_types::value::Kind;
    let number = |n: u32| prost_types::Value {
        kind: Some(Kind::NumberValue(f64::from(n))),
    };
    let fields = [
        ("input_tokens", number(f.input_tokens)),
        (
            "prefix_hash",
            prost_types::Value {
                kind: Some(Kind::StringValue(f.prefix_hash.clone())),
            },
        ),
        ("turns_cut", number(f.turns_cut)),
        ("results_cleared", number(f.results_cleared)),
        ("tokens_exact", number(f.sources.exact)),
        ("tokens_provider", number(f.sources.provider)),
        ("tokens_estimated", number(f.sources.estimated)),
    ];
    let inner = prost_types::Struct {
        fields: fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
    };
    prost_types::Struct {
        fields: [(
            NAMESPACE.to_owned(),
            prost_types::Value {
                kind: Some(Kind::StructValue(inner)),
            },
        )]
        .into_iter()
        .collect(),
    }
}

/// An immediate response with a JSON body.
pub(super) fn immediate(status: u16, body: String) -> ImmediateResponse {
    ImmediateResponse {
        status: Some(HttpStatus {
            code: i32::from(status),
        }),
        headers: Some(HeaderMutation {
            set_headers: vec![set("content-type", "application/json")],
            remove_headers: Vec::new(),
        }),
        body: body.into(),
        grpc_status: None,
        details: "context_assembler".to_owned(),
    }
}

/// Envoy's header map (a test client's helper).
pub fn header_map(pairs: &[(&str, &str)]) -> HeaderMap {
    HeaderMap {
        headers: pairs
            .iter()
            .map(|(k, v)| HeaderValue {
                key: (*k).to_owned(),
                value: String::new(),
                raw_value: Bytes::copy_from_slice(v.as_bytes()),
            })
            .collect(),
    }
}
