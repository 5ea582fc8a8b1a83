//! Observations whose fields hold what coding agents write (generics,
//! markup of other vocabularies, stray closers of our own field names, bare
//! `<` and `&`, references XML does not know, CDATA-looking text, private
//! spans, unicode), each as written in a block and as the parser must give
//! it back. Shared by the parser's unit tests and `tests/memory_parse.rs`
//! (which includes this file by path): it names only what its parent module
//! imports, `Observation`, `BUILTIN_TYPES` and `strip_private`.

use proptest::prelude::*;

use super::{BUILTIN_TYPES, Observation, strip_private};

/// `s` with `&`, `<` and `>` escaped.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// How a generated field value is written into the block.
#[derive(Debug, Clone, Copy)]
enum Writing {
    /// As the model would: raw code and markup.
    Raw,
    /// XML-escaped (`&amp;`, `&lt;`, `&gt;`).
    Escaped,
    /// In one CDATA section.
    Cdata,
}

/// What coding agents write in a field: generics, markup of other
/// vocabularies, stray closers and opens of our own field names, bare `<`
/// and `&`, references that are not XML, CDATA-looking text, private spans
/// and unicode.
const CODE: &[&str] = &[
    "HashMap<u64, Arc<str>>",
    "Vec<String>",
    "Option<&'a T>",
    "fn f<T: Into<String>>(x: T) -> Result<(), E>",
    "a < b",
    "a<b",
    "x <= y && y >= z",
    "<<",
    ">>",
    "->",
    "</section>",
    "</div>",
    "<div class=\"x\">",
    "<br/>",
    "<p>",
    "<T>",
    "</T>",
    "<title>",
    "</title>",
    "<text>",
    "</text>",
    "</text >",
    "</TEXT>",
    "</ text>",
    "<type>",
    "</type>",
    "<facts>",
    "</facts>",
    "<fact>",
    "</fact>",
    "</narrative>",
    "<files_read>",
    "</files_read>",
    "<file>",
    "</file>",
    "</files_modified>",
    "&",
    "&&",
    "&lt",
    "&#",
    "&#x;",
    "&;",
    "&foo;",
    "&nbsp;",
    "&T::new",
    "&#X41;",
    "<![CDATA[",
    "]]>",
    "<![CDATA[x]]",
    "<!--",
    "-->",
    "<!-- note -->",
    "<?xml version=\"1.0\"?>",
    "<!DOCTYPE html>",
    "<private>hidden</private>",
    "</private>",
    "é",
    "€",
    "😀",
    "日本語",
    "e\u{301}",
    " ",
    "\n",
    "\t",
    ";",
    "#",
    "/",
    "\"",
    "'",
];

fn code() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        4 => prop::sample::select(CODE).prop_map(str::to_string),
        1 => prop::string::string_regex("[^\\x00]{1,6}").unwrap(),
    ];
    prop::collection::vec(piece, 1..10).prop_map(|parts| parts.concat())
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
fn written(value: &str, writing: Writing, closers: &[&str]) -> Option<(String, String)> {
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

fn code_field(closers: &'static [&'static str]) -> impl Strategy<Value = (String, String)> {
    (
        code(),
        prop_oneof![6 => Just(Writing::Raw), 1 => Just(Writing::Escaped), 1 => Just(Writing::Cdata)],
    )
        .prop_filter_map("closes its field or decodes", move |(value, writing)| {
            written(&value, writing, closers)
        })
}

/// An observation whose fields hold code and markup: the block as written
/// and the observation the parser must find in it.
pub fn code_observation() -> impl Strategy<Value = (String, Observation)> {
    let items = |item: &'static [&'static str]| prop::collection::vec(code_field(item), 0..3);
    (
        prop::sample::select(&BUILTIN_TYPES[..]),
        prop::sample::select(&["", " ", "\n  "][..]),
        prop::bool::ANY,
        code_field(&["title", "observation"]),
        code_field(&["text", "observation"]),
        items(&["fact", "facts", "observation"]),
        items(&["file", "files_read", "observation"]),
        prop::bool::ANY,
    )
        .prop_map(|(kind, pad, upper, title, text, facts, files, left_open)| {
            let shown_kind = if upper { kind.to_uppercase() } else { kind.to_string() };
            let list = |tag: &str, item: &str, values: &[(String, String)]| {
                let items: String = values.iter().map(|(v, _)| format!("<{item}>{v}</{item}>\n")).collect();
                format!("<{tag}>\n{items}</{tag}>")
            };
            let block = format!(
                "<observation>\n<type>{pad}{shown_kind}{pad}</type>\n<title>{}</title>\n{}\n{}\n<text>{}{}\n</observation>",
                title.0,
                list("facts", "fact", &facts),
                list("files_read", "file", &files),
                text.0,
                if left_open { "" } else { "</text>" },
            );
            let expected = Observation {
                kind: kind.to_string(),
                title: title.1,
                text: text.1,
                facts: facts.into_iter().map(|(_, e)| e).collect(),
                files_read: files.into_iter().map(|(_, e)| e).collect(),
                files_modified: Vec::new(),
            };
            (block, expected)
        })
}
