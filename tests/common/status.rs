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
