//! The count keys of texts seen again, found by their bytes: a warm request
//! sends the same system prompt, evidence and turns as the last one, and
//! hashing each of them for its count key (SHA-256 at about 2 GB/s) was the
//! largest share of a warm `Assemble` (a quarter of its in-process time at
//! 4k). Here a text that was keyed three times is kept with its key; later
//! it is found by a fast non-cryptographic hash and compared byte for byte,
//! so the key it gets is exactly the digest of its bytes (a collision of the
//! fast hash only costs a miss: nothing is trusted that was not compared).
//!
//! - One table of slots, each a read-write lock over at most one text: the fast hash
//!   (xxh3, seeded at random per process, so a caller cannot aim texts at
//!   one slot) picks the slot.
//! - A text is kept on its third sighting: the first two leave only its
//!   fast hash and a tally in the slot's doorkeeper (8 bytes, no copy). A
//!   fresh request may key a text twice (an inline try that gives up, then
//!   the full run), so its texts cost a fast hash each and are never copied
//!   nor push out the warm ones; the same request sent again is the third
//!   sighting, and the one after finds them. (With a provider counter, the
//!   answer's sources key each message once more: a message that is one
//!   text, such as a turn, is then kept from its first request.) A later
//!   text that lands on a held slot replaces it at its own third sighting.
//! - Bounded in bytes: the slots, the doorkeepers and every kept text (its
//!   allocator's rounding and [`ENTRY_BYTES`] included, [`cost`]) fit in the
//!   bytes given. To make room, a CLOCK hand goes round the slots: a text
//!   found since the hand last passed keeps its place once, one that was
//!   not leaves. A text that still does not fit after [`EVICT_STEPS`] kept
//!   texts (or one turn of the slots) is not kept.
//! - Only texts from [`MIN_TEXT_BYTES`] up to [`SHORT_TEXT_BYTES`] (those
//!   keyed by SHA-256 where the CPU has it): shorter ones hash in about the
//!   time of a lookup, longer ones by blake3 across its SIMD lanes.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::Key;
use super::request_keys::RequestKeys;
use crate::tokens::digest::SHORT_TEXT_BYTES;
use crate::tokens::tokenizer::Tokenizer;

/// Shortest text kept: below it the digest costs about what the lookup
/// does.
pub const MIN_TEXT_BYTES: usize = 256;

/// Bytes a kept text costs beyond its own and its rounding: its entry
/// ([`Held`]) and the two allocations' headers.
pub const ENTRY_BYTES: u64 = std::mem::size_of::<Held>() as u64 + 32;

/// Kept texts the CLOCK hand looks at, at most, to make room for one.
const EVICT_STEPS: usize = 32;

/// Bytes of room per slot (at most: the slot count is rounded down to a
/// power of two): a slot costs 32 bytes ([`SLOT_BYTES`] on x86-64 Linux), so
/// the slots take an eighth of the bytes at most, and a warm set of texts of
/// a few hundred bytes up that fills the room holds a slot each and rarely
/// shares one (two warm texts that share one take it in turns, each kept
/// at its third miss).
const BYTES_PER_SLOT: u64 = 256;

/// The low bits of a doorkeeper that tally a text's sightings.
const SIGHTINGS: u64 = 3;

/// The sighting at which a text is kept.
const KEEP_AT: u64 = 3;

/// One kept text.
struct Held {
    /// The fast hash it was found by.
    tag: u64,
    /// What keys its count key ([`Tokenizer::text_key_name`]).
    name: ([u8; 32], bool),
    /// Its count key.
    key: Key,
    text: Box<[u8]>,
    /// Whether it was found since the CLOCK hand last passed its slot.
    found: AtomicBool,
}

/// A slot: a read lock, so that requests sharing a text (every request's
/// system prompt) compare it at once.
type Slot = RwLock<Option<Box<Held>>>;

/// The table.
pub struct KnownKeys {
    slots: Box<[Slot]>,
    /// Per slot, the fast hash of the last text seen there and not kept,
    /// its low bits replaced by how many times it was seen ([`SIGHTINGS`]);
    /// 0 when none.
    seen: Box<[AtomicU64]>,
    seed: u64,
    /// Bytes the kept texts take (each its length plus [`ENTRY_BYTES`]).
    held: AtomicU64,
    /// What they may take.
    room: u64,
    /// The CLOCK hand: the next slot [`KnownKeys::make_room`] looks at.
    hand: AtomicUsize,
}

impl std::fmt::Debug for KnownKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KnownKeys")
            .field("slots", &self.slots.len())
            .field("held_bytes", &self.held_bytes())
            .finish()
    }
}

impl KnownKeys {
    /// A table taking at most `max_bytes`, slots included.
    pub fn new(max_bytes: u64) -> Self {
        let wanted = usize::try_from(max_bytes / BYTES_PER_SLOT).unwrap_or(usize::MAX);
        // The power of two at or below (at least one slot).
        let slots = 1usize << wanted.max(1).ilog2();
        let fixed = SLOT_BYTES * slots as u64;
        KnownKeys {
            slots: (0..slots).map(|_| RwLock::new(None)).collect(),
            seen: (0..slots).map(|_| AtomicU64::new(0)).collect(),
            // Random per process: std's hasher keys come from the OS.
            seed: std::hash::BuildHasher::hash_one(&std::collections::hash_map::RandomState::new(), 0u64),
            held: AtomicU64::new(0),
            room: max_bytes.saturating_sub(fixed),
            hand: AtomicUsize::new(0),
        }
    }

