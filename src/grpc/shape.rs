//! What a request message will cost to decode, read from its encoded bytes
//! before prost decodes it.
//!
//! prost materializes a whole struct for every sub-message: an empty
//! `AssembleRequest` is 2 bytes on the wire and several hundred bytes in
//! memory, so a 4 MiB message of empty sub-messages would decode to
//! gigabytes before any count could be checked on the decoded value. This
//! scan walks the wire format once (linear in its bytes, no allocation per
//! field) with the message layout taken from the embedded descriptor set,
//! and reports:
//!
//! - the counts the admission limits are about (blocks and items of an
//!   `AssembleRequest`, requests of an `AssembleBatchRequest`), read at the
//!   root of the message;
//! - an upper bound of the bytes prost will allocate to decode it
//!   ([`Measure::decoded_bytes`]): each struct of a repeated sub-message
//!   (twice: a growing `Vec` may hold double capacity), each string's bytes
//!   and, for repeated strings and scalars, their `Vec` slots.
//!
//! The gate refuses a message whose bound exceeds [`DECODE_AMPLIFICATION`]
//! times its wire size plus an allowance ([`Measure::allowance`]: what a
//! request at the item limit takes however small its items, so no request
//! within the count limits is refused for its shape), so what one request
//! can make the process hold while decoding is a constant times what it
//! uploaded, plus a constant. A malformed message is measured up to its first fault (prost
//! fails there too, having allocated no more than what came before).

use std::collections::HashMap;
use std::mem::size_of;
use std::sync::OnceLock;

use prost::Message as _;

use super::pb;

/// The most a decoded message may weigh per byte of its encoding. Ordinary
/// requests weigh 2-6 (measured on the replay workload and the examples:
/// `ordinary_requests_weigh_far_below_the_bound`); a message of empty
/// sub-messages weighs hundreds.
pub const DECODE_AMPLIFICATION: u64 = 16;
/// Decoded bytes every message may use whatever its size, besides what its
/// items may take (a batch of a few tiny requests weighs more per byte than
/// any large message may).
pub const DECODE_ALLOWANCE_BYTES: u64 = 256 << 10;
/// Nesting beyond this is left to prost (whose limit is 100), which refuses
/// it before allocating more than the scan has counted.
const MAX_DEPTH: u32 = 100;

/// A count read at the root of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Count {
    /// `AssembleRequest.blocks`.
    Blocks,
    /// `AssembleRequest.blocks[].items`, summed.
    Items,
    /// `AssembleBatchRequest.requests`.
    Requests,
}

/// The field-number paths of each [`Count`], from the root message.
const BLOCKS_PATH: &[u32] = &[6];
const ITEMS_PATH: &[u32] = &[6, 7];
const REQUESTS_PATH: &[u32] = &[1];

/// The request types the gate measures, with the counts read at their root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Root {
    /// `AssembleRequest` (Assemble, each AssembleStream message).
    Assemble,
    /// `AssembleBatchRequest`.
    AssembleBatch,
    /// Any other request type, by its descriptor name: cost only.
    Other(&'static str),
}

impl Root {
    fn type_name(self) -> &'static str {
        match self {
            Root::Assemble => "context_assembler.v1.AssembleRequest",
            Root::AssembleBatch => "context_assembler.v1.AssembleBatchRequest",
            Root::Other(name) => name,
        }
    }

    fn counts(self) -> &'static [(Count, &'static [u32])] {
        match self {
            Root::Assemble => &[(Count::Blocks, BLOCKS_PATH), (Count::Items, ITEMS_PATH)],
            Root::AssembleBatch => &[(Count::Requests, REQUESTS_PATH)],
            Root::Other(_) => &[],
        }
    }

    /// The request type of an RPC of the Assembler service, by method name.
    pub fn of_method(method: &str) -> Option<Root> {
        Some(match method {
            "Assemble" | "AssembleStream" => Root::Assemble,
            "AssembleBatch" => Root::AssembleBatch,
            "CountTokens" => Root::Other("context_assembler.v1.CountTokensRequest"),
            "ListModels" => Root::Other("context_assembler.v1.ListModelsRequest"),
            "ReportUsage" => Root::Other("context_assembler.v1.ReportUsageRequest"),
            "Compact" => Root::Other("context_assembler.v1.CompactRequest"),
            "Retain" => Root::Other("context_assembler.v1.RetainRequest"),
            "Forget" => Root::Other("context_assembler.v1.ForgetRequest"),
            "ListMemories" => Root::Other("context_assembler.v1.ListMemoriesRequest"),
            _ => return None,
        })
    }
}

