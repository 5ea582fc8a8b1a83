//! The bytes of every token of a vocabulary, for asking whether a
//! pre-tokenizer piece is itself one token (most pieces of prose and code
//! are, and skip the BPE encoder).
//!
//! Counting asks this of every piece, so it is built for that one question.
//! A token of at most [`INLINE`] bytes is packed with its length into one
//! `u128` of an open-addressed table (linear probing, at most half full): a
//! lookup packs the piece the same way and compares whole slots, with no
//! pointer to follow and no `memcmp` call. The few longer tokens are in a
//! hash set. The table is built once from the vocabulary and never changes,
//! so no caller can lengthen a probe: the longest run of occupied slots,
//! fixed at build time, bounds every lookup.

use rustc_hash::FxHashSet;

/// The longest token held inline (the slot's last byte is the length).
pub const INLINE: usize = 15;

/// Membership of byte strings in a fixed set of tokens.
pub struct Singles {
    /// Packed tokens; 0 is an empty slot (a packed token never is: its
    /// length byte is at least 1).
    slots: Box<[u128]>,
    /// `64 - log2(slots.len())`: a hash's top bits pick the first slot.
    shift: u32,
    /// Tokens longer than [`INLINE`] bytes.
    long: FxHashSet<Box<[u8]>>,
}

/// `bytes` (1 to [`INLINE`] of them) and their length in the last byte,
/// little-endian: two overlapping loads for 4 bytes and more, so no copy
/// loop and no `memcpy` call.
#[inline]
fn pack(bytes: &[u8]) -> u128 {
    let n = bytes.len();
    let word = |at: usize| u64::from_le_bytes(array(&bytes[at..at + 8]));
    let half = |at: usize| u64::from(u32::from_le_bytes(array(&bytes[at..at + 4])));
    let (lo, hi) = match n {
        8.. => {
            // bytes[8..n] shifted to the bottom of the high word.
            let hi = if n == 8 { 0 } else { word(n - 8) >> (8 * (16 - n)) };
            (word(0), hi)
        }
        4.. => {
            // bytes[4..n] after bytes[..4].
            let tail = half(n - 4) >> (8 * (8 - n));
            (half(0) | tail << 32, 0)
        }
        _ => {
            let lo = bytes
                .iter()
                .enumerate()
                .fold(0u64, |acc, (i, &b)| acc | u64::from(b) << (8 * i));
            (lo, 0)
        }
    };
    let len = (n as u128) << 120;
    u128::from(lo) | u128::from(hi) << 64 | len
}

/// The first `N` bytes of `bytes` (which holds exactly `N`).
#[inline]
fn array<const N: usize>(bytes: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(bytes);
    out
}

/// The slot a packed key's probe starts at.
#[inline]
fn start(key: u128, shift: u32) -> usize {
    let mixed = (key as u64) ^ ((key >> 64) as u64).rotate_left(29);
    (mixed.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> shift) as usize
}

impl Singles {
    /// The set of `tokens`.
    pub fn new<'t>(tokens: impl IntoIterator<Item = &'t [u8]>) -> Singles {
        let mut short = Vec::new();
        let mut long = FxHashSet::default();
        for t in tokens {
            match t.len() {
                0 => {}
                1..=INLINE => short.push(pack(t)),
                _ => {
                    long.insert(Box::from(t));
                }
            }
        }
        // At most half full: short probes, and misses end soon.
        let size = (short.len() * 2).next_power_of_two().max(2);
        let shift = 64 - size.trailing_zeros();
        let mut slots = vec![0u128; size].into_boxed_slice();
        let mask = size - 1;
        for key in short {
            let mut i = start(key, shift);
            while slots[i] != 0 && slots[i] != key {
                i = (i + 1) & mask;
            }
            slots[i] = key;
        }
        Singles { slots, shift, long }
    }

    /// Whether `bytes` is one of the tokens.
    #[inline]
    pub fn contains(&self, bytes: &[u8]) -> bool {
        match bytes.len() {
            0 => false,
            1..=INLINE => self.holds(pack(bytes)),
            _ => self.long.contains(bytes),
        }
    }

    /// [`Singles::contains`] of `text[at..at + len]`. Where the text holds
    /// 16 bytes from `at`, the piece is packed from one load, masked to its
    /// length: no branch on the length (a piece's length is what a branch
    /// predictor cannot guess).
    #[inline]
    pub fn contains_in(&self, text: &[u8], at: usize, len: usize) -> bool {
        if (1..=INLINE).contains(&len)
            && let Some(window) = text.get(at..at + 16)
        {
            let mut bytes = [0u8; 16];
            bytes.copy_from_slice(window);
            let key = u128::from_le_bytes(bytes) & ((1u128 << (8 * len)) - 1) | (len as u128) << 120;
            return self.holds(key);
        }
        text.get(at..at + len).is_some_and(|piece| self.contains(piece))
    }

    /// Whether the packed `key` is in the table.
    #[inline]
    fn holds(&self, key: u128) -> bool {
        let mask = self.slots.len() - 1;
        let mut i = start(key, self.shift);
        loop {
            let slot = self.slots[i];
            if slot == key {
                return true;
            }
            if slot == 0 {
                return false;
            }
            i = (i + 1) & mask;
        }
    }

    /// The longest token's length in bytes.
    pub fn longest(&self) -> usize {
        let short = self.slots.iter().map(|&s| (s >> 120) as usize).max().unwrap_or(0);
        self.long.iter().map(|t| t.len()).max().unwrap_or(0).max(short)
    }
}

#[cfg(test)]
mod tests;
