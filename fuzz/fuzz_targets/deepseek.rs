//! Arbitrary bytes (lossy UTF-8): DeepSeek V3's hand-written pre-tokenizer
//! cuts the pieces Hugging Face's `tokenizers` cuts with the same
//! `pre_tokenizer`, and a small folder of DeepSeek's shape counts and
//! encodes fast as the reference does. See `fuzz_support::deepseek_check`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| fuzz_support::deepseek_check::run(data));
