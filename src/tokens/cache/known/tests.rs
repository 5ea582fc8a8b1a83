use super::*;
use crate::tokens::Encoding;
use crate::tokens::cache::key as hashed_key;
use crate::tokens::digest::hashed_bytes;

/// A text of `len` bytes, distinct by `n`.
fn text(n: usize, len: usize) -> Vec<u8> {
    let mut t = format!("text {n}: ").into_bytes();
    t.resize(len, b'a' + (n % 26) as u8);
    t
}

/// Bytes this thread hashed through the digests while `f` ran, and what it
/// returned.
fn hashing<T>(f: impl FnOnce() -> T) -> (T, u64) {
    let before = hashed_bytes();
    let out = f();
    (out, hashed_bytes() - before)
}

/// A text is hashed at its first three sightings and kept at the third;
/// from the fourth on it is found by its bytes, not hashed, with the same
/// key.
#[test]
fn a_text_seen_three_times_is_found_without_hashing_it() {
    let tok = Tokenizer::exact(Encoding::O200kBase);
    let known = KnownKeys::new(1 << 20);
    let t = text(1, 3_000);
    let want = hashed_key(&tok, &t);
    let mut hashed = Vec::new();
    for _ in 0..5 {
        let (got, bytes) = hashing(|| known.key(&tok, &t));
        assert_eq!(got, want);
        hashed.push(bytes);
    }
    assert_eq!(hashed, [3_000, 3_000, 3_000, 0, 0]);
    assert_eq!(known.held_texts(), 1);
    assert_eq!(known.held_bytes(), 3_000 + 375 + ENTRY_BYTES);
}

/// A text kept under one tokenizer's key is not the key of the same bytes
/// under another's: each gets its own digest.
#[test]
fn the_same_bytes_under_another_tokenizer_get_that_tokenizers_key() {
    let a = Tokenizer::exact(Encoding::O200kBase);
    let b = Tokenizer::exact(Encoding::Cl100kBase);
    let known = KnownKeys::new(1 << 20);
    let t = text(2, 1_000);
    for _ in 0..3 {
        assert_eq!(known.key(&a, &t), hashed_key(&a, &t));
    }
    for _ in 0..3 {
        assert_eq!(known.key(&b, &t), hashed_key(&b, &t));
    }
    assert_ne!(hashed_key(&a, &t), hashed_key(&b, &t));
}

/// An estimate and the same estimate with measured frames key a text
/// apart (their counts are cached apart), and so does the table, whichever
/// keeps it first.
#[test]
fn a_framed_estimate_and_its_plain_self_get_their_own_keys() {
    use crate::tokens::tokenizer::MeasuredFrames;
    let plain = Tokenizer::estimate(Encoding::O200kBase, 10);
    let framed = plain.with_frames(MeasuredFrames {
        priming: 3,
        message: 4,
        system: 5,
    });
    let t = text(9, 1_500);
    assert_ne!(hashed_key(&plain, &t), hashed_key(&framed, &t));
    let known = KnownKeys::new(1 << 20);
    for _ in 0..4 {
        assert_eq!(known.key(&plain, &t), hashed_key(&plain, &t));
    }
    for _ in 0..4 {
        assert_eq!(known.key(&framed, &t), hashed_key(&framed, &t));
    }
}

/// A full table still takes the texts seen three times now: the CLOCK hand
/// makes room.
#[test]
fn a_full_table_makes_room_for_new_texts() {
    let tok = Tokenizer::exact(Encoding::O200kBase);
    let known = KnownKeys::new(1 << 16);
    for n in 0..200 {
        let t = text(2_000 + n, 2_000);
        for _ in 0..3 {
            known.key(&tok, &t);
        }
    }
    // Full, whatever slots the texts landed on: room for what is held and
    // no more (how many texts fit depends on the per-process seed).
    assert!(known.held_texts() > 10, "texts were kept");
    let known = KnownKeys {
        room: known.held_bytes(),
        ..known
    };
    let new = text(9_999, 2_000);
    for _ in 0..3 {
        known.key(&tok, &new);
    }
    let (got, bytes) = hashing(|| known.key(&tok, &new));
    assert_eq!(got, hashed_key(&tok, &new));
    assert_eq!(bytes, 0, "a new text is kept in a full table");
    assert!(known.held_bytes() <= known.room);
}

/// The hand spares a text found since it last passed and takes one that
/// was not.
#[test]
fn the_hand_takes_a_text_not_found_before_one_found() {
    let tok = Tokenizer::exact(Encoding::O200kBase);
    let known = KnownKeys::new(1 << 20);
    let (found, idle) = (text(20, 3_000), text(21, 3_000));
    for t in [&found, &idle] {
        for _ in 0..3 {
            known.key(&tok, t);
        }
    }
    known.key(&tok, &found);
    let holding = |t: &[u8]| {
        known
            .slots
            .iter()
            .position(|s| read(s).as_ref().is_some_and(|h| *h.text == *t))
    };
    let (a, b) = (holding(&found).expect("kept"), holding(&idle).expect("kept"));
    let other = (0..known.slots.len()).find(|i| ![a, b].contains(i)).unwrap();
    // Full: room for what is held and no more.
    let known = KnownKeys {
        room: known.held_bytes(),
        ..known
    };
    let need = 3_000 + 375 + ENTRY_BYTES;
    known.make_room(other, need);
    assert!(read(&known.slots[a]).is_some(), "the text found stays");
    assert!(read(&known.slots[b]).is_none(), "the text not found leaves");
    assert_eq!(known.held_bytes(), need);
}

