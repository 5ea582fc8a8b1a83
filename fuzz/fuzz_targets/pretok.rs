//! Arbitrary bytes (lossy UTF-8): the hand-written cl100k/o200k
//! pre-tokenizer cuts the same pieces as bpe-openai's regex split. See
//! `fuzz_support::pretok_check`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| fuzz_support::pretok_check::run(data));
