//! Observations and session summaries out of a model's raw output.
//!
//! The output is prose with zero or more `<observation>` and `<summary>`
//! blocks in it. Parsing goes in three linear passes:
//!
//! 1. every `<private>` span is removed from the raw text, lexically and
//!    failing closed (an unterminated span runs to the end), so private text
//!    cannot reach a parsed field whatever the blocks around it look like;
//! 2. one scan finds every block tag and matches opens to closes with a
//!    stack, so each top-level block is found without rescanning the text;
//! 3. each block's known fields are read (`parse/fields.rs`) leniently, as
//!    models write them, not as XML: a field runs from `<name>` to its own
//!    `</name>` or, left open, to the end of its block, and everything
//!    inside it but that closer is text, kept byte for byte (generics such as `Vec<String>`,
//!    tags and stray closers of other vocabularies, a bare `&` or `<`, an
//!    undefined entity); only the five predefined entities and character
//!    references are decoded and CDATA sections unwrapped. Entities are
//!    never defined, so never expanded.
//!
//! Every pass looks at each byte a bounded number of times, whatever the
//! input (4 MiB of `<` or of unclosed tags included): the work is metered
//! in bytes scanned ([`parse_model_output_metered`]) and
//! `parse::tests::parsing_work_is_linear_in_hostile_input` holds it to a
//! constant times the input's size.
//!
//! Only a block that cannot be a memory becomes a [`BlockProblem`] (an
//! observation without a known type or without text, an empty summary, a
//! nested or unterminated block); its reason names only elements, positions
//! and counts, never the content.

use std::borrow::Cow;
use std::cell::Cell;
use std::ops::Range;

use super::model::MemoryBody;
use crate::vocab::saturating_u32;
use fields::parse_block;

/// Most blocks parsed from one text; later ones are reported once and ignored.
pub const MAX_BLOCKS: usize = 1000;

/// Which kind of block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Element {
    /// An `<observation>` block.
    Observation,
    /// A `<summary>` block.
    Summary,
}

impl Element {
    /// The element name: `"observation"` or `"summary"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Element::Observation => "observation",
            Element::Summary => "summary",
        }
    }

    fn slot(self) -> usize {
        match self {
            Element::Observation => 0,
            Element::Summary => 1,
        }
    }
}

/// A block that parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedBlock {
    /// The block's element.
    pub element: Element,
    /// The block's ordinal among all blocks of the text, problems included.
    pub index: u32,
    /// Byte offset of the block's `<` in the original text.
    pub offset: usize,
    /// What the block says.
    pub content: MemoryBody,
}

/// A block that did not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockProblem {
    /// The block's element.
    pub element: Element,
    /// The block's ordinal among all blocks of the text, parsed ones included.
    pub index: u32,
    /// Byte offset of the block's `<` in the original text.
    pub offset: usize,
    /// Why; names elements, positions and counts only, never content.
    pub reason: String,
}

/// Everything found in one model output.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Parsed {
    /// Blocks that parsed, in text order.
    pub blocks: Vec<ParsedBlock>,
    /// Blocks that did not, in text order.
    pub problems: Vec<BlockProblem>,
    /// How many `<private>` spans were removed before parsing.
    pub private_spans: usize,
}

/// Removes every `<private>...</private>` span, tags included, and returns
/// the text with how many spans were removed (borrowed when none were).
///
/// Tag names are ASCII case-insensitive and may carry attributes; nested
/// spans are removed whole with their outermost span; an unterminated span
/// runs to the end of the text (fail closed). A stray `</private>` is removed
/// too but not counted. Lexical only: it works on prose and on structured
/// fields alike.
pub fn strip_private(text: &str) -> (Cow<'_, str>, usize) {
    let m = Meter::default();
    let (removals, spans) = private_removals(text, &m);
    (remove(text, &removals, &m), spans)
}

