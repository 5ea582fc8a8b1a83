//! Arbitrary bytes as an `AssembleRequest`, a `CompactRequest` and an
//! `AssembleBatchRequest`: conversion never panics, refuses exactly the
//! wire's bad fields, survives the wire both ways, and what validates is
//! assembled or compacted under the same checks as the structured targets.
//!
//! `FUZZ_WRITE_SEEDS=<dir>` writes the seed corpus into `<dir>` and exits.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(
    init: {
        if let Some(dir) = std::env::var_os("FUZZ_WRITE_SEEDS") {
            if let Err(e) = fuzz_support::seeds::write(std::path::Path::new(&dir)) {
                eprintln!("writing seeds: {e}");
                std::process::exit(1);
            }
            std::process::exit(0);
        }
    },
    |data: &[u8]| fuzz_support::convert_check::check_bytes(data)
);
