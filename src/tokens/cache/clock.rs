//! The count caches' table: a bounded map from 32-byte digests to small
//! `Copy` values, sharded, evicting by CLOCK, with single flight.
//!
//! Why not moka (what the count caches used before): an entry there cost
//! 357 bytes of resident memory for 36 bytes of key and count, and its
//! bookkeeping (the access-order deques, the frequency sketch, the
//! housekeeper, epoch reclamation) was 17.5% of a cold request's CPU and
//! about 9% of a warm one's. Here an entry is its key, its value and a
//! reference bit in one array, plus an 8-byte slot in an index that never
//! grows: 54 bytes for a count, fixed when the table is built, so the
//! configured bytes bound real memory without weighing anything.
//!
//! Each shard is a mutex over:
//! - `entries`: at most `capacity` entries, filled in order, then reused in
//!   place by eviction;
//! - `slots`: open addressing with linear probing, at most 3/5 full. A slot
//!   holds the high 32 bits of the key's hash (its home, and a tag compared
//!   before the key) and the entry's position plus one (0 is an empty slot).
//!   Deleting shifts the probe run back (Knuth's algorithm R), so there are
//!   no tombstones and a probe never passes more than its run;
//! - the CLOCK hand: a hit sets the entry's reference bit; to make room the
//!   hand clears set bits until it finds a clear one, and that entry goes.
//!   A new entry starts clear, so text seen once leaves before text that
//!   was hit again.
//!
//! The hash is foldhash seeded at random per process: keys are blake3
//! digests of what callers send, and a caller who cannot predict the seed
//! cannot aim keys at one run.

use std::hash::BuildHasher;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

/// A key: a blake3 digest.
pub type Key = [u8; 32];

/// Index slots per entry of capacity, as a fraction: at most 3/5 full.
const SLOTS_PER_ENTRY: (usize, usize) = (5, 3);

/// Most shards a table has; fewer when it is small, so that every shard
/// holds at least [`MIN_SHARD_ENTRIES`].
const MAX_SHARDS: usize = 64;

/// Fewest entries a shard holds when the table has more than one shard.
const MIN_SHARD_ENTRIES: usize = 1024;

/// Most entries a shard holds: its slot count (5/3 of it, plus one) stays
/// below 2^32, so a slot's low half holds a position plus one and the home
/// computation does not overflow. (64 shards of it would be about 2^38
/// entries, far past any configured cache.)
const MAX_SHARD_ENTRIES: usize = (u32::MAX as usize / SLOTS_PER_ENTRY.0) * SLOTS_PER_ENTRY.1 - 1;
const _: () = assert!(MAX_SHARD_ENTRIES * SLOTS_PER_ENTRY.0 / SLOTS_PER_ENTRY.1 < u32::MAX as usize);

/// Bytes one entry of a table holding `V` costs: the entry and its share of
/// the index (5/3 of an 8-byte slot, rounded up).
pub const fn entry_bytes<V>() -> u32 {
    let index = (8 * SLOTS_PER_ENTRY.0).div_ceil(SLOTS_PER_ENTRY.1);
    // An entry is a few dozen bytes: the cast cannot truncate.
    (std::mem::size_of::<Entry<V>>() + index) as u32
}

/// One cached value.
struct Entry<V> {
    key: Key,
    value: V,
    /// Set by a hit, cleared by the CLOCK hand passing.
    referenced: bool,
}

/// A shard: its entries, their index, the hand, and the keys being made.
struct Shard<V> {
    entries: Vec<Entry<V>>,
    capacity: usize,
    slots: Box<[u64]>,
    hand: usize,
    flights: Vec<(Key, Arc<Flight<V>>)>,
}

/// A shard on its own cache lines, so two cores locking neighbours do not
/// share one.
#[repr(align(128))]
struct Padded<T>(T);

/// A bounded map from digests to values (see the module doc).
pub struct Clock<V> {
    shards: Box<[Padded<Mutex<Shard<V>>>]>,
    hasher: foldhash::fast::RandomState,
}

/// A value being made by one caller, that others missing the same key wait
/// for.
struct Flight<V> {
    landed: Mutex<Option<Landing<V>>>,
    done: Condvar,
}

/// How a flight ended.
#[derive(Clone, Copy)]
enum Landing<V> {
    /// Made and stored.
    Value(V),
    /// The maker failed or panicked: a waiter tries again itself.
    Abandoned,
}

impl<V: Copy> Clock<V> {
    /// A table whose entries and index take at most `max_bytes`.
    pub fn new(max_bytes: u64) -> Self {
        let entries = usize::try_from(max_bytes / u64::from(entry_bytes::<V>())).unwrap_or(usize::MAX);
        let mut shards = MAX_SHARDS;
        while shards > 1 && entries / shards < MIN_SHARD_ENTRIES {
            shards /= 2;
        }
        Self::sized(shards, entries / shards)
    }

