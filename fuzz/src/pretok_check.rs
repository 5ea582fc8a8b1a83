//! The `pretok` target: the hand-written pre-tokenizer
//! (`context_assembler::tokens::pretok`) against bpe-openai's regex split,
//! for both encodings, on arbitrary bytes read as UTF-8 (lossily).

use context_assembler::tokens::{Encoding, pretok};

/// Panics unless both splitters cut `data` (as lossy UTF-8) into the same
/// pieces, for cl100k_base and o200k_base.
pub fn run(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    for encoding in Encoding::ALL {
        let reference = match encoding {
            Encoding::Cl100kBase => bpe_openai::cl100k_base(),
            Encoding::O200kBase => bpe_openai::o200k_base(),
        };
        let Some(pieces) = pretok::split(encoding, &text) else {
            panic!("the class tables did not build");
        };
        let ours: Vec<&str> = pieces.collect();
        let theirs: Vec<&str> = reference.split(&text).collect();
        assert_eq!(ours, theirs, "{encoding:?} {text:?}");
    }
}
