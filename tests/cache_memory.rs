//! The count cache's configured weight bounds its real memory: filling it far
//! past its bound grows the resident set by no more than the weight it
//! reports (plus a small allowance for the allocator). Alone in its test
//! binary, so no other test allocates while it measures.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use context_assembler::telemetry::process;
use context_assembler::tokens::cache::CountCache;

fn resident() -> u64 {
    process::read().expect("/proc/self on Linux").resident_bytes
}

#[cfg(target_os = "linux")]
#[test]
fn resident_memory_stays_within_the_configured_weight() {
    const BUDGET: u64 = 32 << 20;
    let cache: CountCache = CountCache::new(BUDGET);
    let before = resident();
    // Three times what fits: eviction must keep it at the bound.
    let entry_bytes = u64::from(CountCache::<u32>::ENTRY_BYTES);
    // A few dozen bytes per count (moka took 357).
    assert!(entry_bytes <= 64, "{entry_bytes} bytes per entry");
    let fits = BUDGET / entry_bytes;
    let key = |i: u64| {
        let mut key = [0u8; 32];
        key[..8].copy_from_slice(&i.to_le_bytes());
        key[8..16].copy_from_slice(&i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_le_bytes());
        key
    };
    let value = |i: u64| u32::try_from(i % 1000).unwrap();
    for i in 0..3 * fits {
        cache.insert(key(i), value(i));
    }
    // Nothing hit in between: the newest entries are the ones kept.
    let last = 3 * fits - 1;
    assert_eq!(cache.get(&key(last)), Some(value(last)));
    assert_eq!(cache.get(&key(0)), None);
    let held = cache.weighted_bytes();
    let entries = cache.entry_count();
    let grown = resident().saturating_sub(before);
    let per_entry = grown as f64 / entries as f64;
    println!("{entries} entries, {held} bytes of weight, resident +{grown} bytes ({per_entry:.0} per entry)");
    assert!(held <= BUDGET, "weight {held} over the budget {BUDGET}");
    // Full, and the shards' rounding loses under 1%.
    assert_eq!(entries, cache.capacity());
    assert!(entries * 100 >= fits * 99, "holds {entries} of {fits}");
    // 4 MiB for the allocator's slack.
    assert!(
        grown <= held + (4 << 20),
        "resident grew {grown} bytes for {held} bytes of weight"
    );
}
