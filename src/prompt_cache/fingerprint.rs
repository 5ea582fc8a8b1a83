//! A compact fingerprint of an assembled prompt, and where a prompt first
//! differs from the one a previous fingerprint describes.
//!
//! A response carries [`fingerprint`]; the next request of the session may
//! send it back, and [`diverge`] says where the new prompt first differs from
//! it and what kind of change that is ([`Change`]), without server state. The
//! caller hands over the prompt's [`Part`]s with digests it already has: this
//! module hashes nothing but those digests.
//!
//! # Format (version 1, at most [`MAX_BYTES`] bytes)
//!
//! ```text
//! version  u8      VERSION
//! level    u8      grouping level 0..=33 (below)
//! header   u32 LE  top 32 bits of mix(header): model, tokenizer, salt
//! turns    varint  number of Turn parts
//! last     u32 LE  entry hash of the last Turn part (only when turns > 0)
//! entry*   until the end:
//!   tag    u8      bits 0-3: the kind of the entry's first part (PartKind
//!                  code, 0..=8); bit 4: a group of 2+ parts; bit 5: the rest
//!                  (every remaining part, last entry only); bits 6-7 zero
//!   count  varint  parts in the entry (only for a group or the rest)
//!   hash   u32 LE  top 32 bits of an order-sensitive fold of the parts'
//!                  kinds and hashes
//!   tokens varint  the parts' tokens
//! ```
//!
//! Varints are LEB128 (at most 10 bytes). At level 0 every part is one entry.
//! When that does not fit, the level goes up one at a time: at level `j` a run
//! of consecutive turns, or of consecutive context items (evidence, memory
//! and state together), is cut into groups after each part whose mixed hash
//! has `j` trailing zero bits in its low 32 (`mix(hash) % 2^j == 0`, so
//! groups hold about `2^j` parts); tools, static segments, the summary and the query stay one entry
//! each. The boundaries depend only on each part's own hash, so a window that
//! drops turns from the front changes only the first group, and appended
//! turns extend only the last one. Level 33 keeps whole runs. If even that
//! does not fit (thousands of static segments), the last entry is the rest.
//!
//! [`diverge`] groups the new prompt at the previous fingerprint's level and
//! walks both entry lists in step; the first unequal pair is the divergence,
//! reported at the new entry's first part, so never after the true first
//! difference, and exactly at it when the entry is a single part. When the
//! previous entry is a strict prefix of the new one (a last group that new
//! turns or items extend), the report moves to the first part past it.
//! `token_offset` sums the tokens of the shared entries.
//!
//! The classification looks at both sides of the first difference: the
//! regions they fall in, the previous last turn's position in the new
//! conversation (a window step moves it forward), and whether the context
//! entries there occur on the other side. On single-part entries this is
//! exact; in a group, an item or a turn removed inside the first group may read
//! as an added item or a window step. Decoding the untrusted bytes is bounded
//! (at most [`MAX_BYTES`] read, one entry list of at most 84 entries) and
//! never panics: the `decoding_never_panics` property in `tests.rs` holds it.

use thiserror::Error;

use self::codec::{Prev, decode, encode};

/// The format's version: the first byte of every fingerprint.
pub const VERSION: u8 = 1;

/// The largest fingerprint [`fingerprint`] writes and [`diverge`] reads.
pub const MAX_BYTES: usize = 512;

/// The coarsest grouping level: whole runs, no content-defined boundaries.
const MAX_LEVEL: u8 = 33;

pub use crate::prompt::PartKind;

/// What the encoding and the comparison read of a part's kind.
trait KindExt: Sized {
    /// The kind's code in an entry's tag.
    fn code(self) -> u8;
    /// The kind of a tag's code.
    fn from_code(code: u8) -> Option<Self>;
    /// The stretch of the prompt the kind belongs to.
    fn region(self) -> Region;
}

impl KindExt for PartKind {
    fn code(self) -> u8 {
        match self {
            PartKind::Tools => 0,
            PartKind::System => 1,
            PartKind::Examples => 2,
            PartKind::Summary => 3,
            PartKind::Turn => 4,
            PartKind::Evidence => 5,
            PartKind::Memory => 6,
            PartKind::State => 7,
            PartKind::Query => 8,
        }
    }

