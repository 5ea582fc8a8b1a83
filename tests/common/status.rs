//! What a status names in its structured details: the fields of a
//! `BadRequest`, the reason of an `ErrorInfo`.

use tonic::Code;
use tonic_types::StatusExt;

/// The fields a status's `BadRequest` detail names, in order; the status
/// must be INVALID_ARGUMENT and carry the detail.
pub fn violations(status: &tonic::Status) -> Vec<String> {
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    status
        .get_details_bad_request()
        .expect("BadRequest detail")
        .field_violations
        .into_iter()
        .map(|v| v.field)
        .collect()
}

/// The reason of a status's `ErrorInfo` detail, or "" without one.
pub fn reason(status: &tonic::Status) -> String {
    status
        .get_details_error_info()
        .map(|i| i.reason)
        .unwrap_or_default()
}

/// The `BudgetOverflowDetail` of a status's details (the encoded
/// `google.rpc.Status`, as a unary call or a `RequestError` carries it), if
/// it has one; checked to agree with the status's `ErrorInfo` and to add up.
pub fn overflow_detail(details: &[u8]) -> Option<context_assembler::grpc::pb::BudgetOverflowDetail> {
    use prost::Message;
    let status = tonic_types::pb::Status::decode(details).expect("a google.rpc.Status");
    let any = |name: &str| {
        let url = format!("type.googleapis.com/{name}");
        status
            .details
            .iter()
            .find(|a| a.type_url == url)
            .map(|a| a.value.as_slice())
    };
    let detail = context_assembler::grpc::pb::BudgetOverflowDetail::decode(any(
        "context_assembler.v1.BudgetOverflowDetail",
    )?)
    .expect("a BudgetOverflowDetail");
    let info = tonic_types::pb::ErrorInfo::decode(any("google.rpc.ErrorInfo").expect("its ErrorInfo"))
        .expect("an ErrorInfo");
    assert_eq!(info.reason, "BUDGET_OVERFLOW");
    assert_eq!(
        info.metadata["non_cuttable_tokens"],
        detail.non_cuttable_tokens.to_string()
    );
    assert_eq!(info.metadata["budget"], detail.budget.to_string());
    assert_eq!(info.metadata["model"], detail.model);
    let parts = detail.static_prefix_tokens
        + detail.tools_tokens
        + detail.query_tokens
        + detail.framing_tokens
        + detail.template_tokens
        + detail.blocks.iter().map(|b| b.tokens).sum::<u64>();
    // Blocks past the listed ones are not in the sum.
    if detail.more_blocks == 0 {
        assert_eq!(parts, detail.non_cuttable_tokens, "{detail:?}");
    } else {
        assert!(parts < detail.non_cuttable_tokens, "{detail:?}");
    }
    Some(detail)
}