/// A slot whose fast hash and key name match but whose bytes differ (a
/// collision of the fast hash, planted here) is not trusted: the text is
/// hashed and gets its own key.
#[test]
fn a_collision_of_the_fast_hash_costs_a_digest_not_a_wrong_key() {
    let tok = Tokenizer::exact(Encoding::O200kBase);
    let known = KnownKeys::new(1 << 20);
    let (t, other) = (text(3, 2_000), text(4, 2_000));
    for _ in 0..3 {
        known.key(&tok, &t);
    }
    // Plant `other`'s bytes in `t`'s entry, keeping `t`'s tag and key.
    for slot in &known.slots {
        if let Some(h) = write(slot).as_mut() {
            h.text = other.clone().into();
        }
    }
    let (got, bytes) = hashing(|| known.key(&tok, &t));
    assert_eq!(got, hashed_key(&tok, &t));
    assert_eq!(bytes, 2_000, "hashed, not found");
}

/// Texts seen twice (a fresh request's, keyed by an inline try and again by
/// the full run) are not copied and do not push out a kept one, even in a
/// table of a few slots where they land on it.
#[test]
fn a_fresh_requests_texts_leave_the_kept_ones_in_place() {
    let tok = Tokenizer::exact(Encoding::O200kBase);
    let known = KnownKeys::new(1 << 14);
    let slots = known.slots.len();
    assert!(slots <= 64, "{slots}");
    let known = KnownKeys {
        room: 1 << 20,
        ..known
    };
    let warm = text(5, 4_000);
    for _ in 0..3 {
        known.key(&tok, &warm);
    }
    for n in 0..10 * slots {
        let fresh = text(1_000 + n, 600);
        for _ in 0..2 {
            assert_eq!(known.key(&tok, &fresh), hashed_key(&tok, &fresh));
        }
    }
    let (got, bytes) = hashing(|| known.key(&tok, &warm));
    assert_eq!(got, hashed_key(&tok, &warm));
    assert_eq!(bytes, 0, "still kept");
    assert_eq!(known.held_texts(), 1);
}

/// Texts shorter than [`MIN_TEXT_BYTES`] or as long as
/// [`SHORT_TEXT_BYTES`] are always hashed, never kept.
#[test]
fn texts_outside_the_kept_lengths_are_always_hashed() {
    let tok = Tokenizer::exact(Encoding::O200kBase);
    let known = KnownKeys::new(1 << 22);
    for len in [0, 1, MIN_TEXT_BYTES - 1, SHORT_TEXT_BYTES, SHORT_TEXT_BYTES + 1] {
        let t = text(len, len.max(12));
        for _ in 0..3 {
            let (got, bytes) = hashing(|| known.key(&tok, &t));
            assert_eq!(got, hashed_key(&tok, &t));
            assert_eq!(bytes, t.len() as u64);
        }
    }
    assert_eq!(known.held_texts(), 0);
    let edge = text(7, MIN_TEXT_BYTES);
    for _ in 0..3 {
        known.key(&tok, &edge);
    }
    let longest = text(8, SHORT_TEXT_BYTES - 1);
    for _ in 0..3 {
        known.key(&tok, &longest);
    }
    assert_eq!(known.held_texts(), 2, "both ends of the kept lengths");
}

proptest::proptest! {
    /// Whatever texts come, in any order and any number of times, each
    /// gets exactly the digest of its bytes, and the table holds no more
    /// than its bytes: the slots, the doorkeepers and each kept text.
    #[test]
    fn every_key_is_the_digest_and_the_table_stays_within_its_bytes(
        picks in proptest::collection::vec((0usize..40, proptest::bool::ANY), 1..300),
        max_bytes in 0u64..(1 << 18),
    ) {
        let toks = [Tokenizer::exact(Encoding::O200kBase), Tokenizer::exact(Encoding::Cl100kBase)];
        let known = KnownKeys::new(max_bytes);
        for (n, other) in picks {
            let tok = &toks[usize::from(other)];
            let t = text(n, 200 + n * 397);
            proptest::prop_assert_eq!(known.key(tok, &t), hashed_key(tok, &t));
        }
        let fixed = SLOT_BYTES as usize * known.slots.len();
        let kept: u64 = known
            .slots
            .iter()
            .filter_map(|s| read(s).as_deref().map(cost))
            .sum();
        proptest::prop_assert_eq!(kept, known.held_bytes());
        if max_bytes >= fixed as u64 {
            proptest::prop_assert!(fixed as u64 + kept <= max_bytes);
        } else {
            proptest::prop_assert_eq!(kept, 0);
        }
    }
}
