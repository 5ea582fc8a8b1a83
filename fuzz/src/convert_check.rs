//! Wire -> domain conversion: bytes that decode as a request either convert
//! or are refused with exactly the field violations the wire holds; what
//! converts survives the wire both ways; what validates is assembled (or
//! compacted) and checked like the structured targets do.

use context_assembler::assemble::{self as domain, AssembleError, batch};
use context_assembler::compact;
use context_assembler::grpc::convert::message_to_wire;
use context_assembler::grpc::pb;
use context_assembler::prompt;
use context_assembler::prompt_cache::tools;
use context_assembler::vocab;
use prost::Message;

use crate::{assemble_check, paths};

/// Decodes `data` as each request type and checks each that decodes.
pub fn check_bytes(data: &[u8]) {
    if let Ok(wire) = pb::AssembleRequest::decode(data)
        && let Some(req) = assemble_request(wire)
    {
        assemble_valid(&req);
    }
    if let Ok(wire) = pb::CompactRequest::decode(data) {
        compact_request(wire);
    }
    if let Ok(wire) = pb::AssembleBatchRequest::decode(data) {
        batch_request(wire);
    }
}

/// Re-encoding a decoded message and decoding it again gives the same
/// message (compared by bytes and by `Debug`, so a NaN score compares equal
/// to itself).
fn survives_the_wire<M: Message + Default + std::fmt::Debug>(m: &M) {
    let bytes = m.encode_to_vec();
    let back = M::decode(bytes.as_slice()).expect("own encoding decodes");
    assert_eq!(back.encode_to_vec(), bytes, "re-encoding differs");
    assert_eq!(format!("{back:?}"), format!("{m:?}"), "decode(encode(m)) != m");
}

/// The violations conversion must report for `w`, in order: unknown
/// segment kinds, then per block an unset or unknown kind and unknown item
/// roles. Computed from the wire values alone.
fn expected_assemble_violations(w: &pb::AssembleRequest) -> Vec<String> {
    let mut v = Vec::new();
    for (i, s) in w.static_segments.iter().enumerate() {
        if !(0..=4).contains(&s.kind) {
            v.push(format!("static_segments[{i}].kind"));
        }
    }
    for (bi, b) in w.blocks.iter().enumerate() {
        if !(1..=6).contains(&b.kind) {
            v.push(format!("blocks[{bi}].kind"));
        }
        for (ii, it) in b.items.iter().enumerate() {
            if !(0..=4).contains(&it.role) {
                v.push(format!("blocks[{bi}].items[{ii}].role"));
            }
        }
    }
    v
}

fn fields(e: &AssembleError) -> Vec<String> {
    paths::violations(e).iter().map(|v| v.field.clone()).collect()
}

/// Converts one wire request, checking the error or the round trips.
/// Returns the domain request when it converts.
pub fn assemble_request(wire: pb::AssembleRequest) -> Option<prompt::AssembleRequest> {
    crate::note(|| format!("AssembleRequest {wire:#?}"));
    survives_the_wire(&wire);
    let expected = expected_assemble_violations(&wire);
    match prompt::AssembleRequest::try_from(wire.clone()) {
        Err(e) => {
            assert_eq!(fields(&e), expected, "conversion reported other fields");
            None
        }
        Ok(req) => {
            assert!(expected.is_empty(), "converted despite {expected:?}");
            // Domain -> wire -> domain is the identity.
            let again = pb::AssembleRequest::from(req.clone());
            survives_the_wire(&again);
            let back = prompt::AssembleRequest::try_from(again.clone()).expect("own wire form converts");
            assert_eq!(format!("{back:?}"), format!("{req:?}"), "domain round trip");
            assert_eq!(
                pb::AssembleRequest::from(back).encode_to_vec(),
                again.encode_to_vec()
            );
            // Nothing the wire said was lost on the way in.
            // An absent principal becomes an empty one, an unset segment
            // kind a system segment. A recall is not part of the domain
            // request: the service runs it before converting.
            let mut expect = wire;
            expect.recall = None;
            expect.principal.get_or_insert_with(pb::Principal::default);
            for s in &mut expect.static_segments {
                if s.kind == 0 {
                    s.kind = pb::SegmentKind::System.into();
                }
            }
            assert_eq!(
                again.encode_to_vec(),
                expect.encode_to_vec(),
                "conversion lost a field"
            );
            // Canonical tool JSON is a fixed point.
            if let Ok(canon) = tools::canonicalize(&req.tools) {
                assert_eq!(
                    tools::canonicalize(&canon).as_ref(),
                    Ok(&canon),
                    "canonical JSON is not stable"
                );
            }
            Some(req)
        }
    }
}

