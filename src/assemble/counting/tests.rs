use super::*;
use crate::tokens::Encoding;
use crate::tokens::digest::hashed_bytes;

/// Bytes hashed on this thread while `f` runs.
fn hashed(f: impl FnOnce()) -> u64 {
    let before = hashed_bytes();
    f();
    hashed_bytes() - before
}

/// A measurement of a unit offered room hashes the unit once, whether the
/// run is full or an inline try (which looks the count up before it may
/// count): counted in bytes, not timed. The try looked the key up by one
/// digest and counted under another, and hashed each new unit twice.
#[test]
fn a_count_within_a_limit_hashes_its_text_once() {
    let tok = Tokenizer::exact(Encoding::O200kBase);
    let caches = Caches::new(1 << 20);
    let cancel = Cancel::new();
    let text = crate::workload::prose(&mut crate::workload::Rng::new(7), 3_000);
    let exact = tok.count(&text);
    for (run, allowance) in [
        ("full", Allowance::unbounded()),
        ("inline", Allowance::bytes(1 << 20)),
    ] {
        // New to the cache each time: the run counts it.
        let text = format!("{run} {text}");
        let counter = Counter::new(&caches, &tok, &cancel, &allowance);
        let mut got = None;
        let bytes = hashed(|| got = counter.count_at_most(&text, exact + 100));
        assert_eq!(got, Some(tok.count(&text)), "{run}: counted exactly");
        assert_eq!(bytes, text.len() as u64, "{run}: hashed its text once");
        // Counted before: a lookup, one digest again.
        let bytes = hashed(|| got = counter.count_at_most(&text, exact + 100));
        assert_eq!(got, Some(tok.count(&text)), "{run}: found counted");
        assert_eq!(bytes, text.len() as u64, "{run}: hashed once to find it");
    }
    assert!(!cancel.is_cancelled(), "both runs could afford the text");
}

/// A try counts past [`INLINE_COUNT_BYTES`] only within [`TRY_TIME`] of its
/// start; a full run, anything.
#[test]
fn a_try_counts_past_the_busy_allowance_only_in_its_time() {
    let most = INLINE_COUNT_BYTES;
    // Begun later than now: always within its time.
    let quiet = Allowance::bytes_from(4 * most, Instant::now() + Duration::from_secs(3600));
    assert!(quiet.take(most), "the busy allowance");
    assert!(quiet.take(2 * most), "more, within the time");
    assert!(!quiet.take(most + 1), "not more than given");
    let late = Allowance::bytes_from(4 * most, Instant::now() - TRY_TIME * 2);
    assert!(late.take(most), "the busy allowance, whatever the time");
    assert!(!late.take(1), "more, past the time");
    let busy = Allowance::bytes_from(most, Instant::now() - TRY_TIME * 2);
    assert!(busy.take(most), "the busy allowance takes no account of time");
    assert!(!busy.take(1));
    assert!(Allowance::unbounded().take(usize::MAX));
}