    fn from_code(code: u8) -> Option<PartKind> {
        PartKind::ALL.get(usize::from(code)).copied()
    }

    fn region(self) -> Region {
        match self {
            PartKind::Tools => Region::Tools,
            PartKind::System | PartKind::Examples => Region::Static,
            PartKind::Summary => Region::Summary,
            PartKind::Turn => Region::Turns,
            PartKind::Evidence | PartKind::Memory | PartKind::State => Region::Context,
            PartKind::Query => Region::Query,
        }
    }
}

/// A stretch of the prompt that classification and grouping treat as one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Region {
    Tools,
    Static,
    Summary,
    Turns,
    Context,
    Query,
}

impl Region {
    /// Whether runs of this region are grouped when the parts do not fit.
    fn groupable(self) -> bool {
        matches!(self, Region::Turns | Region::Context)
    }
}

/// One part of an assembled prompt, with the digest the pipeline already has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part<'a> {
    /// Where the part sits.
    pub kind: PartKind,
    /// The segment id, turn item id or context item id; "" for the tools, the
    /// summary and the query. Reported, never hashed.
    pub id: &'a str,
    /// A hash of the part's rendered content.
    pub hash: u64,
    /// The part's tokens.
    pub tokens: u32,
    /// The index of the message holding the part.
    pub message_index: u32,
    /// A static segment holding a timestamp, date, UUID or similar value.
    pub volatile: bool,
}

pub use crate::prompt::{Change, Divergence};

/// Why a previous fingerprint cannot be read; the caller answers
/// INVALID_ARGUMENT.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum FingerprintError {
    /// The bytes are not a fingerprint: empty, too long, truncated or
    /// inconsistent.
    #[error("the previous prompt fingerprint is malformed")]
    Malformed,
    /// A fingerprint of a version this server does not read.
    #[error("the previous prompt fingerprint has unsupported version {0}")]
    Version(u8),
}