/// Parses every top-level `<observation>` and `<summary>` block of `text`.
///
/// `types` are the accepted observation types (compared trimmed and lower
/// case). Private spans are removed first; offsets still refer to `text`.
/// Never panics, takes time linear in the input, and parses at most
/// [`MAX_BLOCKS`] blocks.
pub fn parse_model_output(text: &str, types: &[String]) -> Parsed {
    parse_model_output_metered(text, types).0
}

/// [`parse_model_output`], and the work it did: how many bytes its scans
/// looked at (a byte looked at twice counts twice). What tests and the fuzz
/// target compare with the input's size to hold the parser linear without
/// depending on the machine's speed.
pub fn parse_model_output_metered(text: &str, types: &[String]) -> (Parsed, u64) {
    let m = Meter::default();
    let parsed = parse(text, types, &m);
    (parsed, m.0.get())
}

/// Bytes looked at so far.
#[derive(Default)]
struct Meter(Cell<u64>);

impl Meter {
    fn add(&self, bytes: usize) {
        self.0.set(self.0.get().saturating_add(bytes as u64));
    }
}

fn parse(text: &str, types: &[String], m: &Meter) -> Parsed {
    let (removals, private_spans) = private_removals(text, m);
    let stripped = remove(text, &removals, m);
    let offsets = OffsetMap::new(&removals);
    let types: Vec<String> = types.iter().map(|t| t.trim().to_lowercase()).collect();

    let mut parsed = Parsed {
        private_spans,
        ..Parsed::default()
    };
    let mut cursor = 0;
    let mut found = 0usize;
    for open in block_tags(&stripped, &offsets, m) {
        if open.pos < cursor {
            continue; // inside the previous block
        }
        let offset = offsets.original(open.pos);
        let element = open.element;
        if found == MAX_BLOCKS {
            let reason = format!("more than {MAX_BLOCKS} blocks; the rest were ignored");
            parsed.problems.push(BlockProblem {
                element,
                index: ordinal(found),
                offset,
                reason,
            });
            break;
        }
        let index = ordinal(found);
        found += 1;
        let result = match open.body {
            None => {
                cursor = open.name_end;
                Err(format!("unterminated <{}>", element.as_str()))
            }
            Some((body, end)) => {
                cursor = end;
                stripped
                    .get(body)
                    .ok_or_else(|| "block does not end on a character boundary".to_string())
                    .and_then(|body| parse_block(element, body, &types, m))
            }
        };
        match result {
            Ok(content) => parsed.blocks.push(ParsedBlock {
                element,
                index,
                offset,
                content,
            }),
            Err(reason) => parsed.problems.push(BlockProblem {
                element,
                index,
                offset,
                reason,
            }),
        }
    }
    parsed
}

fn ordinal(n: usize) -> u32 {
    saturating_u32(n)
}

// ---------------------------------------------------------------- private

/// The byte ranges of `text` to remove (spans and stray closes, in order,
/// disjoint) and how many spans they hold.
fn private_removals(text: &str, m: &Meter) -> (Vec<Range<usize>>, usize) {
    let bytes = text.as_bytes();
    let mut gt = NextGt::new(bytes);
    let mut removals = Vec::new();
    let mut spans = 0;
    let mut depth = 0usize;
    let mut start = 0;
    let mut at = 0;
    while let Some(lt) = find_byte(bytes, at, b'<', m) {
        at = lt + 1;
        if let Some(end) = close_tag_end(bytes, lt, b"private", true, m) {
            at = end;
            match depth {
                0 => removals.push(lt..end),
                1 => {
                    depth = 0;
                    spans += 1;
                    removals.push(start..end);
                }
                _ => depth -= 1,
            }
        } else if let Some(tag) = open_tag(bytes, lt, b"private", true, &mut gt, m) {
            if depth == 0 {
                start = lt;
            }
            match tag {
                OpenTag::Unterminated => {
                    depth += 1;
                    break;
                }
                OpenTag::SelfClosing(end) => {
                    at = end;
                    if depth == 0 {
                        spans += 1;
                        removals.push(lt..end);
                    }
                }
                OpenTag::Open(end) => {
                    at = end;
                    depth += 1;
                }
            }
        }
    }
    if depth > 0 {
        spans += 1;
        removals.push(start..bytes.len());
    }
    (removals, spans)
}

