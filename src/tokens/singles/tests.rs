use proptest::prelude::*;
use rustc_hash::FxHashSet;

use super::*;
use crate::tokens::Encoding;

use std::sync::OnceLock;

/// Every token of a vocabulary.
fn vocabulary(encoding: Encoding) -> Vec<&'static [u8]> {
    encoding.tokens().collect()
}

/// Every token of a vocabulary, as a reference set, built once.
fn reference(encoding: Encoding) -> &'static FxHashSet<&'static [u8]> {
    static SETS: [OnceLock<FxHashSet<&'static [u8]>>; 2] = [OnceLock::new(), OnceLock::new()];
    let at = Encoding::ALL.iter().position(|&e| e == encoding).unwrap_or(0);
    SETS[at].get_or_init(|| vocabulary(encoding).into_iter().collect())
}

/// The longest run of occupied slots: what bounds a lookup's probes.
fn longest_probe(singles: &Singles) -> usize {
    let (mut longest, mut run) = (0, 0);
    // Twice round, so a run that wraps is measured whole.
    for &s in singles.slots.iter().chain(singles.slots.iter()) {
        run = if s == 0 { 0 } else { run + 1 };
        longest = longest.max(run);
    }
    longest.min(singles.slots.len())
}

#[test]
fn packing_keeps_every_byte_and_the_length() {
    let bytes: Vec<u8> = (1..=INLINE as u8).map(|b| b.wrapping_mul(37)).collect();
    for n in 1..=INLINE {
        let packed = pack(&bytes[..n]).to_le_bytes();
        assert_eq!(&packed[..n], &bytes[..n], "{n}");
        assert!(packed[n..15].iter().all(|&b| b == 0), "{n}");
        assert_eq!(usize::from(packed[15]), n);
    }
}

/// Every token is found, and a token with one byte more, less or changed
/// is found exactly when the reference set holds it; the longest probe is
/// short.
#[test]
fn every_token_is_found_and_near_misses_are_not() {
    for encoding in Encoding::ALL {
        let tokens = vocabulary(encoding);
        let reference = reference(encoding);
        let singles = Singles::new(tokens.iter().copied());
        let mut probes = 0;
        for &t in &tokens {
            assert!(singles.contains(t), "{encoding:?} {t:?}");
            let mut near = vec![t.to_vec(), t[..t.len() - 1].to_vec(), [t, b"\x00"].concat()];
            let mut changed = t.to_vec();
            changed[0] ^= 0x20;
            near.push(changed);
            for n in &near {
                assert_eq!(
                    singles.contains(n),
                    reference.contains(n.as_slice()),
                    "{encoding:?} {n:?}"
                );
                probes += 1;
            }
        }
        assert!(probes > 400_000);
        assert_eq!(
            singles.longest(),
            tokens.iter().map(|t| t.len()).max().unwrap_or(0)
        );
        assert!(
            longest_probe(&singles) < 64,
            "{encoding:?}: {}",
            longest_probe(&singles)
        );
        assert!(!singles.contains(b""));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// Arbitrary byte strings, short and long, ASCII-heavy and not: the
    /// answer is the reference set's.
    #[test]
    fn membership_is_the_reference_sets(
        bytes in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..20),
            "[ a-z.,'\\n]{0,18}".prop_map(String::into_bytes),
            "\\PC{0,6}".prop_map(String::into_bytes),
        ],
    ) {
        for encoding in Encoding::ALL {
            prop_assert_eq!(encoding.singles().contains(&bytes), reference(encoding).contains(bytes.as_slice()), "{:?} {:?}", encoding, bytes);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// A piece looked up where it stands in a text (packed from one load
    /// past its end where the text allows) is answered as the piece alone:
    /// every slice of the text, up to the pieces past [`INLINE`] bytes and
    /// those within 16 bytes of the end, which take the slower way.
    #[test]
    fn a_piece_in_its_text_is_answered_as_the_piece_alone(
        text in prop_oneof![
            "[ a-zA-Z.,'\\n]{0,40}".prop_map(String::into_bytes),
            prop::collection::vec(any::<u8>(), 0..40),
        ],
    ) {
        for encoding in Encoding::ALL {
            let singles = encoding.singles();
            for at in 0..=text.len() {
                for len in 0..=(text.len() - at).min(INLINE + 2) {
                    let piece = &text[at..at + len];
                    prop_assert_eq!(
                        singles.contains_in(&text, at, len),
                        reference(encoding).contains(piece),
                        "{:?} {:?} at {} len {}", encoding, text, at, len
                    );
                }
            }
        }
    }
}