    /// A table of `shards` shards (a power of two) of `capacity` entries
    /// each. A shard holds at most [`MAX_SHARD_ENTRIES`], so its positions
    /// and slot count fit the slots' 32-bit halves.
    fn sized(shards: usize, capacity: usize) -> Self {
        let capacity = capacity.min(MAX_SHARD_ENTRIES);
        Clock {
            shards: (0..shards.max(1).next_power_of_two())
                .map(|_| Padded(Mutex::new(Shard::new(capacity))))
                .collect(),
            hasher: foldhash::fast::RandomState::default(),
        }
    }

    /// The value under `key`, marking it used.
    pub fn get(&self, key: &Key) -> Option<V> {
        let hash = self.hasher.hash_one(key);
        self.shard(hash).get(hash, key)
    }

    /// Stores `value` under `key`, replacing what was there, evicting an
    /// entry if the shard is full.
    pub fn insert(&self, key: Key, value: V) {
        let hash = self.hasher.hash_one(key);
        self.shard(hash).insert(hash, key, value, &self.hasher);
    }

    /// The value under `key`, made by `make` on a miss. Single flight: of
    /// callers that miss one key at once, one runs `make` and stores its
    /// value, the others wait for it. An `Err` (or a panic) from `make`
    /// stores nothing, and each waiter then tries again itself. Returns the
    /// value and whether this call made it.
    pub fn get_or_try_insert_with<E>(
        &self,
        key: Key,
        make: impl FnOnce() -> Result<V, E>,
    ) -> Result<(V, bool), E> {
        let hash = self.hasher.hash_one(key);
        let flight = loop {
            let mut shard = self.shard(hash);
            if let Some(v) = shard.get(hash, &key) {
                return Ok((v, false));
            }
            let Some(waiting) = shard.flight(&key) else {
                let flight = Arc::new(Flight {
                    landed: Mutex::new(None),
                    done: Condvar::new(),
                });
                shard.flights.push((key, Arc::clone(&flight)));
                break flight;
            };
            drop(shard);
            if let Landing::Value(v) = waiting.wait() {
                return Ok((v, false));
            }
        };
        let mut maker = Maker {
            table: self,
            hash,
            key,
            flight,
            landing: Landing::Abandoned,
        };
        let value = make()?;
        maker.landing = Landing::Value(value);
        Ok((value, true))
    }

    /// [`Clock::get_or_try_insert_with`] for a `make` that cannot fail.
    pub fn get_or_insert_with(&self, key: Key, make: impl FnOnce() -> V) -> (V, bool) {
        match self.get_or_try_insert_with(key, || Ok::<V, std::convert::Infallible>(make())) {
            Ok(made) => made,
            Err(never) => match never {},
        }
    }

    /// Entries held.
    pub fn held(&self) -> u64 {
        let held: usize = self.shards.iter().map(|s| lock(&s.0).entries.len()).sum();
        held as u64
    }

    /// Entries the table can hold.
    pub fn capacity(&self) -> u64 {
        let capacity: usize = self.shards.iter().map(|s| lock(&s.0).capacity).sum();
        capacity as u64
    }

    /// The shard `hash` falls in (its low bits; the index uses the high).
    fn shard(&self, hash: u64) -> MutexGuard<'_, Shard<V>> {
        // The shard count is a power of two at most 64: the mask keeps the
        // position in range, and the cast from u64 keeps the low bits.
        lock(&self.shards[(hash as usize) & (self.shards.len() - 1)].0)
    }
}

/// A mutex's value, through a poisoned lock too: nothing that can panic
/// runs while a shard is held (makers run unlocked), so a poisoned shard is
/// still consistent.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<V: Copy> Flight<V> {
    /// Blocks until the maker lands or abandons.
    fn wait(&self) -> Landing<V> {
        let mut landed = lock(&self.landed);
        loop {
            if let Some(landing) = *landed {
                return landing;
            }
            landed = self.done.wait(landed).unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// The caller making a missed key's value: dropping it stores the value
/// (when made), ends the flight and wakes the waiters, on every path out,
/// an error or a panic included.
struct Maker<'a, V: Copy> {
    table: &'a Clock<V>,
    hash: u64,
    key: Key,
    flight: Arc<Flight<V>>,
    landing: Landing<V>,
}

impl<V: Copy> Drop for Maker<'_, V> {
    fn drop(&mut self) {
        {
            let mut shard = self.table.shard(self.hash);
            // A value stored under the key while this one was made (an
            // exact count over a bound being made) is kept: every value of
            // a key is true of its text, and the later one knows no less.
            if let Landing::Value(v) = self.landing
                && shard.find(self.hash, &self.key).is_none()
            {
                shard.insert(self.hash, self.key, v, &self.table.hasher);
            }
            shard.flights.retain(|(_, f)| !Arc::ptr_eq(f, &self.flight));
        }
        *lock(&self.flight.landed) = Some(self.landing);
        self.flight.done.notify_all();
    }
}