/// `text` without the `removals` (ordered, disjoint, on char boundaries).
fn remove<'a>(text: &'a str, removals: &[Range<usize>], m: &Meter) -> Cow<'a, str> {
    if removals.is_empty() {
        return Cow::Borrowed(text);
    }
    m.add(text.len());
    let mut out = String::with_capacity(text.len());
    let mut kept = 0;
    for r in removals {
        out.push_str(text.get(kept..r.start).unwrap_or_default());
        kept = r.end;
    }
    out.push_str(text.get(kept..).unwrap_or_default());
    Cow::Owned(out)
}

/// Maps a byte offset in the stripped text back to the original text.
struct OffsetMap {
    /// (offset in the stripped text where a removal was, bytes removed up to
    /// and including it), ascending.
    marks: Vec<(usize, usize)>,
}

impl OffsetMap {
    fn new(removals: &[Range<usize>]) -> Self {
        let mut removed = 0;
        let marks = removals
            .iter()
            .map(|r| {
                let at = r.start - removed;
                removed += r.end - r.start;
                (at, removed)
            })
            .collect();
        OffsetMap { marks }
    }

    /// Whether a removal was joined at some offset strictly inside
    /// `start..end`: text there was not contiguous in the original.
    fn joins_inside(&self, start: usize, end: usize) -> bool {
        let first = self.marks.partition_point(|&(at, _)| at <= start);
        self.marks.get(first).is_some_and(|&(at, _)| at < end)
    }

    fn original(&self, stripped: usize) -> usize {
        let before = self.marks.partition_point(|&(at, _)| at <= stripped);
        before
            .checked_sub(1)
            .and_then(|i| self.marks.get(i))
            .map_or(stripped, |&(_, removed)| stripped + removed)
    }
}

// ---------------------------------------------------------------- tags

/// An opening tag found at a `<`.
enum OpenTag {
    /// `<name ...>`; the offset just past its `>`.
    Open(usize),
    /// `<name .../>`; the offset just past its `>`.
    SelfClosing(usize),
    /// `<name ...` with no `>` anywhere after it.
    Unterminated,
}

/// The opening tag of `name` at `lt`, if one starts there: the name followed
/// by `>`, `/`, whitespace or the end of the text.
fn open_tag(
    bytes: &[u8],
    lt: usize,
    name: &[u8],
    fold_case: bool,
    gt: &mut NextGt<'_>,
    m: &Meter,
) -> Option<OpenTag> {
    let name_end = lt + 1 + name.len();
    if !same_name(bytes.get(lt + 1..name_end)?, name, fold_case) {
        return None;
    }
    match bytes.get(name_end) {
        Some(b'>') => Some(OpenTag::Open(name_end + 1)),
        Some(b) if *b == b'/' || b.is_ascii_whitespace() => Some(match gt.at_or_after(name_end, m) {
            None => OpenTag::Unterminated,
            Some(g) if bytes.get(g - 1) == Some(&b'/') => OpenTag::SelfClosing(g + 1),
            Some(g) => OpenTag::Open(g + 1),
        }),
        // Output cut off right after the name: a private span still opens
        // (fail closed) and a block is reported as unterminated.
        None => Some(OpenTag::Unterminated),
        _ => None,
    }
}

/// The offset just past the closing tag of `name` (`</name>`, whitespace
/// allowed before `>`) if one starts at `lt`.
fn close_tag_end(bytes: &[u8], lt: usize, name: &[u8], fold_case: bool, m: &Meter) -> Option<usize> {
    if bytes.get(lt + 1) != Some(&b'/') {
        return None;
    }
    let name_end = lt + 2 + name.len();
    if !same_name(bytes.get(lt + 2..name_end)?, name, fold_case) {
        return None;
    }
    let spaces = bytes
        .get(name_end..)?
        .iter()
        .take_while(|b| b.is_ascii_whitespace())
        .count();
    m.add(spaces);
    (bytes.get(name_end + spaces) == Some(&b'>')).then_some(name_end + spaces + 1)
}