/// What the scan found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Measure {
    /// Upper bound of the bytes decoding allocates (structs included).
    pub decoded_bytes: u64,
    /// Blocks, items and requests at the root (0 where not applicable).
    pub blocks: u64,
    /// See [`Count::Items`].
    pub items: u64,
    /// See [`Count::Requests`].
    pub requests: u64,
    /// Bytes of the message walked (all of it unless it is malformed).
    pub scanned_bytes: u64,
}

impl Measure {
    fn add(&mut self, count: Count) {
        match count {
            Count::Blocks => self.blocks += 1,
            Count::Items => self.items += 1,
            Count::Requests => self.requests += 1,
        }
    }

    /// The most a message of `wire_bytes` may weigh decoded, given the
    /// [`Measure::allowance`].
    pub fn allowed(wire_bytes: u64, allowance: u64) -> u64 {
        wire_bytes
            .saturating_mul(DECODE_AMPLIFICATION)
            .saturating_add(allowance)
    }

    /// What every message may weigh decoded beyond its amplified size: a
    /// request of `max_items` items of a few bytes each (each item's struct
    /// and `Vec` growth, and a string slot), plus
    /// [`DECODE_ALLOWANCE_BYTES`]. 4.9 MB at the default 10,000 items.
    pub fn allowance(max_items: u32) -> u64 {
        let per_item = 2 * size_of::<pb::Item>() as u64 + 48;
        u64::from(max_items)
            .saturating_mul(per_item)
            .saturating_add(DECODE_ALLOWANCE_BYTES)
    }
}

/// How a field is stored once decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A sub-message: its index in [`Schema::messages`].
    Message(usize),
    /// A string or bytes: its bytes are copied.
    Bytes,
    /// A number, bool or enum.
    Scalar,
}

#[derive(Debug, Clone, Copy)]
struct Field {
    kind: Kind,
    repeated: bool,
}

#[derive(Debug)]
struct Layout {
    /// `size_of` the generated struct.
    size: u64,
    /// Indexed by field number (small: the proto numbers fields densely).
    fields: Vec<Option<Field>>,
}

/// Message layouts, from the descriptor set compiled into the binary.
#[derive(Debug)]
pub struct Schema {
    messages: Vec<Layout>,
    by_name: HashMap<String, usize>,
}

/// The size of every generated request and response struct, by full name.
macro_rules! struct_sizes {
    ($($t:ident),+ $(,)?) => {
        &[$((concat!("context_assembler.v1.", stringify!($t)), size_of::<pb::$t>())),+]
    };
}

const STRUCT_SIZES: &[(&str, usize)] = struct_sizes!(
    Segment,
    Block,
    Item,
    Thinking,
    Principal,
    AssembleRequest,
    Recall,
    RecallReport,
    TokenIds,
    Message,
    Usage,
    CacheInfo,
    BlockDecision,
    Warning,
    AssembleResponse,
    Breakpoint,
    RoutingHeader,
    CacheHints,
    CachePlan,
    ProviderField,
    CacheMarker,
    Divergence,
    CountTokensRequest,
    CountTokensResponse,
    ListModelsRequest,
    ModelInfo,
    ListModelsResponse,
    AssembleBatchRequest,
    BudgetOverflowDetail,
    BlockNeed,
    RequestError,
    AssembleResult,
    BatchGroup,
    AssembleBatchResponse,
    AssembleStreamResponse,
    ReportUsageRequest,
    ReportUsageResponse,
    ToolUse,
    ToolResult,
    ContentBlock,
    ConversationMessage,
    PinnedItem,
    CompactRequest,
    CompactProvenance,
    TrimStep,
    BreakerState,
    CompactResponse,
    Observation,
    SessionSummary,
    RetainRequest,
    RetainProblem,
    RetainResponse,
    ForgetRequest,
    ForgetResponse,
    StoredMemory,
    ListMemoriesRequest,
    ListMemoriesResponse,
);

