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
//! 3. each block is lightly repaired (bare `&` and `<` in text escaped) and
//!    parsed with a real XML parser that refuses DTDs and bounds its nodes,
//!    then mapped to [`Content`].
//!
//! A block that fails becomes a [`BlockProblem`] whose reason names only
//! elements, positions and counts, never the content.

use std::borrow::Cow;
use std::ops::Range;

use roxmltree::{Document, Node, ParsingOptions};

use super::model::{Content, Observation, SessionSummary};

/// Most blocks parsed from one text; later ones are reported once and ignored.
pub const MAX_BLOCKS: usize = 1000;

/// Most XML nodes one block may hold before it is rejected.
pub const NODES_LIMIT: u32 = 100_000;

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
    pub content: Content,
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
    let (removals, spans) = private_removals(text);
    (remove(text, &removals), spans)
}

/// Parses every top-level `<observation>` and `<summary>` block of `text`.
///
/// `types` are the accepted observation types (compared trimmed and lower
/// case). Private spans are removed first; offsets still refer to `text`.
/// Never panics, takes time linear in the input, and parses at most
/// [`MAX_BLOCKS`] blocks.
pub fn parse_model_output(text: &str, types: &[String]) -> Parsed {
    let (removals, private_spans) = private_removals(text);
    let stripped = remove(text, &removals);
    let offsets = OffsetMap::new(&removals);
    let types: Vec<String> = types.iter().map(|t| t.trim().to_lowercase()).collect();

    let mut parsed = Parsed {
        private_spans,
        ..Parsed::default()
    };
    let mut cursor = 0;
    let mut found = 0usize;
    for open in block_tags(&stripped, &offsets) {
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
        let result = match open.close_end {
            None => {
                cursor = open.name_end;
                Err(format!("unterminated <{}>", element.as_str()))
            }
            Some(end) => {
                cursor = end;
                stripped
                    .get(open.pos..end)
                    .ok_or_else(|| "block does not end on a character boundary".to_string())
                    .and_then(|block| parse_block(element, block, &types))
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
    u32::try_from(n).unwrap_or(u32::MAX)
}

// ---------------------------------------------------------------- private

/// The byte ranges of `text` to remove (spans and stray closes, in order,
/// disjoint) and how many spans they hold.
fn private_removals(text: &str) -> (Vec<Range<usize>>, usize) {
    let bytes = text.as_bytes();
    let mut gt = NextGt::new(bytes);
    let mut removals = Vec::new();
    let mut spans = 0;
    let mut depth = 0usize;
    let mut start = 0;
    let mut at = 0;
    while let Some(lt) = find_byte(bytes, at, b'<') {
        at = lt + 1;
        if let Some(end) = close_tag_end(bytes, lt, b"private", true) {
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
        } else if let Some(tag) = open_tag(bytes, lt, b"private", true, &mut gt) {
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
fn remove<'a>(text: &'a str, removals: &[Range<usize>]) -> Cow<'a, str> {
    if removals.is_empty() {
        return Cow::Borrowed(text);
    }
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
fn open_tag(bytes: &[u8], lt: usize, name: &[u8], fold_case: bool, gt: &mut NextGt<'_>) -> Option<OpenTag> {
    let name_end = lt + 1 + name.len();
    if !same_name(bytes.get(lt + 1..name_end)?, name, fold_case) {
        return None;
    }
    match bytes.get(name_end) {
        Some(b'>') => Some(OpenTag::Open(name_end + 1)),
        Some(b) if *b == b'/' || b.is_ascii_whitespace() => Some(match gt.at_or_after(name_end) {
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
fn close_tag_end(bytes: &[u8], lt: usize, name: &[u8], fold_case: bool) -> Option<usize> {
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
    (bytes.get(name_end + spaces) == Some(&b'>')).then_some(name_end + spaces + 1)
}

fn same_name(found: &[u8], name: &[u8], fold_case: bool) -> bool {
    if fold_case {
        found.eq_ignore_ascii_case(name)
    } else {
        found == name
    }
}

fn find_byte(bytes: &[u8], from: usize, byte: u8) -> Option<usize> {
    bytes
        .get(from..)?
        .iter()
        .position(|&b| b == byte)
        .map(|p| from + p)
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

    fn at_or_after(&mut self, from: usize) -> Option<usize> {
        if let Some(g) = self.last
            && g >= from
        {
            return Some(g);
        }
        if from >= self.none_from {
            return None;
        }
        let found = find_byte(self.bytes, from, b'>');
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
    /// Just past the matching close tag, if any.
    close_end: Option<usize>,
}

/// Every opening `<observation>`/`<summary>` tag in order, each matched to
/// its closing tag by a per-name stack (the close that brings the nesting
/// depth counted from the open back to zero), in one pass. A tag that only
/// exists because a private span was removed from its middle is no tag.
fn block_tags(text: &str, offsets: &OffsetMap) -> Vec<BlockTag> {
    const ELEMENTS: [Element; 2] = [Element::Observation, Element::Summary];
    let bytes = text.as_bytes();
    let mut gt = NextGt::new(bytes);
    let mut tags: Vec<BlockTag> = Vec::new();
    let mut unclosed: [Vec<usize>; 2] = [Vec::new(), Vec::new()];
    let mut at = 0;
    while let Some(lt) = find_byte(bytes, at, b'<') {
        at = lt + 1;
        for element in ELEMENTS {
            let name = element.as_str().as_bytes();
            if let Some(end) = close_tag_end(bytes, lt, name, false) {
                if offsets.joins_inside(lt, end) {
                    break;
                }
                if let Some(open) = unclosed[element.slot()].pop()
                    && let Some(tag) = tags.get_mut(open)
                {
                    tag.close_end = Some(end);
                }
                break;
            }
            if let Some(open) = open_tag(bytes, lt, name, false, &mut gt) {
                let name_end = lt + 1 + name.len();
                if offsets.joins_inside(lt, name_end + 1) {
                    break;
                }
                let close_end = match open {
                    OpenTag::SelfClosing(end) => Some(end),
                    OpenTag::Open(_) | OpenTag::Unterminated => {
                        unclosed[element.slot()].push(tags.len());
                        None
                    }
                };
                tags.push(BlockTag {
                    pos: lt,
                    element,
                    name_end,
                    close_end,
                });
                break;
            }
        }
    }
    tags
}

// ---------------------------------------------------------------- blocks

fn parse_block(element: Element, block: &str, types: &[String]) -> Result<Content, String> {
    let repaired = repair(block);
    let options = ParsingOptions {
        allow_dtd: false,
        nodes_limit: NODES_LIMIT,
        ..ParsingOptions::default()
    };
    let doc = Document::parse_with_options(&repaired, options).map_err(|e| describe(&e))?;
    let root = doc.root_element();
    let name = element.as_str();
    if root
        .descendants()
        .skip(1)
        .any(|n| n.is_element() && n.tag_name().name() == name)
    {
        return Err(format!("nested <{name}>"));
    }
    match element {
        Element::Observation => observation(root, types),
        Element::Summary => summary(root),
    }
}

fn observation(root: Node<'_, '_>, types: &[String]) -> Result<Content, String> {
    let mut kind: Option<String> = None;
    let mut o = Observation::default();
    let mut narrative = String::new();
    for child in root.children().filter(Node::is_element) {
        match child.tag_name().name() {
            "type" if kind.is_none() => kind = Some(text_of(child).to_lowercase()),
            "title" => append(&mut o.title, text_of(child)),
            "text" => append(&mut o.text, text_of(child)),
            "narrative" => append(&mut narrative, text_of(child)),
            "facts" => o.facts.extend(entries(child)),
            "files_read" => o.files_read.extend(entries(child)),
            "files_modified" | "files_edited" => o.files_modified.extend(entries(child)),
            _ => {} // subtitle, concepts and anything new: tolerated
        }
    }
    append(&mut o.text, narrative);
    o.kind = match kind {
        None => return Err("observation has no type".into()),
        Some(k) if k.is_empty() => return Err("observation has no type".into()),
        Some(k) if !types.contains(&k) => {
            return Err(format!("unknown observation type ({} bytes)", k.len()));
        }
        Some(k) => k,
    };
    if o.text.is_empty() && o.title.is_empty() {
        return Err("observation has no text".into());
    }
    Ok(Content::Observation(o))
}

fn summary(root: Node<'_, '_>) -> Result<Content, String> {
    let mut s = SessionSummary::default();
    for child in root.children().filter(Node::is_element) {
        let field = match child.tag_name().name() {
            "request" => &mut s.request,
            "investigated" => &mut s.investigated,
            "learned" => &mut s.learned,
            "completed" => &mut s.completed,
            "next_steps" => &mut s.next_steps,
            "notes" => &mut s.notes,
            "files_read" => {
                s.files_read.extend(entries(child));
                continue;
            }
            "files_edited" | "files_modified" => {
                s.files_edited.extend(entries(child));
                continue;
            }
            _ => continue,
        };
        append(field, text_of(child));
    }
    let content = Content::Summary(s);
    if content.is_blank() {
        return Err("summary is empty".into());
    }
    Ok(content)
}

/// All descendant text (CDATA included), trimmed.
fn text_of(node: Node<'_, '_>) -> String {
    let all: String = node
        .descendants()
        .filter(Node::is_text)
        .filter_map(|n| n.text())
        .collect();
    all.trim().to_string()
}

/// A list element's entries: each child element's text, or, when it has no
/// child elements, each line of its text; blank entries skipped.
fn entries(node: Node<'_, '_>) -> Vec<String> {
    if node.children().any(|n| n.is_element()) {
        node.children()
            .filter(Node::is_element)
            .map(text_of)
            .filter(|e| !e.is_empty())
            .collect()
    } else {
        text_of(node)
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect()
    }
}

/// Appends a repeated field's value on its own line.
fn append(field: &mut String, value: String) {
    if value.is_empty() {
        return;
    }
    if field.is_empty() {
        *field = value;
    } else {
        field.push('\n');
        field.push_str(&value);
    }
}

/// Escapes what models write in text but XML forbids: a `&` that does not
/// start a reference becomes `&amp;`, a `<` that cannot start markup becomes
/// `&lt;`. CDATA sections are copied verbatim.
fn repair(block: &str) -> Cow<'_, str> {
    const CDATA: &[u8] = b"<![CDATA[";
    let bytes = block.as_bytes();
    let mut out = String::new();
    let mut kept = 0;
    let mut at = 0;
    while let Some(&b) = bytes.get(at) {
        let rest = bytes.get(at..).unwrap_or_default();
        let escape = match b {
            b'&' if !is_reference(rest) => "&amp;",
            b'<' if rest.starts_with(CDATA) => {
                at = block
                    .get(at + CDATA.len()..)
                    .and_then(|r| r.find("]]>"))
                    .map_or(bytes.len(), |p| at + CDATA.len() + p + 3);
                continue;
            }
            b'<' if !rest
                .get(1)
                .is_some_and(|c| c.is_ascii_alphabetic() || b"/!?".contains(c)) =>
            {
                "&lt;"
            }
            _ => {
                at += 1;
                continue;
            }
        };
        out.push_str(block.get(kept..at).unwrap_or_default());
        out.push_str(escape);
        at += 1;
        kept = at;
    }
    if kept == 0 {
        return Cow::Borrowed(block);
    }
    out.push_str(block.get(kept..).unwrap_or_default());
    Cow::Owned(out)
}

/// Whether `rest` (starting at `&`) starts a syntactically valid reference:
/// `&name;`, `&#123;` or `&#x1F;`.
fn is_reference(rest: &[u8]) -> bool {
    let body = rest.get(1..).unwrap_or_default();
    let (skip, len) = if body.starts_with(b"#x") {
        (
            2,
            body.iter().skip(2).take_while(|b| b.is_ascii_hexdigit()).count(),
        )
    } else if body.starts_with(b"#") {
        (1, body.iter().skip(1).take_while(|b| b.is_ascii_digit()).count())
    } else if body
        .first()
        .is_some_and(|b| b.is_ascii_alphabetic() || *b == b'_' || *b == b':')
    {
        (
            0,
            body.iter()
                .take_while(|b| b.is_ascii_alphanumeric() || b"_:.-".contains(b))
                .count(),
        )
    } else {
        return false;
    };
    len > 0 && body.get(skip + len) == Some(&b';')
}

/// A parse error as kind and position only: roxmltree's own messages may
/// quote element or entity names taken from the content.
fn describe(e: &roxmltree::Error) -> String {
    use roxmltree::Error as E;
    let kind = match e {
        E::DtdDetected => "DTD not allowed",
        E::NodesLimitReached => "too many nodes",
        E::AttributesLimitReached => "too many attributes",
        E::UnknownEntityReference(..) => "unknown entity reference",
        E::MalformedEntityReference(_) => "malformed entity reference",
        E::EntityReferenceLoop(_) => "entity reference loop",
        E::UnexpectedCloseTag(..) => "unexpected close tag",
        E::UnclosedRootNode => "unclosed element",
        E::UnexpectedDeclaration(_) => "unexpected declaration",
        E::NonXmlChar(..) | E::InvalidChar(..) | E::InvalidChar2(..) => "invalid character",
        E::DuplicatedAttribute(..) => "duplicated attribute",
        _ => "syntax error",
    };
    let pos = e.pos();
    format!("malformed XML: {kind} at {}:{} of the block", pos.row, pos.col)
}

#[cfg(test)]
mod tests;
