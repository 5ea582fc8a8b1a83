//! A structured conversation compacted over one to four rounds by one
//! `Compactor` (its breaker sees every round): never panics; counts equal a
//! from-scratch recount; no tool call is separated from its result; the
//! outcome agrees with the trigger and target. See
//! `fuzz_support::compact_check`.
#![no_main]

use fuzz_support::compact_input::CompactInput;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: CompactInput| fuzz_support::compact_check::run(&input));
