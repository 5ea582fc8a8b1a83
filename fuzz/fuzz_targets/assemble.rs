//! A small structured request assembled by the public `Assembler`: never
//! panics; on success the usage is within budget and equals a from-scratch
//! recount, filtered items never appear, the query is last, tool pairs are
//! intact; on a budget overflow the reported count is the least budget that
//! works. See `fuzz_support::assemble_check`.
#![no_main]

use fuzz_support::assemble_input::AssembleInput;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: AssembleInput| {
    fuzz_support::assemble_check::assemble_and_check(&fuzz_support::assembler(), &input.0);
});
