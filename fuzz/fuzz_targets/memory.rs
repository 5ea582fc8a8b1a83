//! Arbitrary text as a model's output to Retain: the parser never panics,
//! every block and problem points at its opening tag in the original text,
//! private text changes nothing that parses (an oracle apart from the
//! parser: markers a plain scan finds in private spans are swapped for
//! other words, and both texts must parse the same), and what parses survives the
//! renderer's escaping (a recalled memory's body is plain text).
#![no_main]

use context_assembler::memory::MemoryBody;
use context_assembler::memory::model::BUILTIN_TYPES;
use context_assembler::memory::parse;
use libfuzzer_sys::fuzz_target;

/// A word the seeds and the dictionary put inside `<private>` spans.
const MARKER: &str = "PRIVATEMARK";
/// What [`swap_private_markers`] puts in its place (same length, letters).
const SWAPPED: &str = "PUBLICWORDS";

/// The oracle, apart from the parser's own private-span code: `text` with
/// every [`MARKER`] that a plain scan finds inside a private span replaced
/// by [`SWAPPED`], or `None` when it finds none. The scan is conservative:
/// a span opens only at the exact `<private>` and every spelling that might
/// close one (any `</private`, in any case) closes them all, so a marker it
/// calls private is private under any reading. Private text must not change
/// what parses, so the two texts must parse the same.
fn swap_private_markers(text: &str) -> Option<String> {
    let lower = text.to_ascii_lowercase();
    let mut out = String::with_capacity(text.len());
    let (mut depth, mut at, mut swapped) = (0usize, 0usize, false);
    while at < text.len() {
        let rest = &lower[at..];
        if rest.starts_with("</private") {
            depth = 0;
        } else if rest.starts_with("<private>") {
            depth += 1;
        }
        if depth > 0 && text[at..].starts_with(MARKER) {
            out.push_str(SWAPPED);
            at += MARKER.len();
            swapped = true;
            continue;
        }
        let c = text[at..].chars().next()?;
        out.push(c);
        at += c.len_utf8();
    }
    swapped.then_some(out)
}

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
    // Private text changes nothing that parses: not a field, not a
    // problem, not an offset (entities, CDATA and all).
    if let Some(swapped) = swap_private_markers(text) {
        let other = parse::parse_model_output(&swapped, &types);
        assert_eq!(
            format!("{:?}", parsed),
            format!("{:?}", other),
            "private text changed what parsed"
        );
    }
});
