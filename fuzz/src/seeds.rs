//! The seed corpus of the `convert` target: the repository's example
//! requests and small synthetic workloads, as protobuf bytes. Written by
//! the target itself when `FUZZ_WRITE_SEEDS=<dir>` is set (see
//! `fuzz_targets/convert.rs`), so the seeds always follow `examples/` and
//! the proto without a separate build.

use std::path::Path;

use context_assembler::grpc::pb;
use context_assembler::workload::{self, Shape};
use prost::Message;

const REQUEST_JSON: &str = include_str!("../../examples/request.json");
const COMPACT_JSON: &str = include_str!("../../examples/compact.json");

/// Variants of the example request that reach other paths: a budget the
/// non-cuttable content overflows, another encoding, the estimating model,
/// no budget override, and the other policy.
fn variants(base: &pb::AssembleRequest) -> Vec<pb::AssembleRequest> {
    let with = |f: &dyn Fn(&mut pb::AssembleRequest)| {
        let mut r = base.clone();
        f(&mut r);
        r
    };
    vec![
        with(&|r| r.max_input_tokens = Some(40)),
        with(&|r| r.model = "gpt-4".to_owned()),
        with(&|r| r.model = "claude-3-5-sonnet".to_owned()),
        with(&|r| r.max_input_tokens = None),
        with(&|r| r.policy = "memory-first".to_owned()),
    ]
}

/// The seeds, by file name.
pub fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let request: pb::AssembleRequest =
        serde_json::from_str(REQUEST_JSON).expect("examples/request.json parses");
    let compact: pb::CompactRequest =
        serde_json::from_str(COMPACT_JSON).expect("examples/compact.json parses");
    out.push(("example-request".to_owned(), request.encode_to_vec()));
    out.push(("example-compact".to_owned(), compact.encode_to_vec()));
    let mut small_trigger = compact.clone();
    small_trigger.target_tokens = Some(60);
    out.push(("example-compact-target".to_owned(), small_trigger.encode_to_vec()));
    let mut emergency = compact;
    emergency.context_length_exceeded = true;
    out.push(("example-compact-emergency".to_owned(), emergency.encode_to_vec()));
    for (i, v) in variants(&request).into_iter().enumerate() {
        out.push((format!("example-request-{i}"), v.encode_to_vec()));
    }
    let mut batch = pb::AssembleBatchRequest {
        requests: vec![request.clone()],
    };
    batch.requests.extend(variants(&request));
    out.push(("example-batch".to_owned(), batch.encode_to_vec()));
    for (i, (tokens, items)) in [(300, 2), (800, 4)].into_iter().enumerate() {
        let mut r = pb::AssembleRequest::from(workload::request(Shape::new(tokens, items), i as u64));
        r.max_input_tokens = Some(u32::try_from(tokens / 2).unwrap_or(u32::MAX));
        out.push((format!("workload-{tokens}"), r.encode_to_vec()));
    }
    out
}

/// Writes every seed into `dir` (created if missing).
pub fn write(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for (name, bytes) in seeds() {
        std::fs::write(dir.join(name), bytes)?;
    }
    Ok(())
}
