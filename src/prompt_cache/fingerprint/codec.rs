//! The fingerprint's bytes, in the format the parent module sets out:
//! [`encode`] writes them, [`decode`] reads a previous fingerprint back from
//! untrusted bytes, every read checked and the entry list bounded.

use super::{
    Entries, Entry, FingerprintError, KindExt, MAX_BYTES, MAX_LEVEL, Part, PartKind, VERSION, mix,
    single_hash, summarize, top,
};

/// The most bytes the rest entry takes (tag, count, hash, tokens).
const REST_BYTES: usize = 1 + 10 + 4 + 10;

/// The smallest entry (tag, hash, one-byte tokens): bounds the decoded list.
const MIN_ENTRY_BYTES: usize = 6;

const GROUP: u8 = 0x10;
const REST: u8 = 0x20;
const KIND_MASK: u8 = 0x0f;

impl Entry {
    fn tag(&self) -> u8 {
        let mut tag = self.kind.code();
        if self.rest {
            tag |= REST;
        } else if self.count > 1 {
            tag |= GROUP;
        }
        tag
    }

    fn has_count(&self) -> bool {
        self.rest || self.count > 1
    }

    fn len(&self) -> usize {
        let count = if self.has_count() {
            varint_len(self.count)
        } else {
            0
        };
        1 + count + 4 + varint_len(self.tokens)
    }

    fn put(&self, out: &mut Vec<u8>) {
        out.push(self.tag());
        if self.has_count() {
            put_varint(out, self.count);
        }
        out.extend_from_slice(&self.hash.to_le_bytes());
        put_varint(out, self.tokens);
    }
}

/// What a fingerprint says before its entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Head {
    pub(super) header: u32,
    pub(super) turns: u64,
    pub(super) last_turn: u32,
}

impl Head {
    fn of(header: u64, parts: &[Part<'_>]) -> Head {
        let mut turns = 0u64;
        let mut last = None;
        for part in parts.iter().filter(|p| p.kind == PartKind::Turn) {
            turns += 1;
            last = Some(part);
        }
        Head {
            header: top(mix(header)),
            turns,
            last_turn: last.map_or(0, single_hash),
        }
    }

    fn put(&self, level: u8, out: &mut Vec<u8>) {
        out.push(VERSION);
        out.push(level);
        out.extend_from_slice(&self.header.to_le_bytes());
        put_varint(out, self.turns);
        if self.turns > 0 {
            out.extend_from_slice(&self.last_turn.to_le_bytes());
        }
    }
}

/// The fingerprint at the first level from `min_level` whose entries fit,
/// else at [`MAX_LEVEL`] with the rest in the last entry.
pub(super) fn encode(header: u64, parts: &[Part<'_>], min_level: u8) -> Vec<u8> {
    let head = Head::of(header, parts);
    let mut out = Vec::with_capacity(MAX_BYTES);
    for level in min_level..=MAX_LEVEL {
        out.clear();
        head.put(level, &mut out);
        // A failing level stops at the budget, so trying each costs at most
        // the parts that fill 512 bytes at it.
        let fits = Entries::new(parts, level, None).all(|(_, e)| {
            e.put(&mut out);
            out.len() <= MAX_BYTES
        });
        if fits {
            return out;
        }
    }
    out.clear();
    head.put(MAX_LEVEL, &mut out);
    for (first, e) in Entries::new(parts, MAX_LEVEL, None) {
        let last = first as u64 + e.count == parts.len() as u64;
        let room = if last { 0 } else { REST_BYTES };
        if out.len() + e.len() + room > MAX_BYTES {
            summarize(parts.get(first..).unwrap_or_default(), true).put(&mut out);
            break;
        }
        e.put(&mut out);
    }
    out
}

/// A decoded previous fingerprint.
#[derive(Debug)]
pub(super) struct Prev {
    pub(super) level: u8,
    pub(super) head: Head,
    pub(super) entries: Vec<Entry>,
}

/// The previous fingerprint, from untrusted bytes.
pub(super) fn decode(bytes: &[u8]) -> Result<Prev, FingerprintError> {
    let mut r = Reader { bytes };
    let version = r.u8()?;
    if version != VERSION {
        return Err(FingerprintError::Version(version));
    }
    if bytes.len() > MAX_BYTES {
        return Err(FingerprintError::Malformed);
    }
    let level = r.u8()?;
    if level > MAX_LEVEL {
        return Err(FingerprintError::Malformed);
    }
    let header = r.u32()?;
    let turns = r.varint()?;
    let last_turn = if turns > 0 { r.u32()? } else { 0 };
    let mut entries = Vec::with_capacity(r.bytes.len() / MIN_ENTRY_BYTES);
    while !r.bytes.is_empty() {
        if entries.last().is_some_and(|e: &Entry| e.rest) {
            return Err(FingerprintError::Malformed);
        }
        let tag = r.u8()?;
        let kind = PartKind::from_code(tag & KIND_MASK).ok_or(FingerprintError::Malformed)?;
        let (group, rest) = match tag & !KIND_MASK {
            0 => (false, false),
            GROUP => (true, false),
            REST => (false, true),
            _ => return Err(FingerprintError::Malformed),
        };
        let count = if group || rest { r.varint()? } else { 1 };
        let valid = if group {
            count > 1 && level > 0 && kind.region().groupable()
        } else {
            count > 0
        };
        if !valid {
            return Err(FingerprintError::Malformed);
        }
        let hash = r.u32()?;
        let tokens = r.varint()?;
        entries.push(Entry {
            kind,
            count,
            hash,
            tokens,
            rest,
        });
    }
    Ok(Prev {
        level,
        head: Head {
            header,
            turns,
            last_turn,
        },
        entries,
    })
}

/// Reads untrusted bytes; every read is checked.
struct Reader<'b> {
    bytes: &'b [u8],
}

impl Reader<'_> {
    fn u8(&mut self) -> Result<u8, FingerprintError> {
        let (&b, rest) = self.bytes.split_first().ok_or(FingerprintError::Malformed)?;
        self.bytes = rest;
        Ok(b)
    }

    fn u32(&mut self) -> Result<u32, FingerprintError> {
        let (four, rest) = self
            .bytes
            .split_first_chunk::<4>()
            .ok_or(FingerprintError::Malformed)?;
        self.bytes = rest;
        Ok(u32::from_le_bytes(*four))
    }

    /// A LEB128 varint of at most 10 bytes that fits in 64 bits.
    fn varint(&mut self) -> Result<u64, FingerprintError> {
        let mut value = 0u64;
        for i in 0..10u32 {
            let b = self.u8()?;
            if i == 9 && b > 1 {
                return Err(FingerprintError::Malformed);
            }
            value |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(FingerprintError::Malformed)
    }
}

fn put_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn varint_len(n: u64) -> usize {
    let bits = 64 - n.leading_zeros() as usize;
    bits.div_ceil(7).max(1)
}
