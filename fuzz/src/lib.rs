//! Support for the fuzz targets in `fuzz_targets/`: structured inputs, the
//! invariants each target asserts, and the seed corpus. See README.md.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use context_assembler::assemble::{Assembler, Policy};
use context_assembler::prompt::BlockKind;
use context_assembler::vocab::Role;

pub mod assemble_check;
pub mod assemble_input;
pub mod compact_check;
pub mod compact_input;
pub mod convert_check;
pub mod deepseek_check;
pub mod memory_parse;
pub mod paths;
pub mod pretok_check;
pub mod seeds;
pub mod text;

/// The embedded default catalog plus `system-ctx` (context message as
/// system, priorities reversed) and `drop-turns` (turns dropped rather than
/// summarized, and ranked above context), so that policies are part of what
/// is fuzzed.
pub fn catalog() -> context_assembler::assemble::Catalog {
    let mut catalog = context_assembler::config::default_catalog();
    let mut reversed = Policy {
        context_role: Role::System,
        ..Policy::default()
    };
    reversed.priorities.reverse();
    let drop_turns = Policy {
        compact_turns: false,
        priorities: BlockKind::ALL.map(|k| 10 - k.default_priority()),
        ..Policy::default()
    };
    let extra: BTreeMap<String, Arc<Policy>> = [
        ("system-ctx".to_owned(), Arc::new(reversed)),
        ("drop-turns".to_owned(), Arc::new(drop_turns)),
    ]
    .into_iter()
    .collect();
    catalog.policies.extend(extra);
    catalog
}

/// True one time in `n`, and false once the input is used up, so that a
/// short input means the common case (`Unstructured::ratio` is true then).
pub fn one_in(u: &mut arbitrary::Unstructured<'_>, n: u32) -> arbitrary::Result<bool> {
    Ok(u.int_in_range(1..=n)? == n)
}

/// Whether `FUZZ_DEBUG` is set: the targets then print one line per input
/// saying what happened (to judge a corpus: how many inputs are assembled,
/// refused, overflow), e.g. `FUZZ_DEBUG=1 fuzz/target/.../assemble -runs=0 corpus/assemble`.
pub fn debug() -> bool {
    static DEBUG: OnceLock<bool> = OnceLock::new();
    *DEBUG.get_or_init(|| std::env::var_os("FUZZ_DEBUG").is_some())
}

/// Prints `line` when [`debug`] is on.
pub fn note(line: impl FnOnce() -> String) {
    if debug() {
        eprintln!("fuzz: {}", line());
    }
}

/// One assembler for the whole run: its caches hold token counts keyed by
/// tokenizer and bytes, which never change, so sharing it across inputs
/// keeps every input reproducible alone while exercising warm paths.
pub fn assembler() -> Arc<Assembler> {
    static ASSEMBLER: OnceLock<Arc<Assembler>> = OnceLock::new();
    ASSEMBLER
        .get_or_init(|| {
            let a = Assembler::new(catalog(), 8 << 20);
            a.warm();
            Arc::new(a)
        })
        .clone()
}

/// The scope rule, written apart from the production check (so the oracle
/// does not share its bugs): an item is visible when the principal holds
/// every one of its required scopes.
pub fn may_see(principal: &context_assembler::prompt::Principal, required: &[String]) -> bool {
    required.iter().all(|r| principal.scopes.iter().any(|s| s == r))
}
