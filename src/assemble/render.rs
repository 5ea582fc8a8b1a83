//! Rendering: how items become text, and why the text is exactly countable.
//!
//! Context items (STATE, EVIDENCE, MEMORY, SUMMARY) are rendered as *units*:
//!
//! ```text
//! <document id="doc-1" source="kb" trust="untrusted">
//! ...escaped content...
//! </document>
//! ```
//!
//! followed by one `\n`. Every unit starts with `<` + a letter and ends with
//! `>\n`. In both cl100k and o200k pre-tokenization, `>\n` is one piece
//! (` ?[^\s\p{L}\p{N}]+[\r\n]*` stops at the next `<`), the `\n` before the
//! closing tag ends whatever piece the content ends with (no pattern crosses
//! `\n<`), and a piece starting at `<` followed by a letter is the same
//! whatever precedes it. So the seam between two units is always a piece
//! boundary and the pieces on each side are those of the unit alone: the
//! count of concatenated units is the sum of their counts. This is what lets
//! the segment cache hold one count per unit; `render::tests` proves it
//! against a from-scratch count on adversarial content, and the assembler's
//! property tests recount every rendered prompt.
//!
//! Content is escaped so that it can neither close nor forge any wrapper: a
//! `<` that would start one of our tags (`<document`, `</memory`, ...,
//! case-insensitive, whitespace allowed after `<` or `/`) is written `&lt;`.

use std::fmt::Write as _;

use super::cancel::Meter;
use super::error::AssembleError;
use super::request::{BlockKind, Item, Segment};

/// Version of the rendering rules; part of the prefix hash so that a change
/// of rendering is a change of hash.
pub const PREFIX_VERSION: &str = "context-assembler/prefix/v1";

/// Wrapper tag names; a content `<` that starts any of these is escaped.
const TAGS: [&str; 4] = ["document", "memory", "state", "summary"];

/// The wrapper tag of a context block kind. Turns are never wrapped (they
/// are messages in their own roles); they share the summary tag only to keep
/// the function total.
pub fn tag(kind: BlockKind) -> &'static str {
    match kind {
        BlockKind::Evidence => "document",
        BlockKind::Memory => "memory",
        BlockKind::State => "state",
        BlockKind::Summary | BlockKind::RecentTurns | BlockKind::History => "summary",
    }
}

/// Which form of an item a unit renders; marked in the wrapper so the model
/// knows a text is partial.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FormAttr {
    /// The item's content.
    Full,
    /// The item's `compact_form`.
    Compact,
    /// A sentence-boundary prefix of the content.
    Truncated,
}

/// Appends the unit of `item` (with `content` as its text) to `out`.
pub fn render_unit(out: &mut String, kind: BlockKind, item: &Item, content: &str, form: FormAttr) {
    let tag = tag(kind);
    out.reserve(content.len() + tag.len() * 2 + item.id.len() + item.source.len() + 48);
    out.push('<');
    out.push_str(tag);
    out.push_str(" id=\"");
    escape_attr(out, &item.id);
    out.push('"');
    if !item.source.is_empty() {
        out.push_str(" source=\"");
        escape_attr(out, &item.source);
        out.push('"');
    }
    if !item.trusted {
        out.push_str(" trust=\"untrusted\"");
    }
    match form {
        FormAttr::Full => {}
        FormAttr::Compact => out.push_str(" form=\"compact\""),
        FormAttr::Truncated => out.push_str(" form=\"truncated\""),
    }
    out.push_str(">\n");
    escape_content(out, content);
    out.push_str("\n</");
    out.push_str(tag);
    out.push_str(">\n");
}

/// The unit of `item` as a new string.
pub fn unit(kind: BlockKind, item: &Item, content: &str, form: FormAttr) -> String {
    let mut s = String::new();
    render_unit(&mut s, kind, item, content, form);
    s
}

/// Appends `value` escaped for a double-quoted attribute (no quote, angle
/// bracket or line break survives).
pub fn escape_attr(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\n' => out.push_str("&#10;"),
            '\r' => out.push_str("&#13;"),
            c => out.push(c),
        }
    }
}

