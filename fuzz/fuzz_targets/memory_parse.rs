//! The lenient parser of model output (issue 16): arbitrary bytes never make
//! it panic or work more than a constant per input byte (it is fed 4 MiB of
//! hostile text), and observations whose fields hold code and markup,
//! written raw, escaped or in CDATA, parse back field for field, byte for
//! byte (after private stripping).
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use context_assembler::memory::MemoryBody;
use context_assembler::memory::model::BUILTIN_TYPES;
use context_assembler::memory::parse;
use fuzz_support::memory_parse::Generated;
use libfuzzer_sys::fuzz_target;

/// Most bytes the parser may look at per input byte, and a constant for
/// short inputs (the unit test's hostile shapes need at most 7).
const WORK_PER_BYTE: u64 = 16;
const WORK_CONSTANT: u64 = 64;

fn parse_linear(text: &str, types: &[String]) -> parse::Parsed {
    let (parsed, work) = parse::parse_model_output_metered(text, types);
    let allowed = WORK_PER_BYTE * text.len() as u64 + WORK_CONSTANT;
    assert!(
        work <= allowed,
        "{work} bytes looked at for {} input bytes",
        text.len()
    );
    parsed
}

fuzz_target!(|data: &[u8]| {
    let types: Vec<String> = BUILTIN_TYPES.iter().map(|t| (*t).to_owned()).collect();

    let text = String::from_utf8_lossy(data);
    let parsed = parse_linear(&text, &types);
    fuzz_support::memory_parse::check_blocks(&text, &parsed);
    assert!(parsed.blocks.len() + parsed.problems.len() <= parse::MAX_BLOCKS + 1);

    let Ok(generated) = Generated::arbitrary(&mut Unstructured::new(data)) else {
        return;
    };
    let parsed = parse_linear(&generated.text, &types);
    assert_eq!(parsed.problems, vec![], "{:?}", generated.text);
    let got: Vec<MemoryBody> = parsed.blocks.into_iter().map(|b| b.content).collect();
    let want: Vec<MemoryBody> = generated
        .expected
        .into_iter()
        .map(MemoryBody::Observation)
        .collect();
    assert_eq!(got, want, "{:?}", generated.text);
});
