//! What a generated field value parses back to, written apart from the
//! parser: which values a field cannot hold (its own closer, a block tag, a
//! reference or CDATA section that a raw value would decode, a private span
//! that depends on what follows) and the text the others must give. Shared
//! by `code_fields.rs` (the parser's tests and `tests/stores/memory_parse.rs`) and
//! the `memory_parse` fuzz target, which include this file by path: it names
//! only `super::strip_private`.

use super::strip_private;

/// How a field value is written into the block.
#[derive(Debug, Clone, Copy)]
pub enum Writing {
    /// As the model would: raw code and markup.
    Raw,
    /// XML-escaped (`&amp;`, `&lt;`, `&gt;`).
    Escaped,
    /// In one CDATA section.
    Cdata,
}

/// `s` with `&`, `<` and `>` escaped.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// Whether `text` holds `</name`, optional whitespace and `>`: a closer.
fn has_closer(text: &str, name: &str) -> bool {
    let tag = format!("</{name}");
    text.match_indices(&tag).any(|(at, _)| {
        text[at + tag.len()..]
            .trim_start_matches(|c: char| c.is_ascii_whitespace())
            .starts_with('>')
    })
}

/// Whether `text` holds a reference the parser decodes.
fn has_reference(text: &str) -> bool {
    text.match_indices('&').any(|(at, _)| {
        let rest = &text[at + 1..];
        let Some(end) = rest.find(';') else {
            return false;
        };
        let body = &rest[..end];
        ["lt", "gt", "amp", "quot", "apos"].contains(&body)
            || body
                .strip_prefix("#x")
                .is_some_and(|h| !h.is_empty() && h.chars().all(|c| c.is_ascii_hexdigit()))
            || body
                .strip_prefix('#')
                .is_some_and(|d| !d.is_empty() && d.chars().all(|c| c.is_ascii_digit()))
    })
}

/// A field value written one of three ways and the text the parser must
/// give back, or `None` when the value cannot be a field's text that way (it
/// closes its own field or block, is blank, or its raw form is XML the
/// parser decodes).
pub fn written(value: &str, writing: Writing, closers: &[&str]) -> Option<(String, String)> {
    let (block, expected) = match writing {
        Writing::Raw => (value.to_string(), strip_private(value).0.trim().to_string()),
        Writing::Escaped => (escape(value), value.trim().to_string()),
        Writing::Cdata => (
            format!("<![CDATA[{value}]]>"),
            strip_private(value).0.trim().to_string(),
        ),
    };
    let kept = strip_private(&block).0.into_owned();
    // An unterminated private span would remove the rest of the output (the
    // block goes on with whitespace and a tag).
    let private_closed = strip_private(&format!("{block}\n>\u{1}")).0.ends_with('\u{1}');
    // Stripped alone, a value ending in `<private` loses it; in its block,
    // followed by `<` or `]`, it is no tag: such a value is left out.
    let alone = strip_private(value).0;
    let followed = strip_private(&format!("{value}\u{1}")).0.into_owned();
    let context_free = followed.strip_suffix('\u{1}') == Some(&*alone);
    let ok = private_closed
        && context_free
        && !expected.is_empty()
        && !closers.iter().any(|c| has_closer(&kept, c))
        && !["<observation", "</observation", "<summary", "</summary"]
            .iter()
            .any(|t| kept.contains(t))
        && match writing {
            Writing::Raw => {
                let cdata = kept.contains("<![CDATA[") && kept.contains("]]>");
                !has_reference(&kept) && !cdata
            }
            Writing::Escaped => true,
            Writing::Cdata => !strip_private(value).0.contains("]]>"),
        };
    ok.then_some((block, expected))
}