/// Copies `content`, writing `&lt;` for every `<` that would open or close
/// one of our wrapper tags.
fn escape_content(out: &mut String, content: &str) {
    escape_tags(out, content, &TAGS);
}

/// Copies `content`, writing `&lt;` for every `<` that would open or close
/// one of `tags` (any case, whitespace allowed after `<` or `/`).
pub fn escape_tags(out: &mut String, content: &str, tags: &[&str]) {
    let bytes = content.as_bytes();
    let mut copied = 0;
    let mut from = 0;
    while let Some(off) = content[from..].find('<') {
        let at = from + off;
        if starts_tag(&bytes[at + 1..], tags) {
            out.push_str(&content[copied..at]);
            out.push_str("&lt;");
            copied = at + 1;
        }
        from = at + 1;
    }
    out.push_str(&content[copied..]);
}

/// Whether the bytes after a `<` spell `[ws]* /? [ws]* tagname`, any case,
/// for a tag name of `tags`.
fn starts_tag(rest: &[u8], tags: &[&str]) -> bool {
    let mut i = 0;
    while i < rest.len() && rest[i].is_ascii_whitespace() {
        i += 1;
    }
    if i < rest.len() && rest[i] == b'/' {
        i += 1;
        while i < rest.len() && rest[i].is_ascii_whitespace() {
            i += 1;
        }
    }
    let rest = &rest[i..];
    tags.iter()
        .any(|t| rest.len() >= t.len() && rest[..t.len()].eq_ignore_ascii_case(t.as_bytes()))
}

/// Byte offsets just after each sentence end in `text` (after `.`, `!`, `?`
/// or `…` followed by whitespace, and after every line break), ascending,
/// leaving out ends with only whitespace before them. Cutting at any of them
/// truncates at a sentence boundary.
///
/// One pass, ticking `meter` with every byte scanned: `Err(Cancelled)` once
/// its flag is set. (Testing each end's prefix for text made a blank SUMMARY
/// of 4 MB quadratic: hours.)
pub fn sentence_ends(text: &str, meter: &mut Meter<'_>) -> Result<Vec<usize>, AssembleError> {
    let mut ends = Vec::new();
    let mut prev: Option<char> = None;
    // Whether anything but whitespace comes before the current character.
    let mut seen_text = false;
    for (i, c) in text.char_indices() {
        meter.tick(c.len_utf8() as u64)?;
        let after_stop = c.is_whitespace() && matches!(prev, Some('.' | '!' | '?' | '…'));
        if seen_text && (c == '\n' || after_stop) {
            ends.push(i);
        }
        seen_text |= !c.is_whitespace();
        prev = Some(c);
    }
    if matches!(prev, Some('.' | '!' | '?' | '…')) {
        ends.push(text.len());
    }
    Ok(ends)
}

/// The evidence placement for `n` ranked items (0 = best): best first, second
/// best last, weaker toward the middle. For 7: 0,2,4,6,5,3,1.
pub fn alternating_order(n: usize) -> Vec<usize> {
    let front = (0..n).step_by(2);
    let back = (1..n).step_by(2).rev();
    front.chain(back).collect()
}

/// The hash of the static prefix as rendered: the rendering version, then
/// each message's role and content, length-framed. Returns (lower-case hex,
/// digest, content bytes).
pub fn prefix_hash(tools: &[String], segments: &[Segment]) -> (String, [u8; 32], u64) {
    let mut h = blake3::Hasher::new();
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
        let role = super::request::Role::System.as_str();
        h.update(&(role.len() as u64).to_le_bytes());
        h.update(role.as_bytes());
        h.update(&(s.content.len() as u64).to_le_bytes());
        h.update(s.content.as_bytes());
        bytes += s.content.len() as u64;
    }
    let digest = h.finalize();
    let mut hex = String::with_capacity(64);
    for b in digest.as_bytes() {
        let _ = write!(hex, "{b:02x}");
    }
    (hex, *digest.as_bytes(), bytes)
}

#[cfg(test)]
mod tests;