/// A struct size when the table lacks a type (a test keeps it complete).
const UNKNOWN_STRUCT_BYTES: u64 = 1024;

impl Schema {
    /// The schema of `proto/`, built once.
    pub fn get() -> &'static Schema {
        static SCHEMA: OnceLock<Schema> = OnceLock::new();
        SCHEMA.get_or_init(|| Schema::from_descriptors(pb::FILE_DESCRIPTOR_SET))
    }

    fn from_descriptors(encoded: &[u8]) -> Schema {
        use prost_types::field_descriptor_proto::{Label, Type};
        // The set is compiled into the binary from proto/: a decode failure
        // would be a build bug, and leaves every message unmeasured-as-unknown.
        let set = prost_types::FileDescriptorSet::decode(encoded).unwrap_or_default();
        let mut by_name = HashMap::new();
        let mut protos = Vec::new();
        for file in &set.file {
            let package = file.package();
            for m in &file.message_type {
                by_name.insert(format!("{package}.{}", m.name()), protos.len());
                protos.push(m);
            }
        }
        let sizes: HashMap<&str, usize> = STRUCT_SIZES.iter().copied().collect();
        let messages = by_name
            .iter()
            .map(|(name, &i)| (i, name))
            .collect::<std::collections::BTreeMap<_, _>>()
            .into_iter()
            .map(|(i, name)| {
                let proto = protos[i];
                let max = proto.field.iter().map(|f| f.number()).max().unwrap_or(0);
                let mut fields = vec![None; usize::try_from(max).unwrap_or(0) + 1];
                for f in &proto.field {
                    let kind = match f.r#type() {
                        Type::Message => f
                            .type_name()
                            .strip_prefix('.')
                            .and_then(|n| by_name.get(n))
                            .map_or(Kind::Bytes, |&c| Kind::Message(c)),
                        Type::String | Type::Bytes => Kind::Bytes,
                        _ => Kind::Scalar,
                    };
                    if let Ok(n) = usize::try_from(f.number()) {
                        fields[n] = Some(Field {
                            kind,
                            repeated: f.label() == Label::Repeated,
                        });
                    }
                }
                Layout {
                    size: sizes
                        .get(name.as_str())
                        .map_or(UNKNOWN_STRUCT_BYTES, |&s| s as u64),
                    fields,
                }
            })
            .collect();
        Schema { messages, by_name }
    }

    /// Measures `bytes`, an encoded `root`.
    pub fn measure(&self, root: Root, bytes: &[u8]) -> Measure {
        let mut out = Measure::default();
        let Some(&index) = self.by_name.get(root.type_name()) else {
            return out;
        };
        out.decoded_bytes = self.messages[index].size;
        let mut active = Active::default();
        for (i, &(_, path)) in root.counts().iter().enumerate() {
            active.push(i, 0, path);
        }
        let walked = self.walk(index, bytes, 0, &active, root.counts(), &mut out);
        out.scanned_bytes = match walked {
            Ok(()) => bytes.len() as u64,
            Err(Malformed(at)) => at as u64,
        };
        out
    }

    /// Walks one message's fields, counting into `out`. `active` are the
    /// count paths that pass through this message, with how far along.
    fn walk(
        &self,
        index: usize,
        bytes: &[u8],
        depth: u32,
        active: &Active,
        counts: &[(Count, &'static [u32])],
        out: &mut Measure,
    ) -> Result<(), Malformed> {
        if depth > MAX_DEPTH {
            return Err(Malformed(0));
        }
        let layout = &self.messages[index];
        let mut r = Reader { bytes, at: 0 };
        while !r.done() {
            let start = r.at;
            let key = r.varint().ok_or(Malformed(start))?;
            let number = key >> 3;
            let wire = key & 7;
            let field = usize::try_from(number)
                .ok()
                .and_then(|n| layout.fields.get(n).copied().flatten());
            match wire {
                0 => {
                    r.varint().ok_or(Malformed(start))?;
                }
                1 => r.skip(8).ok_or(Malformed(start))?,
                5 => r.skip(4).ok_or(Malformed(start))?,
                2 => {
                    let len = r.varint().ok_or(Malformed(start))?;
                    let len = usize::try_from(len).map_err(|_| Malformed(start))?;
                    let body = r.take(len).ok_or(Malformed(start))?;
                    if let Some(f) = field {
                        let inner = self.length_delimited(f, number, body, depth, active, counts, out);
                        inner.map_err(|Malformed(at)| Malformed(start + at))?;
                    }
                }
                3 => r.skip_group(number, depth).ok_or(Malformed(start))?,
                _ => return Err(Malformed(start)),
            }
            if let Some(f) = field
                && f.repeated
                && f.kind == Kind::Scalar
                && wire != 2
            {
                // One Vec slot (at most 8 bytes), twice for growth.
                out.decoded_bytes += 16;
            }
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn length_delimited(
        &self,
        f: Field,
        number: u64,
        body: &[u8],
        depth: u32,
        active: &Active,
        counts: &[(Count, &'static [u32])],
        out: &mut Measure,
    ) -> Result<(), Malformed> {
        match f.kind {
            Kind::Bytes => {
                // A String is inline in its struct; a repeated one takes a
                // Vec slot (twice for growth).
                out.decoded_bytes += body.len() as u64 + if f.repeated { 48 } else { 0 };
                Ok(())
            }
            // Packed: at most one 8-byte slot per encoded byte, twice.
            Kind::Scalar => {
                out.decoded_bytes += 16 * body.len() as u64;
                Ok(())
            }
            Kind::Message(child) => {
                if f.repeated {
                    out.decoded_bytes += 2 * self.messages[child].size;
                }
                let mut next = Active::default();
                for &(i, progress) in active.iter() {
                    let path = counts[i].1;
                    if path.get(progress).copied().map(u64::from) != Some(number) {
                        continue;
                    }
                    if progress + 1 == path.len() {
                        out.add(counts[i].0);
                    } else {
                        next.push(i, progress + 1, path);
                    }
                }
                self.walk(child, body, depth + 1, &next, counts, out)
            }
        }
    }
}

/// The byte offset (within the message walked) of the first fault.
#[derive(Debug, Clone, Copy)]
struct Malformed(usize);

/// The count paths being followed (at most a few).
#[derive(Debug, Default)]
struct Active {
    entries: [(usize, usize); 4],
    len: usize,
}

impl Active {
    fn push(&mut self, rule: usize, progress: usize, path: &[u32]) {
        if progress < path.len() && self.len < self.entries.len() {
            self.entries[self.len] = (rule, progress);
            self.len += 1;
        }
    }

    fn iter(&self) -> impl Iterator<Item = &(usize, usize)> {
        self.entries[..self.len].iter()
    }
}

/// A cursor over protobuf wire bytes.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn done(&self) -> bool {
        self.at >= self.bytes.len()
    }

    fn varint(&mut self) -> Option<u64> {
        let mut value = 0u64;
        for shift in (0..70).step_by(7) {
            let b = *self.bytes.get(self.at)?;
            self.at += 1;
            value |= u64::from(b & 0x7f).checked_shl(shift).unwrap_or(0);
            if b < 0x80 {
                return Some(value);
            }
        }
        None
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let slice = self.bytes.get(self.at..end)?;
        self.at = end;
        Some(slice)
    }

    fn skip(&mut self, n: usize) -> Option<()> {
        self.take(n).map(|_| ())
    }

    /// Skips a group (deprecated wire types 3/4), as prost does: nothing in
    /// it is kept.
    fn skip_group(&mut self, number: u64, depth: u32) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        loop {
            let key = self.varint()?;
            match key & 7 {
                0 => {
                    self.varint()?;
                }
                1 => self.skip(8)?,
                5 => self.skip(4)?,
                2 => {
                    let len = usize::try_from(self.varint()?).ok()?;
                    self.skip(len)?;
                }
                3 => self.skip_group(key >> 3, depth + 1)?,
                4 if key >> 3 == number => return Some(()),
                _ => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests;
