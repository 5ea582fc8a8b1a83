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

use crate::prompt::{BlockKind, Item};
use crate::vocab::escape::{escape_attr, escape_tags};
use crate::vocab::{Cancelled, Meter};

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

/// Copies `content`, writing `&lt;` for every `<` that would open or close
/// one of our wrapper tags.
fn escape_content(out: &mut String, content: &str) {
    escape_tags(out, content, &TAGS);
}

/// Byte offsets just after each sentence end in `text` (after `.`, `!`, `?`
/// or `…` followed by whitespace, and after every line break), ascending,
/// leaving out ends with only whitespace before them. Cutting at any of them
/// truncates at a sentence boundary.
///
/// One pass, ticking `meter` with every byte scanned: `Err(Cancelled)` once
/// its flag is set. (Testing each end's prefix for text made a blank SUMMARY
/// of 4 MB quadratic: hours.)
pub fn sentence_ends(text: &str, meter: &mut Meter<'_>) -> Result<Vec<usize>, Cancelled> {
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

#[cfg(test)]
mod tests;
