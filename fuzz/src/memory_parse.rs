//! Model output for the `memory_parse` target: observations whose fields
//! hold code and markup, written the way a model writes them (raw, escaped
//! or in CDATA), with the text each field must parse back to. The oracle is
//! the parser's tests' (`src/memory/parse/tests/field_oracle.rs`), written
//! apart from the parser: it knows which values a field cannot hold and
//! leaves those out.

use arbitrary::{Arbitrary, Result, Unstructured};
use context_assembler::memory::Observation;
use context_assembler::memory::model::BUILTIN_TYPES;
use context_assembler::memory::parse::{Element, Parsed, strip_private};

/// Checks what every parse must hold, whatever the input: each block and
/// each problem is reported at its element's opening tag in `text`, and no
/// block is blank.
pub fn check_blocks(text: &str, parsed: &Parsed) {
    let opening = |element: Element, offset: usize| {
        let tag = format!("<{}", element.as_str());
        assert!(
            text.get(offset..).is_some_and(|rest| rest.starts_with(&tag)),
            "offset {offset} is not at {tag}"
        );
    };
    for b in &parsed.blocks {
        opening(b.element, b.offset);
        assert!(!b.content.is_blank(), "a blank block was accepted");
    }
    for p in &parsed.problems {
        opening(p.element, p.offset);
    }
}

#[path = "../../src/memory/parse/tests/field_oracle.rs"]
mod field_oracle;

use field_oracle::{Writing, written};

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

/// A field: as written in the block, and the text the parser must give.
struct Field {
    written: String,
    expected: String,
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
        let writing = *u.choose(&[Writing::Raw, Writing::Escaped, Writing::Cdata])?;
        Ok(written(&value, writing, closers).map(|(written, expected)| Field { written, expected }))
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
            let shown = if u.arbitrary()? {
                kind.to_uppercase()
            } else {
                kind.to_owned()
            };
            let title = Field::arbitrary(u, &["title", "observation"])?;
            // An observation needs text: a plain one when the value cannot be.
            let body = Field::arbitrary(u, &["text", "observation"])?.unwrap_or_else(|| Field {
                written: "x".to_owned(),
                expected: "x".to_owned(),
            });
            let mut list =
                |tag: &str, item: &'static str, closers: &[&str]| -> Result<(String, Vec<String>)> {
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