/// Validates a converted request; what validates is assembled and checked.
fn assemble_valid(req: &prompt::AssembleRequest) {
    let asm = crate::assembler();
    match domain::validate::validate(req, &asm.catalog()) {
        Err(v) => {
            let e = AssembleError::InvalidArgument(v);
            for f in paths::violations(&e) {
                paths::check_assemble_path(&f.field, req);
            }
        }
        Ok(_) => assemble_check::assemble_and_check(&asm, req),
    }
}

/// Converts a Compact request: the violations are exactly the wire's
/// missing or unknown roles and empty content blocks; what converts
/// survives the wire and is compacted through the structured checks.
fn compact_request(wire: pb::CompactRequest) {
    crate::note(|| format!("CompactRequest {wire:#?}"));
    survives_the_wire(&wire);
    let mut expected = Vec::new();
    for (i, m) in wire.messages.iter().enumerate() {
        if !(1..=4).contains(&m.role) {
            expected.push(format!("messages[{i}].role"));
        }
        for (j, c) in m.content.iter().enumerate() {
            if c.block.is_none() {
                expected.push(format!("messages[{i}].content[{j}]"));
            }
        }
    }
    let items = context_assembler::grpc::convert::compact_items(&wire);
    assert!(items >= wire.messages.len() + wire.pinned.len());
    match compact::CompactRequest::try_from(wire.clone()) {
        Err(e) => {
            let got: Vec<String> = paths::compact_violations(&e)
                .iter()
                .map(|v| v.field.clone())
                .collect();
            assert_eq!(got, expected, "conversion reported other fields");
        }
        Ok(req) => {
            assert!(expected.is_empty(), "converted despite {expected:?}");
            let back: Vec<pb::ConversationMessage> =
                req.messages.iter().cloned().map(message_to_wire).collect();
            assert_eq!(back, wire.messages, "messages do not survive the wire");
            let asm = crate::assembler();
            let compactor = compact::Compactor::new(asm.clone());
            let spec = asm.catalog().models.resolve(&req.model).cloned();
            match compactor.compact(req.clone(), &vocab::Cancel::new()) {
                Ok(out) => {
                    let spec = spec.expect("compacted with a known model");
                    crate::compact_check::check(&req, &spec.tokenizer, spec.reads_thinking(), &out);
                    // The answer survives the wire.
                    let resp = pb::CompactResponse::from(out);
                    survives_the_wire(&resp);
                }
                Err(e) => {
                    for v in paths::compact_violations(&e) {
                        paths::check_compact_path(&v.field, &req);
                    }
                }
            }
        }
    }
}

/// Converts each request of a batch alone; the converted ones are
/// assembled as a batch, and each result equals what Assemble answers.
fn batch_request(wire: pb::AssembleBatchRequest) {
    survives_the_wire(&wire);
    let requests: Vec<prompt::AssembleRequest> =
        wire.requests.into_iter().filter_map(assemble_request).collect();
    let asm = crate::assembler();
    let out = batch::assemble_batch(&asm, &asm.catalog(), requests.clone(), &vocab::Cancel::new());
    assert_eq!(out.results.len(), requests.len());
    let ok: Vec<usize> = (0..requests.len()).filter(|&i| out.results[i].is_ok()).collect();
    let mut members: Vec<usize> = out.groups.iter().flat_map(|g| g.members.clone()).collect();
    members.sort_unstable();
    assert_eq!(members, ok, "groups do not partition the successes");
    let mut order = out.order.clone();
    order.sort_unstable();
    assert_eq!(order, ok, "dispatch order is not a permutation of the successes");
    for g in &out.groups {
        assert_eq!(g.warmup, g.members[0]);
        assert_eq!(
            g.tokens_saved,
            u64::from(g.shared_prefix_tokens) * (g.members.len() as u64 - 1)
        );
    }
    for (req, result) in requests.into_iter().zip(out.results) {
        let alone = asm.assemble(req);
        match (result, alone) {
            (Ok(b), Ok(a)) => {
                assert_eq!(b.messages, a.messages, "batch and Assemble disagree");
                assert_eq!(b.usage, a.usage, "batch and Assemble disagree");
                assert_eq!(b.decisions, a.decisions, "batch and Assemble disagree");
            }
            (Err(b), Err(a)) => assert_eq!(b, a, "batch and Assemble disagree"),
            (b, a) => panic!("batch and Assemble disagree: {b:?} vs {a:?}"),
        }
    }
}
