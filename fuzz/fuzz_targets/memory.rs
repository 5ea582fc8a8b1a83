//! Arbitrary text as a model's output to Retain: the parser never panics,
//! every block and problem points at its opening tag in the original text,
//! private text never reaches a parsed field, and what parses survives the
//! renderer's escaping (a recalled memory's body is plain text).
#![no_main]

use context_assembler::memory::MemoryBody;
use context_assembler::memory::model::BUILTIN_TYPES;
use context_assembler::memory::parse;
use libfuzzer_sys::fuzz_target;

/// A marker only the fuzzer's `<private>` spans hold: when the input
/// holds it outside every private span (or a reference might spell it),
/// the check is skipped.
const MARKER: &str = "PRIVATEMARK";

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let types: Vec<String> = BUILTIN_TYPES.iter().map(|t| (*t).to_owned()).collect();
    let parsed = parse::parse_model_output(text, &types);
    fuzz_support::memory_parse::check_blocks(text, &parsed);
    for b in &parsed.blocks {
        if let MemoryBody::Observation(o) = &b.content {
            assert!(types.contains(&o.kind), "an unknown type was accepted");
        }
    }
    assert!(parsed.blocks.len() <= parse::MAX_BLOCKS);
    let (stripped, _) = parse::strip_private(text);
    if !stripped.contains(MARKER) && !stripped.contains('&') {
        for b in &parsed.blocks {
            let all = format!("{:?}", b.content);
            assert!(!all.contains(MARKER), "private text reached a parsed field");
        }
    }
});