    /// The count key of `text` under `tok` ([`super::key`]): made by
    /// hashing it unless a text of the same bytes was kept with its key.
    pub fn key(&self, tok: &Tokenizer, text: &[u8]) -> Key {
        self.key_in(tok, text, None)
    }

    /// [`KnownKeys::key`], looking a text not kept here up in `request`
    /// (the keys its request made, see [`RequestKeys`]) before hashing it,
    /// and keeping it there with its key. Either way it is a sighting of
    /// the text here.
    pub fn key_in(&self, tok: &Tokenizer, text: &[u8], request: Option<&RequestKeys>) -> Key {
        if !(MIN_TEXT_BYTES..SHORT_TEXT_BYTES).contains(&text.len()) {
            return super::key(tok, text);
        }
        let name = tok.text_key_name();
        let tag = xxhash_rust::xxh3::xxh3_64_with_seed(text, self.seed ^ fold(&name));
        // The slot from the high half (the low bits tally sightings).
        let at = (tag >> 32) as usize & (self.slots.len() - 1);
        if let Some(h) = read(&self.slots[at]).as_ref()
            && h.tag == tag
            && h.name == name
            && *h.text == *text
        {
            h.found.store(true, Ordering::Relaxed);
            return h.key;
        }
        let key = match request {
            Some(request) => request.key(tag, name, text, || super::key(tok, text)),
            None => super::key(tok, text),
        };
        // A race between two threads on one doorkeeper only loses a tally.
        let (mark, before) = (tag & !SIGHTINGS, self.seen[at].load(Ordering::Relaxed));
        let seen = if before & !SIGHTINGS == mark {
            before & SIGHTINGS
        } else {
            0
        } + 1;
        if seen < KEEP_AT {
            self.seen[at].store(mark | seen, Ordering::Relaxed);
        } else {
            self.seen[at].store(0, Ordering::Relaxed);
            self.keep(
                at,
                Box::new(Held {
                    tag,
                    name,
                    key,
                    text: text.into(),
                    found: AtomicBool::new(false),
                }),
            );
        }
        key
    }

    /// Keeps `held` in slot `at` in place of what it holds, if the bytes
    /// allow once the hand has made room.
    fn keep(&self, at: usize, held: Box<Held>) {
        self.make_room(at, cost(&held));
        let mut slot = write(&self.slots[at]);
        let freed = slot.as_deref().map_or(0, cost);
        let added = cost(&held);
        let fits = self.held.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |h| {
            let after = h - freed + added;
            (after <= self.room).then_some(after)
        });
        if fits.is_ok() {
            *slot = Some(held);
        }
    }

    /// Moves the CLOCK hand until `added` more bytes fit, over at most
    /// [`EVICT_STEPS`] kept texts and one turn of the slots (passing `at`
    /// and any slot another thread holds): a text found since the hand last
    /// passed is spared once, any other leaves.
    fn make_room(&self, at: usize, added: u64) {
        let mut looked = 0;
        for _ in 0..self.slots.len() {
            if looked == EVICT_STEPS || self.held.load(Ordering::Relaxed) + added <= self.room {
                return;
            }
            let i = self.hand.fetch_add(1, Ordering::Relaxed) & (self.slots.len() - 1);
            if i == at {
                continue;
            }
            // Never waits: a slot another thread holds is passed over.
            let Ok(mut slot) = self.slots[i].try_write() else {
                continue;
            };
            let Some(h) = slot.as_ref() else {
                continue;
            };
            looked += 1;
            if !h.found.swap(false, Ordering::Relaxed)
                && let Some(gone) = slot.take()
            {
                self.held.fetch_sub(cost(&gone), Ordering::Relaxed);
            }
        }
    }

    /// Bytes the kept texts take.
    pub fn held_bytes(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// Texts kept.
    pub fn held_texts(&self) -> usize {
        self.slots.iter().filter(|s| read(s).is_some()).count()
    }
}

/// What a kept text costs: its bytes, an eighth more for the allocator's
/// size classes (mimalloc rounds up by at most that), and [`ENTRY_BYTES`].
fn cost(h: &Held) -> u64 {
    let len = h.text.len() as u64;
    len + len.div_ceil(8) + ENTRY_BYTES
}

/// A key's name folded into the fast hash's seed.
fn fold(name: &([u8; 32], bool)) -> u64 {
    let mut head = [0u8; 8];
    head.copy_from_slice(&name.0[..8]);
    u64::from_le_bytes(head) ^ u64::from(name.1)
}

/// Bytes a slot costs: its lock over a pointer, and its doorkeeper.
const SLOT_BYTES: u64 = (std::mem::size_of::<Slot>() + std::mem::size_of::<AtomicU64>()) as u64;

/// A slot, whatever a panicking holder left (a slot is whole at every
/// point a panic could leave it).
fn read(slot: &Slot) -> RwLockReadGuard<'_, Option<Box<Held>>> {
    slot.read().unwrap_or_else(PoisonError::into_inner)
}

/// A slot to change, as [`read`].
fn write(slot: &Slot) -> RwLockWriteGuard<'_, Option<Box<Held>>> {
    slot.write().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests;
