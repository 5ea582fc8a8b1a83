//! Model output for the `memory_parse` target: observations whose fields
//! hold code and markup, written the way a model writes them (raw, escaped
//! or in CDATA), with the text each field must parse back to. The oracle is
//! written apart from the parser: it knows which values a field cannot hold
//! (its own closer, a block tag, a reference or CDATA section that a raw
//! value would decode) and leaves those out.

use arbitrary::{Arbitrary, Result, Unstructured};
use context_assembler::memory::Observation;
use context_assembler::memory::model::BUILTIN_TYPES;
use context_assembler::memory::parse::strip_private;

/// What coding agents write in a field: generics, markup of other
/// vocabularies, stray closers and opens of our own field names, bare `<`
/// and `&`, references that are not XML, CDATA-looking text, private spans
/// and unicode.
const PIECES: &[&str] = &[
    "HashMap<u64, Arc<str>>",
    "Vec<String>",
    "Option<&'a T>",
    "fn f<T: Into<String>>(x: T) -> Result<(), E>",
    "a < b",
    "a<b",
    "x <= y && y >= z",
    "<<",
    ">>",
    "</section>",
    "</div>",
    "<div class=\"x\">",
    "<br/>",
    "<T>",
    "</T>",
    "<title>",
    "</title>",
    "<text>",
    "</text>",
    "</text >",
    "</TEXT>",
    "<type>",
    "</type>",
    "<facts>",
    "</facts>",
    "<fact>",
    "</fact>",
    "<file>",
    "</file>",
    "</files_read>",
    "&",
    "&&",
    "&lt",
    "&#",
    "&foo;",
    "&nbsp;",
    "&#X41;",
    "&#0;",
    "<![CDATA[",
    "]]>",
    "<!-- note -->",
    "<?xml version=\"1.0\"?>",
    "<!DOCTYPE html>",
    "<private>hidden</private>",
    "</private>",
    "é",
    "😀",
    "日本語",
    "e\u{301}",
    " ",
    "\n",
    ";",
];

/// Prose around the blocks.
const PROSE: &[&str] = &[
    "",
    "\n",
    "Reasoning: a < b && c > d.\n",
    "```rust\nlet v: Vec<String> = Vec::new();\n```\n",
    "<div>done</div> ",
];

/// How a field's value is written into the block.
#[derive(Debug, Clone, Copy, Arbitrary)]
enum Writing {
    Raw,
    Escaped,
    Cdata,
}

/// A field: as written in the block, and the text the parser must give.
struct Field {
    written: String,
    expected: String,
}

/// Whether `text` holds `</name`, optional whitespace and `>`.
fn has_closer(text: &str, name: &str) -> bool {
    let tag = format!("</{name}");
    text.match_indices(&tag).any(|(at, _)| {
        text[at + tag.len()..]
            .trim_start_matches(|c: char| c.is_ascii_whitespace())
            .starts_with('>')
    })
}

/// Whether `text` holds a reference XML would decode.
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

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

impl Field {
    /// A value from the pieces and raw strings, or `None` when it cannot be
    /// the text of a field closed by `closers` written that way.
    fn arbitrary(u: &mut Unstructured<'_>, closers: &[&str]) -> Result<Option<Field>> {
        let mut value = String::new();
        for _ in 0..u.int_in_range(1..=8)? {
            if crate::one_in(u, 4)? {
                let raw = <&str>::arbitrary(u)?;
                let mut end = raw.len().min(16);
                while !raw.is_char_boundary(end) {
                    end -= 1;
                }
                value.push_str(&raw[..end]);
            } else {
                value.push_str(PIECES[u.choose_index(PIECES.len())?]);
            }
        }
        let writing = Writing::arbitrary(u)?;
        let (written, expected) = match writing {
            Writing::Raw => (value.clone(), strip_private(&value).0.trim().to_owned()),
            Writing::Escaped => (escape(&value), value.trim().to_owned()),
            Writing::Cdata => (
                format!("<![CDATA[{value}]]>"),
                strip_private(&value).0.trim().to_owned(),
            ),
        };
        let kept = strip_private(&written).0.into_owned();
        // An unterminated private span would remove the rest of the output
        // (the block goes on with whitespace and a tag).
        let private_closed = strip_private(&format!("{written}\n>\u{1}")).0.ends_with('\u{1}');
        // Stripped alone, a value ending in `<private` loses it; in its block,
        // followed by `<` or `]`, it is no tag: such a value is left out.
        let alone = strip_private(&value).0;
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
                Writing::Cdata => !strip_private(&value).0.contains("]]>"),
            };
        Ok(ok.then_some(Field { written, expected }))
    }
}

/// Model output holding one to three observations with code in their
/// fields, and the observations the parser must find, in order.
#[derive(Debug)]
pub struct Generated {
    /// The model output.
    pub text: String,
    /// What it says.
    pub expected: Vec<Observation>,
}

impl<'a> Arbitrary<'a> for Generated {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let mut text = PROSE[u.choose_index(PROSE.len())?].to_owned();
        let mut expected = Vec::new();
        for _ in 0..u.int_in_range(1..=3)? {
            let kind = BUILTIN_TYPES[u.choose_index(BUILTIN_TYPES.len())?];
            let shown = if u.arbitrary()? { kind.to_uppercase() } else { kind.to_owned() };
            let title = Field::arbitrary(u, &["title", "observation"])?;
            // An observation needs text: a plain one when the value cannot be.
            let body = Field::arbitrary(u, &["text", "observation"])?.unwrap_or_else(|| Field {
                written: "x".to_owned(),
                expected: "x".to_owned(),
            });
            let mut list = |tag: &str, item: &'static str, closers: &[&str]| -> Result<(String, Vec<String>)> {
                let mut block = format!("<{tag}>\n");
                let mut values = Vec::new();
                for _ in 0..u.int_in_range(0..=2)? {
                    if let Some(f) = Field::arbitrary(u, closers)? {
                        block.push_str(&format!("<{item}>{}</{item}>\n", f.written));
                        values.push(f.expected);
                    }
                }
                block.push_str(&format!("</{tag}>"));
                Ok((block, values))
            };
            let (facts, fact_values) = list("facts", "fact", &["fact", "facts", "observation"])?;
            let (files, file_values) = list("files_read", "file", &["file", "files_read", "observation"])?;
            let left_open: bool = u.arbitrary()?;
            text.push_str(&format!(
                "<observation>\n<type> {shown}\n</type>\n<title>{}</title>\n{facts}\n{files}\n<text>{}{}\n</observation>",
                title.as_ref().map_or("", |t| t.written.as_str()),
                body.written,
                if left_open { "" } else { "</text>" },
            ));
            text.push_str(PROSE[u.choose_index(PROSE.len())?]);
            expected.push(Observation {
                kind: kind.to_owned(),
                title: title.map(|t| t.expected).unwrap_or_default(),
                text: body.expected,
                facts: fact_values,
                files_read: file_values,
                files_modified: Vec::new(),
            });
        }
        Ok(Generated { text, expected })
    }
}
