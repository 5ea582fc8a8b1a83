//! Field violations must name a field of the request by its proto path
//! (`blocks[2].items[0].role`), with indexes that exist: these checks parse
//! the path and look the field up in the request the violation is about.

use context_assembler::assemble::AssembleError;
use context_assembler::compact::{CompactError, CompactRequest};
use context_assembler::prompt::AssembleRequest;
use context_assembler::vocab::FieldViolation;

/// One path segment: a field name and an optional index.
type Segment<'a> = (&'a str, Option<usize>);

fn parse(path: &str) -> Vec<Segment<'_>> {
    path.split('.')
        .map(|seg| match seg.split_once('[') {
            Some((name, rest)) => {
                let idx = rest
                    .strip_suffix(']')
                    .and_then(|n| n.parse::<usize>().ok())
                    .unwrap_or_else(|| panic!("malformed index in field path {path:?}"));
                (name, Some(idx))
            }
            None => (seg, None),
        })
        .collect()
}

/// The violations of an `InvalidArgument`; panics on any other error.
pub fn violations(err: &AssembleError) -> &[FieldViolation] {
    match err {
        AssembleError::InvalidArgument(v) => described(v),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

/// The violations of a Compact `InvalidArgument`; panics on any other error.
pub fn compact_violations(err: &CompactError) -> &[FieldViolation] {
    match err {
        CompactError::InvalidArgument(v) => described(v),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

/// `v`, after checking it is not empty and every violation says what is wrong.
fn described(v: &[FieldViolation]) -> &[FieldViolation] {
    assert!(!v.is_empty(), "InvalidArgument without a field violation");
    for f in v {
        assert!(
            !f.description.is_empty(),
            "violation of {} has no description",
            f.field
        );
    }
    v
}

fn within(path: &str, idx: Option<usize>, len: usize) {
    let i = idx.unwrap_or_else(|| panic!("{path:?}: index missing"));
    assert!(i < len, "{path:?}: index {i} out of range (len {len})");
}

/// Panics unless `path` names a field of `req`.
pub fn check_assemble_path(path: &str, req: &AssembleRequest) {
    match parse(path).as_slice() {
        [
            (
                "model"
                | "query"
                | "policy"
                | "output_reserve"
                | "max_input_tokens"
                | "previous_fingerprint"
                | "cache_ttl",
                None,
            ),
        ] => {}
        [("tools", i)] => within(path, *i, req.tools.len()),
        [("static_segments", i), ("kind", None)] => within(path, *i, req.static_segments.len()),
        [
            ("blocks", i),
            ("name" | "kind" | "min_tokens" | "max_tokens", None),
        ] => {
            within(path, *i, req.blocks.len());
        }
        [
            ("blocks", i),
            ("items", j),
            (
                "id" | "role" | "score" | "tool_call_id" | "tool_call_ids" | "tool_name" | "thinking",
                None,
            ),
        ] => {
            within(path, *i, req.blocks.len());
            let b = i.unwrap_or_default();
            within(path, *j, req.blocks[b].items.len());
        }
        [("blocks", i), ("items", j), ("tool_call_ids", k)] => {
            within(path, *i, req.blocks.len());
            let b = i.unwrap_or_default();
            within(path, *j, req.blocks[b].items.len());
            within(
                path,
                *k,
                req.blocks[b].items[j.unwrap_or_default()].tool_call_ids.len(),
            );
        }
        _ => panic!("unexpected field path {path:?}"),
    }
}

/// Panics unless `path` names a field of `req`.
pub fn check_compact_path(path: &str, req: &CompactRequest) {
    match parse(path).as_slice() {
        [("model" | "target_tokens", None)] => {}
        [("pinned", i), ("content", None)] => within(path, *i, req.pinned.len()),
        [("messages", i), ("role" | "content", None)] => within(path, *i, req.messages.len()),
        [("messages", i), ("content", j), rest @ ..] => {
            within(path, *i, req.messages.len());
            let m = i.unwrap_or_default();
            within(path, *j, req.messages[m].content.len());
            assert!(
                matches!(
                    rest,
                    [("tool_use", None), ("id" | "name", None)]
                        | [("tool_result", None), ("tool_use_id", None)]
                ),
                "unexpected field path {path:?}"
            );
        }
        _ => panic!("unexpected field path {path:?}"),
    }
}
