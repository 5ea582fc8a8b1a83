//! Observations whose fields hold what coding agents write (generics,
//! markup of other vocabularies, stray closers of our own field names, bare
//! `<` and `&`, references XML does not know, CDATA-looking text, private
//! spans, unicode), each as written in a block and as the parser must give
//! it back. Shared by the parser's unit tests and `tests/stores/memory_parse.rs`
//! (which includes this file by path): it names only what its parent module
//! imports, `Observation`, `BUILTIN_TYPES` and `strip_private` (the oracle in
//! `field_oracle.rs` needs the last).

use proptest::prelude::*;

use super::{BUILTIN_TYPES, Observation, strip_private};

#[path = "field_oracle.rs"]
pub mod field_oracle;

use field_oracle::{Writing, written};

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