impl<V: Copy> Shard<V> {
    fn new(capacity: usize) -> Self {
        let slots = capacity * SLOTS_PER_ENTRY.0 / SLOTS_PER_ENTRY.1 + 1;
        Shard {
            // Reserved, not touched: pages become resident as entries fill.
            entries: Vec::with_capacity(capacity),
            capacity,
            slots: vec![0; slots].into_boxed_slice(),
            hand: 0,
            flights: Vec::new(),
        }
    }

    /// The home slot of a hash: its high 32 bits scaled to the slot count.
    fn home(&self, tag: u32) -> usize {
        // slots.len() fits in 32 bits (the product shifted back is below it).
        ((u64::from(tag) * self.slots.len() as u64) >> 32) as usize
    }

    /// The slot after `s`, wrapping.
    fn next(&self, s: usize) -> usize {
        if s + 1 == self.slots.len() { 0 } else { s + 1 }
    }

    /// The slot and entry of `key`.
    fn find(&self, hash: u64, key: &Key) -> Option<(usize, usize)> {
        let tag = (hash >> 32) as u32;
        let mut s = self.home(tag);
        // An empty slot ends the run (capacity < slots, so one is always
        // there); the bound only keeps a broken index from looping.
        for _ in 0..self.slots.len() {
            let slot = *self.slots.get(s)?;
            if slot == 0 {
                return None;
            }
            if (slot >> 32) as u32 == tag {
                let i = (slot as u32 - 1) as usize;
                if self.entries.get(i).is_some_and(|e| e.key == *key) {
                    return Some((s, i));
                }
            }
            s = self.next(s);
        }
        None
    }

    fn get(&mut self, hash: u64, key: &Key) -> Option<V> {
        let (_, i) = self.find(hash, key)?;
        let e = self.entries.get_mut(i)?;
        if !e.referenced {
            e.referenced = true;
        }
        Some(e.value)
    }

    fn flight(&self, key: &Key) -> Option<Arc<Flight<V>>> {
        self.flights
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, f)| Arc::clone(f))
    }

    fn insert(&mut self, hash: u64, key: Key, value: V, hasher: &foldhash::fast::RandomState) {
        if let Some((_, i)) = self.find(hash, &key) {
            if let Some(e) = self.entries.get_mut(i) {
                e.value = value;
            }
            return;
        }
        let entry = Entry {
            key,
            value,
            referenced: false,
        };
        let i = if self.entries.len() < self.capacity {
            self.entries.push(entry);
            self.entries.len() - 1
        } else {
            let Some(victim) = self.victim() else {
                return; // capacity 0: holds nothing
            };
            let Some(old) = self.entries.get(victim).map(|e| e.key) else {
                return;
            };
            if let Some((s, _)) = self.find(hasher.hash_one(old), &old) {
                self.remove_slot(s);
            }
            if let Some(e) = self.entries.get_mut(victim) {
                *e = entry;
            }
            victim
        };
        let tag = (hash >> 32) as u32;
        let mut s = self.home(tag);
        for _ in 0..self.slots.len() {
            if let Some(slot) = self.slots.get_mut(s)
                && *slot == 0
            {
                // i < capacity <= MAX_SHARD_ENTRIES, so i + 1 is never 0
                // and fits the low half.
                *slot = (u64::from(tag) << 32) | (i as u64 + 1);
                return;
            }
            s = self.next(s);
        }
    }

    /// The entry the CLOCK hand evicts: the first whose reference bit is
    /// clear, clearing set bits on the way (within two turns).
    fn victim(&mut self) -> Option<usize> {
        let n = self.entries.len();
        for _ in 0..=n {
            let i = self.hand;
            self.hand = if i + 1 >= n { 0 } else { i + 1 };
            let e = self.entries.get_mut(i)?;
            if !e.referenced {
                return Some(i);
            }
            e.referenced = false;
        }
        // Every bit was set and is now clear: the hand's entry goes.
        Some(self.hand)
    }

    /// Empties slot `hole` and moves back the entries of its probe run that
    /// may sit there (Knuth, TAOCP vol. 3, 6.4, algorithm R), so every
    /// entry stays reachable from its home without tombstones.
    fn remove_slot(&mut self, mut hole: usize) {
        let mut j = hole;
        for _ in 0..self.slots.len() {
            j = self.next(j);
            let Some(&slot) = self.slots.get(j) else {
                return;
            };
            if slot == 0 {
                break;
            }
            let home = self.home((slot >> 32) as u32);
            // The entry at j stays when its home lies cyclically in (hole, j].
            let stays = if hole <= j {
                hole < home && home <= j
            } else {
                hole < home || home <= j
            };
            if !stays {
                if let Some(h) = self.slots.get_mut(hole) {
                    *h = slot;
                }
                hole = j;
            }
        }
        if let Some(h) = self.slots.get_mut(hole) {
            *h = 0;
        }
    }
}

#[cfg(test)]
mod tests;
