//! The static prefix: its hash (the provider cache key the sidecar
//! promises stays byte-stable), and what the prefix cache remembers of it
//! (tokens and volatile values), partitioned by `cache_salt`.

use super::volatile::{self, Volatile};
use crate::prompt::Segment;
use crate::tokens::{Tokenizer, cache, digest};
use crate::vocab::{Role, Warning, codes};

/// A static prefix's hash (hex and digest) and content bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrefixKey {
    /// Lower-case hex of the digest (the `prefix_hash` of responses).
    pub hex: String,
    /// The blake3 digest.
    pub digest: [u8; 32],
    /// Content bytes of the static segments.
    pub bytes: u64,
}

impl PrefixKey {
    /// Hashes canonical `tools` and `segments`.
    pub fn of(tools: &[String], segments: &[Segment]) -> Self {
        let (hex, digest, bytes) = prefix_hash(tools, segments);
        PrefixKey { hex, digest, bytes }
    }

    /// The prefix cache key of this prefix under `salt` for `tok`: the
    /// digest, then the salt length-framed (an empty salt is its own
    /// partition), so a prefix another tenant brought is a miss.
    pub fn cache_key(&self, tok: &Tokenizer, salt: &str) -> cache::Key {
        let mut h = tok.hasher();
        h.update(&self.digest);
        h.update(&(salt.len() as u64).to_le_bytes());
        h.update(salt.as_bytes());
        *h.finalize().as_bytes()
    }
}

/// Version of the rendering rules; part of the prefix hash so that a change
/// of rendering is a change of hash.
pub const PREFIX_VERSION: &str = "context-assembler/prefix/v1";

/// The hash of the static prefix as rendered: the rendering version, then
/// each message's role and content, length-framed. Returns (lower-case hex,
/// digest, content bytes).
fn prefix_hash(tools: &[String], segments: &[Segment]) -> (String, [u8; 32], u64) {
    let mut h = digest::Hasher::new();
    h.update(PREFIX_VERSION.as_bytes());
    let mut bytes = 0u64;
    // Tools come first, as providers place them before the system prompt.
    // Without tools nothing is hashed for them, so such hashes are unchanged.
    if !tools.is_empty() {
        h.update(b"\0tools");
        h.update(&(tools.len() as u64).to_le_bytes());
        for t in tools {
            h.update(&(t.len() as u64).to_le_bytes());
            h.update(t.as_bytes());
        }
    }
    for s in segments {
        let role = Role::System.as_str();
        h.update(&(role.len() as u64).to_le_bytes());
        h.update(role.as_bytes());
        h.update(&(s.content.len() as u64).to_le_bytes());
        h.update(s.content.as_bytes());
        bytes += s.content.len() as u64;
    }
    let digest = h.finalize();
    (digest.to_hex().to_string(), *digest.as_bytes(), bytes)
}

/// Where in the prefix a volatile value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Segment,
    Tool,
}

/// Static segments whose own tokens and volatile values the prefix cache
/// keeps apart; later ones are kept together with the last of these.
pub const SEGMENTS_APART: usize = 16;

/// What the prefix cache remembers about a static prefix.
#[derive(Debug, Clone, Copy, Default)]
pub struct PrefixFacts {
    /// Tokens of the static prefix messages.
    pub tokens: u32,
    /// Tokens of each static segment's message; the last entry also holds
    /// those of every segment after it.
    pub segment_tokens: [u32; SEGMENTS_APART],
    /// Bit `i`: static segment `i` holds a volatile value (the last bit:
    /// that segment or one after it).
    pub volatile_segments: u16,
    /// Tokens of the tool definitions (which the prefix's key covers), so
    /// a known prefix's tools are neither hashed again nor looked up.
    pub tools_tokens: u32,
    /// Whether `tools_tokens` is what the provider bills.
    pub tools_exact: bool,
    /// A bit per [`Volatile::ALL`] kind found.
    volatile: u8,
    /// The first volatile value: where (tools first), and its kind.
    first: Option<(Place, u16, Volatile)>,
}