/// The fingerprint of a prompt: `header` hashes the model, tokenizer and
/// cache salt, `parts` are the prompt's parts in order. At most
/// [`MAX_BYTES`] bytes, whatever the number of parts.
pub fn fingerprint(header: u64, parts: &[Part<'_>]) -> Vec<u8> {
    encode(header, parts, 0)
}

/// Whether `previous` is a fingerprint this server reads: the request's
/// check, before any work.
pub fn check(previous: &[u8]) -> Result<(), FingerprintError> {
    decode(previous).map(|_| ())
}

/// Where the prompt of `header` and `parts` first differs from the one
/// `previous` (a fingerprint from [`fingerprint`], untrusted) describes.
pub fn diverge(previous: &[u8], header: u64, parts: &[Part<'_>]) -> Result<Divergence, FingerprintError> {
    let prev = decode(previous)?;
    if prev.head.header != top(mix(header)) {
        return Ok(report(Change::ModelChanged, parts, Some(0), 0));
    }
    let rest_at = prev.entries.iter().position(|e| e.rest);
    let mut new = Entries::new(parts, prev.level, rest_at);
    let mut offset = 0u64;
    let mut i = 0usize;
    let (p, n) = loop {
        match (prev.entries.get(i), new.next()) {
            (None, None) => return Ok(report(Change::None, parts, None, offset)),
            (Some(p), Some((_, n))) if *p == n => {
                offset = offset.saturating_add(n.tokens);
                i += 1;
            }
            (p, n) => break (p, n),
        }
    };
    let mut site = n;
    if let (Some(p), Some((first, n))) = (p, n) {
        // A previous entry that the new one extends (new turns or items after
        // the last group): the difference is at the first part past it.
        if let Some(next) = extends(p, first, &n, parts) {
            offset = offset.saturating_add(p.tokens);
            i += 1;
            site = parts.get(next..=next).map(|one| (next, summarize(one, false)));
        }
    }
    let look = Look {
        prev: &prev,
        parts,
        rest_at,
        at: i,
    };
    let change = look.classify(prev.entries.get(i), site.as_ref().map(|(f, e)| (*f, e)));
    Ok(report(change, parts, site.map(|(f, _)| f), offset))
}

/// If the previous entry `p` is a strict prefix of the new entry `n` that
/// starts at part `first`, the index of the first part past it.
fn extends(p: &Entry, first: usize, n: &Entry, parts: &[Part<'_>]) -> Option<usize> {
    if p.kind != n.kind || p.rest != n.rest || p.count == 0 || p.count >= n.count {
        return None;
    }
    let next = first.checked_add(usize::try_from(p.count).ok()?)?;
    let shared = parts.get(first..next)?;
    (summarize(shared, p.rest) == *p).then_some(next)
}

/// The divergence of `change` at part `at` of `parts` (none: at the end).
fn report(change: Change, parts: &[Part<'_>], at: Option<usize>, offset: u64) -> Divergence {
    let clamp = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
    match at.and_then(|a| Some((a, parts.get(a)?))) {
        Some((a, part)) => Divergence {
            change,
            kind: Some(part.kind),
            id: part.id.to_owned(),
            message_index: part.message_index,
            part_index: clamp(a as u64),
            token_offset: clamp(offset),
            servable_tokens: 0,
        },
        None => Divergence {
            change,
            kind: None,
            id: String::new(),
            message_index: 0,
            part_index: clamp(parts.len() as u64),
            token_offset: clamp(offset),
            servable_tokens: 0,
        },
    }
}

/// Both sides of the first difference, for classification.
struct Look<'l, 'a> {
    prev: &'l Prev,
    parts: &'l [Part<'a>],
    rest_at: Option<usize>,
    /// The index of the previous entry at the difference.
    at: usize,
}

impl Look<'_, '_> {
    /// The change, from the previous entry `p` and the new entry `n` (its
    /// first part's index and the entry) at the first difference.
    fn classify(&self, p: Option<&Entry>, n: Option<(usize, &Entry)>) -> Change {
        let rp = p.map(|e| e.kind.region());
        let rn = n.map(|(_, e)| e.kind.region());
        let either = |r: Region| rp == Some(r) || rn == Some(r);
        if either(Region::Tools) {
            return Change::ToolsChanged;
        }
        if either(Region::Static) {
            let volatile = n.is_some_and(|(first, e)| {
                e.kind.region() == Region::Static && self.parts.get(first).is_some_and(|part| part.volatile)
            });
            return if volatile {
                Change::VolatileValue
            } else {
                Change::SystemChanged
            };
        }
        if matches!(rp, Some(Region::Summary | Region::Turns)) {
            return if !self.turn_matched() && self.window_moved() {
                Change::WindowStep
            } else if either(Region::Summary) {
                Change::SummaryChanged
            } else {
                Change::TurnChanged
            };
        }
        // The previous conversation is all shared.
        match rn {
            Some(Region::Summary) => return Change::SummaryChanged,
            Some(Region::Turns) => return Change::Appended,
            _ => {}
        }
        let p = p.filter(|e| e.kind.region() == Region::Context);
        let n = n.filter(|(_, e)| e.kind.region() == Region::Context);
        match (p, n) {
            (None, None) => Change::QueryChanged,
            (_, Some((_, n))) if !self.prev_holds(n) => Change::ItemAdded,
            (Some(p), _) if !self.new_holds(p) => Change::ItemRemoved,
            (Some(_), Some(_)) => Change::ItemReordered,
            (None, Some(_)) => Change::ItemAdded,
            (Some(_), None) => Change::ItemRemoved,
        }
    }

    /// Whether a previous turn entry was shared before the difference.
    fn turn_matched(&self) -> bool {
        self.prev
            .entries
            .get(..self.at)
            .unwrap_or_default()
            .iter()
            .any(|e| e.kind.region() == Region::Turns)
    }

    /// Whether the previous prompt's last turn is in the new conversation,
    /// but earlier: turns before it were dropped or summarized.
    fn window_moved(&self) -> bool {
        let Some(was) = self.prev.head.turns.checked_sub(1) else {
            return false;
        };
        let mut is = None;
        let turns = self.parts.iter().filter(|p| p.kind == PartKind::Turn);
        for (t, part) in turns.enumerate() {
            if single_hash(part) == self.prev.head.last_turn {
                is = Some(t as u64);
            }
        }
        is.is_some_and(|is| is < was)
    }

    /// Whether the previous context holds the new entry `n`.
    fn prev_holds(&self, n: &Entry) -> bool {
        self.prev.entries.iter().any(|e| same_item(e, n))
    }

    /// Whether the new context holds the previous entry `p`.
    fn new_holds(&self, p: &Entry) -> bool {
        Entries::new(self.parts, self.prev.level, self.rest_at).any(|(_, e)| same_item(&e, p))
    }
}

/// Whether two entries are the same context item (or group of items).
fn same_item(a: &Entry, b: &Entry) -> bool {
    a.kind.region() == Region::Context
        && b.kind.region() == Region::Context
        && a.hash == b.hash
        && a.count == b.count
}

/// An entry: one part, a group of parts, or the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    /// The kind of its first part.
    kind: PartKind,
    count: u64,
    hash: u32,
    tokens: u64,
    rest: bool,
}

/// The entry of `parts` (not empty); the rest entry if `rest`.
fn summarize(parts: &[Part<'_>], rest: bool) -> Entry {
    let kind = parts.first().map_or(PartKind::Tools, |p| p.kind);
    let (hash, tokens) = parts.iter().fold((SEED, 0u64), |(h, t), p| {
        (fold(h, p), t.saturating_add(u64::from(p.tokens)))
    });
    Entry {
        kind,
        count: parts.len() as u64,
        hash: top(hash),
        tokens,
        rest,
    }
}

/// The entry hash of one part.
fn single_hash(part: &Part<'_>) -> u32 {
    top(fold(SEED, part))
}

/// A prompt's parts as entries at a grouping level, the rest from entry
/// `rest_at` on. Allocates nothing.
struct Entries<'s, 'a> {
    parts: &'s [Part<'a>],
    next: usize,
    level: u8,
    produced: usize,
    rest_at: Option<usize>,
}

impl<'s, 'a> Entries<'s, 'a> {
    fn new(parts: &'s [Part<'a>], level: u8, rest_at: Option<usize>) -> Self {
        Entries {
            parts,
            next: 0,
            level,
            produced: 0,
            rest_at,
        }
    }

    /// The end of the entry starting at part `first`, if not the rest.
    fn end(&self, first: usize, region: Region) -> usize {
        if self.level == 0 || !region.groupable() {
            return first + 1;
        }
        let tail = self.parts.get(first..).unwrap_or_default();
        let mut end = first;
        for (i, part) in tail.iter().enumerate() {
            if part.kind.region() != region {
                break;
            }
            end = first + i + 1;
            if boundary(part, self.level) {
                break;
            }
        }
        end
    }
}

impl Iterator for Entries<'_, '_> {
    /// The entry's first part index, and the entry.
    type Item = (usize, Entry);

    fn next(&mut self) -> Option<(usize, Entry)> {
        let first = self.next;
        let head = self.parts.get(first)?;
        let rest = self.rest_at == Some(self.produced);
        let end = if rest {
            self.parts.len()
        } else {
            self.end(first, head.kind.region())
        };
        let parts = self.parts.get(first..end)?;
        self.next = end;
        self.produced += 1;
        Some((first, summarize(parts, rest)))
    }
}

/// Whether a group ends after `part` at `level` (1..=33): its mixed hash has
/// `level` trailing zero bits.
fn boundary(part: &Part<'_>, level: u8) -> bool {
    (mix(part.hash) as u32).trailing_zeros() >= u32::from(level)
}

const SEED: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64's finalizer: a bijection that spreads every input bit.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
thread_local! {
    /// Parts folded into entry hashes on this thread: the work a test counts.
    static FOLDS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// One more part into an entry's order-sensitive hash.
fn fold(acc: u64, part: &Part<'_>) -> u64 {
    #[cfg(test)]
    FOLDS.with(|c| c.set(c.get() + 1));
    mix(acc.rotate_left(17) ^ part.hash ^ (u64::from(part.kind.code()) << 59))
}

/// The 32 bits of a hash that a fingerprint keeps.
fn top(hash: u64) -> u32 {
    (hash >> 32) as u32
}

mod codec;
#[cfg(test)]
mod tests;
