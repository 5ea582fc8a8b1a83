#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use proptest::prelude::*;

use super::*;

fn key(i: u32) -> Key {
    let mut k = [0u8; 32];
    k[..4].copy_from_slice(&i.to_le_bytes());
    k
}

/// A one-shard table of `entries` entries.
fn table(entries: u32) -> Clock<u32> {
    let t = Clock::new(u64::from(entries) * u64::from(entry_bytes::<u32>()));
    assert_eq!(t.shards.len(), 1);
    assert_eq!(t.capacity(), u64::from(entries));
    t
}

/// The index matches the entries: one slot per entry, each entry found
/// from its home by its key, each slot's tag its entry's.
fn check_index(t: &Clock<u32>) {
    for shard in t.shards.iter() {
        let s = lock(&shard.0);
        let used = s.slots.iter().filter(|&&slot| slot != 0).count();
        assert_eq!(used, s.entries.len(), "one slot per entry");
        assert!(s.entries.len() <= s.capacity);
        for (i, e) in s.entries.iter().enumerate() {
            let hash = t.hasher.hash_one(e.key);
            let (slot, at) = s.find(hash, &e.key).expect("every entry is found");
            assert_eq!(at, i);
            assert_eq!((s.slots[slot] >> 32) as u32, (hash >> 32) as u32);
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    Insert(u32, u32),
    Get(u32),
    Make(u32, u32),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        (0..64u32, any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
        (0..64u32).prop_map(Op::Get),
        (0..64u32, any::<u32>()).prop_map(|(k, v)| Op::Make(k, v)),
    ];
    proptest::collection::vec(op, 0..400)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Against a map that forgets nothing: the table answers a key's last
    /// value or nothing, never another value; it holds at most its
    /// capacity, and the index stays whole through evictions that shift
    /// probe runs (small tables wrap and collide all the time). With one
    /// shard and with four.
    #[test]
    fn the_table_answers_the_last_value_or_nothing(
        shards in prop_oneof![Just(1usize), Just(4)],
        per_shard in 0..40u32,
        ops in ops(),
    ) {
        let t = Clock::<u32>::sized(shards, per_shard as usize);
        prop_assert_eq!(t.shards.len(), shards);
        let capacity = per_shard * shards as u32;
        prop_assert_eq!(t.capacity(), u64::from(capacity));
        let mut model: HashMap<u32, u32> = HashMap::new();
        for op in ops {
            match op {
                Op::Insert(k, v) => {
                    t.insert(key(k), v);
                    model.insert(k, v);
                    if per_shard > 0 {
                        prop_assert_eq!(t.get(&key(k)), Some(v), "just inserted");
                    }
                }
                Op::Get(k) => {
                    let got = t.get(&key(k));
                    prop_assert!(got.is_none() || got == model.get(&k).copied(), "{:?} for {}", got, k);
                }
                Op::Make(k, v) => {
                    let before = t.get(&key(k));
                    let (got, made) = t.get_or_insert_with(key(k), || v);
                    prop_assert_eq!(made, before.is_none());
                    if made {
                        prop_assert_eq!(got, v);
                        model.insert(k, v);
                    } else {
                        prop_assert_eq!(Some(got), before);
                    }
                }
            }
            prop_assert!(t.held() <= u64::from(capacity));
            check_index(&t);
        }
    }
}

#[test]
fn the_clock_evicts_what_was_not_hit_since_the_hand_passed() {
    let t = table(8);
    for i in 0..8 {
        t.insert(key(i), i);
    }
    assert_eq!(t.held(), 8);
    t.get(&key(0));
    t.get(&key(3));
    // The hand clears 0's bit and takes 1, then 2; then clears 3's and takes 4.
    t.insert(key(8), 8);
    assert_eq!(t.get(&key(1)), None);
    assert_eq!(t.get(&key(0)), Some(0));
    t.insert(key(9), 9);
    assert_eq!(t.get(&key(2)), None);
    t.insert(key(10), 10);
    assert_eq!(t.get(&key(4)), None);
    for i in [0, 3, 5, 6, 7, 8, 9, 10] {
        assert_eq!(t.get(&key(i)), Some(i), "{i}");
    }
    // Every bit set: the hand clears them all and still makes room.
    t.insert(key(11), 11);
    assert_eq!(t.held(), 8);
    assert_eq!(t.get(&key(11)), Some(11));
    check_index(&t);
}

#[test]
fn a_replaced_value_keeps_its_entry() {
    let t = table(2);
    t.insert(key(1), 1);
    t.insert(key(1), 2);
    assert_eq!(t.held(), 1);
    assert_eq!(t.get(&key(1)), Some(2));
}

#[test]
fn an_empty_table_holds_nothing_and_still_makes_values() {
    let t = table(0);
    t.insert(key(1), 1);
    assert_eq!(t.get(&key(1)), None);
    assert_eq!(t.get_or_insert_with(key(1), || 5), (5, true));
    assert_eq!(t.held(), 0);
}

#[test]
fn a_large_table_is_sharded_and_fits_its_bytes() {
    let bytes = 64u64 << 20;
    let t: Clock<u32> = Clock::new(bytes);
    assert_eq!(t.shards.len(), MAX_SHARDS);
    let held = t.capacity() * u64::from(entry_bytes::<u32>());
    assert!(held <= bytes && held * 100 >= bytes * 99, "{held} of {bytes}");
    // The index's real size is within the entries' share of the weight.
    for shard in t.shards.iter() {
        let s = lock(&shard.0);
        let index = s.slots.len() * 8;
        let entries = s.capacity * std::mem::size_of::<Entry<u32>>();
        assert!(index + entries <= s.capacity * entry_bytes::<u32>() as usize + 8);
    }
    assert!(entry_bytes::<u32>() <= 64, "{}", entry_bytes::<u32>());
}

#[test]
fn concurrent_misses_of_one_key_make_it_once() {
    let t = table(16);
    let makes = AtomicUsize::new(0);
    let start = Barrier::new(8);
    let answers: Vec<(u32, bool)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| {
                s.spawn(|| {
                    start.wait();
                    t.get_or_insert_with(key(7), || {
                        makes.fetch_add(1, Ordering::SeqCst);
                        // Long enough that the others miss while it runs
                        // (the verdict holds however long they take).
                        std::thread::sleep(std::time::Duration::from_millis(20));
                        70
                    })
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(makes.load(Ordering::SeqCst), 1);
    assert_eq!(answers.iter().filter(|(_, made)| *made).count(), 1);
    assert!(answers.iter().all(|&(v, _)| v == 70));
    assert!(lock(&t.shards[0].0).flights.is_empty());
}

/// Runs `fail` as the maker of key 1 once three other callers wait on its
/// flight, and returns what they got: one of them makes the value, once,
/// and the others see it.
fn waiters_after(fail: impl FnOnce() -> Result<u32, ()> + Send) -> Vec<(u32, bool)> {
    const WAITERS: usize = 3;
    let t = table(16);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    // Until the flight's Arc has `n` holders (the list, the maker, each
    // waiter). The deadline only turns a hang into a failure.
    let until = |n: usize| loop {
        let holders = lock(&t.shards[0].0)
            .flights
            .first()
            .map_or(0, |(_, f)| Arc::strong_count(f));
        if holders >= n {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "no one joined the flight");
        std::thread::yield_now();
    };
    let joined = AtomicBool::new(false);
    let makes = AtomicUsize::new(0);
    let (got, mut waiters) = std::thread::scope(|s| {
        let maker = s.spawn(|| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                t.get_or_try_insert_with(key(1), || {
                    until(2 + WAITERS);
                    joined.store(true, Ordering::SeqCst);
                    fail()
                })
            }))
        });
        let waiters: Vec<_> = (0..WAITERS)
            .map(|_| {
                s.spawn(|| {
                    until(2);
                    t.get_or_insert_with(key(1), || {
                        makes.fetch_add(1, Ordering::SeqCst);
                        11
                    })
                })
            })
            .collect();
        let waiters: Vec<(u32, bool)> = waiters.into_iter().map(|w| w.join().unwrap()).collect();
        (maker.join().unwrap(), waiters)
    });
    assert!(joined.load(Ordering::SeqCst), "the waiters joined the flight");
    assert!(!matches!(got, Ok(Ok(_))), "the maker failed");
    assert_eq!(makes.load(Ordering::SeqCst), 1, "one waiter makes the value");
    assert_eq!(t.get(&key(1)), Some(11));
    assert!(lock(&t.shards[0].0).flights.is_empty());
    waiters.sort_unstable();
    waiters
}

#[test]
fn a_failed_maker_stores_nothing_and_a_waiter_makes_the_value() {
    assert_eq!(waiters_after(|| Err(())), [(11, false), (11, false), (11, true)]);
}

#[test]
fn a_panicking_maker_does_not_strand_its_waiters() {
    assert_eq!(
        waiters_after(|| panic!("the maker panics")),
        [(11, false), (11, false), (11, true)]
    );
}

#[test]
fn a_value_stored_while_one_is_made_is_kept() {
    let t = table(4);
    let made = t.get_or_insert_with(key(1), || {
        t.insert(key(1), 5);
        7
    });
    assert_eq!(made, (7, true));
    assert_eq!(t.get(&key(1)), Some(5));
    check_index(&t);
}

#[test]
fn threads_racing_on_a_small_table_never_see_another_keys_value() {
    // Values carry their key: whatever the interleaving, a key answers
    // only values stored under it, and the index is whole at the end.
    let t = Clock::<u32>::sized(2, 48);
    std::thread::scope(|s| {
        for thread in 0..4u32 {
            let t = &t;
            s.spawn(move || {
                let mut x = 0x9E37_79B9u32.wrapping_mul(thread + 1);
                for n in 0..20_000u32 {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    let k = x % 200;
                    let v = (k << 16) | (thread << 12) | (n & 0xfff);
                    let got = match x % 3 {
                        0 => {
                            t.insert(key(k), v);
                            None
                        }
                        1 => t.get(&key(k)),
                        _ => Some(t.get_or_insert_with(key(k), || v).0),
                    };
                    if let Some(got) = got {
                        assert_eq!(got >> 16, k, "key {k} answered {got:#x}");
                    }
                }
            });
        }
    });
    assert!(t.held() <= t.capacity());
    check_index(&t);
}