fn same_name(found: &[u8], name: &[u8], fold_case: bool) -> bool {
    if fold_case {
        found.eq_ignore_ascii_case(name)
    } else {
        found == name
    }
}

/// The first `byte` at or after `from`; the bytes looked at are metered.
fn find_byte(bytes: &[u8], from: usize, byte: u8, m: &Meter) -> Option<usize> {
    let rest = bytes.get(from..)?;
    let found = rest.iter().position(|&b| b == byte);
    m.add(found.map_or(rest.len(), |p| p + 1));
    found.map(|p| from + p)
}

/// Finds the next `>` for queries at non-decreasing offsets in amortised
/// linear time, so thousands of unclosed tags cost one scan, not one each.
struct NextGt<'a> {
    bytes: &'a [u8],
    last: Option<usize>,
    none_from: usize,
}

impl<'a> NextGt<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        NextGt {
            bytes,
            last: None,
            none_from: usize::MAX,
        }
    }

    fn at_or_after(&mut self, from: usize, m: &Meter) -> Option<usize> {
        if let Some(g) = self.last
            && g >= from
        {
            return Some(g);
        }
        if from >= self.none_from {
            return None;
        }
        let found = find_byte(self.bytes, from, b'>', m);
        match found {
            Some(g) => self.last = Some(g),
            None => self.none_from = from,
        }
        found
    }
}

/// An opening block tag in the stripped text.
struct BlockTag {
    pos: usize,
    element: Element,
    /// Just past `<name`: where scanning resumes after an unterminated block.
    name_end: usize,
    /// The body (between the opening and the matching closing tag) and the
    /// offset just past the closing tag, once that is found.
    body: Option<(Range<usize>, usize)>,
    /// Just past the opening tag's `>` (`None` when unterminated).
    open_end: Option<usize>,
}

/// Every opening `<observation>`/`<summary>` tag in order, each matched to
/// its closing tag by a per-name stack (the close that brings the nesting
/// depth counted from the open back to zero), in one pass. A tag that only
/// exists because a private span was removed from its middle is no tag.
fn block_tags(text: &str, offsets: &OffsetMap, m: &Meter) -> Vec<BlockTag> {
    const ELEMENTS: [Element; 2] = [Element::Observation, Element::Summary];
    let bytes = text.as_bytes();
    let mut gt = NextGt::new(bytes);
    let mut tags: Vec<BlockTag> = Vec::new();
    let mut unclosed: [Vec<usize>; 2] = [Vec::new(), Vec::new()];
    let mut at = 0;
    while let Some(lt) = find_byte(bytes, at, b'<', m) {
        at = lt + 1;
        for element in ELEMENTS {
            let name = element.as_str().as_bytes();
            if let Some(end) = close_tag_end(bytes, lt, name, false, m) {
                if offsets.joins_inside(lt, end) {
                    break;
                }
                if let Some(open) = unclosed[element.slot()].pop()
                    && let Some(tag) = tags.get_mut(open)
                    && let Some(open_end) = tag.open_end
                {
                    tag.body = Some((open_end..lt, end));
                }
                break;
            }
            if let Some(open) = open_tag(bytes, lt, name, false, &mut gt, m) {
                let name_end = lt + 1 + name.len();
                if offsets.joins_inside(lt, name_end + 1) {
                    break;
                }
                let (body, open_end) = match open {
                    OpenTag::SelfClosing(end) => (Some((end..end, end)), Some(end)),
                    OpenTag::Open(end) => (None, Some(end)),
                    OpenTag::Unterminated => (None, None),
                };
                if body.is_none() {
                    unclosed[element.slot()].push(tags.len());
                }
                tags.push(BlockTag {
                    pos: lt,
                    element,
                    name_end,
                    body,
                    open_end,
                });
                break;
            }
        }
    }
    tags
}

mod fields;

#[cfg(test)]
mod tests;