impl PrefixFacts {
    /// The facts of a prefix whose segments' messages count
    /// `segment_tokens` (in order) and whose tools count `tools_tokens`
    /// (exactly or not, `tools_exact`): its volatile values, scanned in
    /// `tools` then `segments`.
    pub fn scan(
        segment_tokens: impl IntoIterator<Item = u32>,
        (tools_tokens, tools_exact): (u32, bool),
        segments: &[Segment],
        tools: &[String],
    ) -> Self {
        let mut apart = [0u32; SEGMENTS_APART];
        let mut tokens = 0u32;
        for (i, t) in segment_tokens.into_iter().enumerate() {
            tokens = tokens.saturating_add(t);
            let slot = &mut apart[i.min(SEGMENTS_APART - 1)];
            *slot = slot.saturating_add(t);
        }
        let mut facts = PrefixFacts {
            tokens,
            segment_tokens: apart,
            tools_tokens,
            tools_exact,
            ..PrefixFacts::default()
        };
        let texts = tools
            .iter()
            .enumerate()
            .map(|(i, t)| (Place::Tool, i, t.as_str()))
            .chain(
                segments
                    .iter()
                    .enumerate()
                    .map(|(i, s)| (Place::Segment, i, s.content.as_str())),
            );
        for (place, i, text) in texts {
            let (kinds, first) = volatile::scan(text);
            facts.volatile |= kinds;
            if place == Place::Segment && kinds != 0 {
                facts.volatile_segments |= 1 << i.min(SEGMENTS_APART - 1);
            }
            if let (None, Some((kind, _))) = (facts.first, first) {
                facts.first = Some((place, u16::try_from(i).unwrap_or(u16::MAX), kind));
            }
        }
        facts
    }

    /// The kinds of volatile value found, by name.
    pub fn volatile_kinds(&self) -> impl Iterator<Item = &'static str> + '_ {
        Volatile::ALL
            .iter()
            .enumerate()
            .filter(|&(bit, _)| self.volatile & (1 << bit) != 0)
            .map(|(_, k)| k.as_str())
    }

    /// The `VOLATILE_PREFIX` warning about the first volatile value, naming
    /// where it is (`segments` gives the segment ids), if there is one.
    pub fn warning(&self, segments: &[Segment]) -> Option<Warning> {
        let (place, index, kind) = self.first?;
        let at = match place {
            Place::Tool => format!("tools[{index}]"),
            Place::Segment => {
                let id = segments.get(usize::from(index)).map_or("", |s| s.id.as_str());
                format!("static_segments[{index}] (id {id:?})")
            }
        };
        Some(Warning::new(
            codes::VOLATILE_PREFIX,
            format!(
                "the static prefix holds a {} in {at}: a value that changes between requests changes \
                 prefix_hash and defeats provider prompt caches; move it to a block or the query",
                kind.as_str()
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_hash_depends_only_on_contents() {
        let seg = |id: &str, c: &str| Segment {
            id: id.to_owned(),
            kind: crate::prompt::SegmentKind::System,
            content: c.to_owned(),
        };
        let (a, _, bytes) = prefix_hash(&[], &[seg("x", "ab"), seg("y", "c")]);
        let (b, _, _) = prefix_hash(&[], &[seg("other", "ab"), seg("ids", "c")]);
        let (c, _, _) = prefix_hash(&[], &[seg("x", "a"), seg("y", "bc")]);
        assert_eq!(a, b);
        assert_ne!(a, c, "framing keeps segment boundaries apart");
        assert_eq!(bytes, 3);
        assert_eq!(a.len(), 64);
        // Tools are part of the prefix, framed apart from the segments.
        let tools = |t: &[&str]| t.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let (d, _, _) = prefix_hash(&tools(&["{}"]), &[seg("x", "ab"), seg("y", "c")]);
        let (e, _, _) = prefix_hash(&tools(&["{}", "{}"]), &[seg("x", "ab"), seg("y", "c")]);
        assert_ne!(a, d);
        assert_ne!(d, e);
    }
}
