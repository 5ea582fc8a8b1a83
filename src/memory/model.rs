//! What a memory is: a typed observation or a structured session summary,
//! owned by a subject and gated by scopes. Free of wire and storage types.

use serde::{Deserialize, Serialize};

/// The observation types every sidecar knows; configuration may
/// add others.
pub const BUILTIN_TYPES: [&str; 5] = ["decision", "bugfix", "feature", "refactor", "discovery"];

/// The type stored for a session summary.
pub const SUMMARY_TYPE: &str = "summary";

/// Longest memory title kept, in characters (a longer one is clipped).
pub const MAX_TITLE_CHARS: usize = 200;

/// A typed observation.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Observation {
    /// One of the configured observation types (lower case).
    #[serde(rename = "type")]
    pub kind: String,
    /// A short title; derived from the text's first sentence when absent.
    pub title: String,
    /// The observation itself (a `<text>` or `<narrative>` element).
    pub text: String,
    /// Discrete facts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub facts: Vec<String>,
    /// Files read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files_read: Vec<String>,
    /// Files modified.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files_modified: Vec<String>,
}

/// A structured session summary: the eight fields below.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SessionSummary {
    /// What the user asked for.
    pub request: String,
    /// What was investigated.
    pub investigated: String,
    /// What was learned.
    pub learned: String,
    /// What was done.
    pub completed: String,
    /// What comes next.
    pub next_steps: String,
    /// Files read.
    #[serde(default)]
    pub files_read: Vec<String>,
    /// Files edited.
    #[serde(default)]
    pub files_edited: Vec<String>,
    /// Anything else.
    pub notes: String,
}

/// The content of one memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum MemoryBody {
    /// A typed observation.
    Observation(Observation),
    /// A session summary.
    Summary(SessionSummary),
}

impl MemoryBody {
    /// The stored type: the observation's type, or [`SUMMARY_TYPE`].
    pub fn memory_type(&self) -> &str {
        match self {
            MemoryBody::Observation(o) => &o.kind,
            MemoryBody::Summary(_) => SUMMARY_TYPE,
        }
    }

    /// The title: the observation's, or the summary's request.
    pub fn title(&self) -> String {
        let raw = match self {
            MemoryBody::Observation(o) if !o.title.trim().is_empty() => o.title.trim(),
            MemoryBody::Observation(o) => first_sentence(&o.text),
            MemoryBody::Summary(s) => first_sentence(&s.request),
        };
        clip_chars(raw, MAX_TITLE_CHARS).to_string()
    }

    /// The text a prompt shows for this memory (also what full-text search
    /// indexes besides the title): the fields [`InBody`] shows, in order.
    pub fn body(&self) -> String {
        let mut out = String::new();
        self.fields(|field, value| match (field.in_body, value) {
            (InBody::No, _) => {}
            (InBody::Plain, Text::One(v)) => push_field(&mut out, None, v),
            (InBody::Plain, Text::List(v)) => push_list(&mut out, None, v),
            (InBody::Labelled(label), Text::One(v)) => push_field(&mut out, Some(label), v),
            (InBody::Labelled(label), Text::List(v)) => push_list(&mut out, Some(label), v),
        });
        out
    }

    /// Whether there is nothing to remember (every [`FieldRole::Prose`]
    /// field blank).
    pub fn is_blank(&self) -> bool {
        let mut blank = true;
        self.fields(|field, value| {
            if field.role == FieldRole::Prose {
                blank &= value.strings().all(|s| s.trim().is_empty());
            }
        });
        blank
    }
}

/// What a field of a memory body holds, which decides how it is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldRole {
    /// The observation's type: a name out of a closed set, compared as
    /// given and never rewritten (a value outside the set is refused).
    Type,
    /// What the memory says: a memory whose prose is all blank holds
    /// nothing.
    Prose,
    /// File paths.
    Paths,
}

/// How a field appears in [`MemoryBody::body`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InBody {
    /// Not at all (the type; the title, which is the memory's title).
    No,
    /// As it is.
    Plain,
    /// After its label and `: ` (a list's entries joined by `; `).
    Labelled(&'static str),
}

/// One field of a memory body, as [`MemoryBody::fields`] names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    /// Its name on the wire and in model output (`title`, `next_steps`).
    pub name: &'static str,
    /// What it holds.
    pub role: FieldRole,
    /// How the body shows it.
    pub in_body: InBody,
}

impl Field {
    const fn new(name: &'static str, role: FieldRole, in_body: InBody) -> Field {
        Field { name, role, in_body }
    }
}

/// A field's value: one text or a list of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Text<'a> {
    /// A single text.
    One(&'a str),
    /// A list of texts.
    List(&'a [String]),
}

impl<'a> Text<'a> {
    /// Every text the field holds (a single one, or each entry).
    pub fn strings(self) -> impl Iterator<Item = &'a str> {
        let (one, list) = match self {
            Text::One(s) => (Some(s), &[][..]),
            Text::List(l) => (None, l),
        };
        one.into_iter().chain(list.iter().map(String::as_str))
    }
}

/// A field's value, to rewrite: one text or a list of them.
#[derive(Debug, PartialEq, Eq)]
pub enum TextMut<'a> {
    /// A single text.
    One(&'a mut String),
    /// A list of texts.
    List(&'a mut Vec<String>),
}

impl<'a> TextMut<'a> {
    /// Every text the field holds (a single one, or each entry).
    pub fn strings(self) -> impl Iterator<Item = &'a mut String> {
        let (one, list) = match self {
            TextMut::One(s) => (Some(s), &mut [][..]),
            TextMut::List(l) => (None, l.as_mut_slice()),
        };
        one.into_iter().chain(list.iter_mut())
    }
}

/// Calls `$visit(field, value)` for every field of `$body`, in declaration
/// order, `$text` ([`Text`] or [`TextMut`]) wrapping each value; whether the
/// values are shared or mutable follows `$body`. The one list of a memory
/// body's fields: both walks expand it, and its patterns name every field
/// (no `..`), so a field added to [`Observation`] or [`SessionSummary`]
/// does not compile until it is listed here, and then every walk (size,
/// blankness, body, the `<private>` sweep, NUL removal) sees it.
macro_rules! each_field {
    ($body:expr, $text:ident, $visit:ident) => {{
        use FieldRole::{Paths, Prose, Type};
        use InBody::{Labelled, No, Plain};
        match $body {
            MemoryBody::Observation(Observation {
                kind,
                title,
                text,
                facts,
                files_read,
                files_modified,
            }) => {
                $visit(Field::new("type", Type, No), $text::One(kind));
                $visit(Field::new("title", Prose, No), $text::One(title));
                $visit(Field::new("text", Prose, Plain), $text::One(text));
                $visit(Field::new("facts", Prose, Labelled("Facts")), $text::List(facts));
                $visit(
                    Field::new("files_read", Paths, Labelled("Files read")),
                    $text::List(files_read),
                );
                $visit(
                    Field::new("files_modified", Paths, Labelled("Files modified")),
                    $text::List(files_modified),
                );
            }
            MemoryBody::Summary(SessionSummary {
                request,
                investigated,
                learned,
                completed,
                next_steps,
                files_read,
                files_edited,
                notes,
            }) => {
                $visit(
                    Field::new("request", Prose, Labelled("Request")),
                    $text::One(request),
                );
                $visit(
                    Field::new("investigated", Prose, Labelled("Investigated")),
                    $text::One(investigated),
                );
                $visit(
                    Field::new("learned", Prose, Labelled("Learned")),
                    $text::One(learned),
                );
                $visit(
                    Field::new("completed", Prose, Labelled("Completed")),
                    $text::One(completed),
                );
                $visit(
                    Field::new("next_steps", Prose, Labelled("Next steps")),
                    $text::One(next_steps),
                );
                $visit(
                    Field::new("files_read", Paths, Labelled("Files read")),
                    $text::List(files_read),
                );
                $visit(
                    Field::new("files_edited", Paths, Labelled("Files edited")),
                    $text::List(files_edited),
                );
                $visit(Field::new("notes", Prose, Labelled("Notes")), $text::One(notes));
            }
        }
    }};
}

impl MemoryBody {
    /// Visits every field, in declaration order: the one walk of a body's
    /// fields (see `each_field!`), so none can be left out of a new use.
    pub fn fields<'a>(&'a self, mut visit: impl FnMut(Field, Text<'a>)) {
        each_field!(self, Text, visit)
    }

    /// Visits every field to rewrite it, in declaration order (the walk of
    /// [`MemoryBody::fields`]).
    pub fn fields_mut<'a>(&'a mut self, mut visit: impl FnMut(Field, TextMut<'a>)) {
        each_field!(self, TextMut, visit)
    }

    /// Each field's name and size in bytes (a list field's bytes summed), in
    /// declaration order: what a memory's size limit is measured on.
    pub fn field_bytes(&self) -> Vec<(&'static str, usize)> {
        let mut out = Vec::with_capacity(8);
        self.fields(|field, value| out.push((field.name, value.strings().map(str::len).sum())));
        out
    }

    /// The memory's size in bytes: all its fields.
    pub fn bytes(&self) -> usize {
        self.field_bytes().iter().map(|(_, n)| n).sum()
    }

    /// The field holding the most bytes (the one to name when the memory is
    /// over its size limit).
    pub fn largest_field(&self) -> &'static str {
        self.field_bytes()
            .into_iter()
            .max_by_key(|&(_, n)| n)
            .map_or("text", |(name, _)| name)
    }
}

fn push_field(out: &mut String, label: Option<&str>, value: &str) {
    let value = value.trim();
    if value.is_empty() {
        return;
    }
    if !out.is_empty() {
        out.push('\n');
    }
    if let Some(label) = label {
        out.push_str(label);
        out.push_str(": ");
    }
    out.push_str(value);
}

fn push_list(out: &mut String, label: Option<&str>, values: &[String]) {
    let values: Vec<&str> = values
        .iter()
        .map(|v| v.trim())
        .filter(|v| !v.is_empty())
        .collect();
    if values.is_empty() {
        return;
    }
    push_field(out, label, &values.join("; "));
}

/// The text up to the first sentence end (or line break), trimmed.
fn first_sentence(text: &str) -> &str {
    let text = text.trim();
    let mut prev = None;
    for (i, c) in text.char_indices() {
        if c == '\n' || (c.is_whitespace() && matches!(prev, Some('.' | '!' | '?'))) {
            return text[..i].trim_end();
        }
        prev = Some(c);
    }
    text
}

/// At most `max` characters of `s`.
pub fn clip_chars(s: &str, max: usize) -> &str {
    s.char_indices().nth(max).map_or(s, |(at, _)| &s[..at])
}

/// A memory ready to be written.
#[derive(Debug, Clone, PartialEq)]
pub struct NewMemory {
    /// Who the memory is about (user, tenant or project key).
    pub subject: String,
    /// The content.
    pub content: MemoryBody,
    /// The principal must hold every one of these to recall the memory.
    pub required_scopes: Vec<String>,
    /// The request the memory came from.
    pub request_id: String,
    /// The turn of that request's conversation.
    pub turn: u32,
}

/// A memory's identifier outside the store: 32 lower-case hex digits of a
/// random 128-bit value the store draws when it writes the memory. Never
/// the row id: a counter would let a caller guess the ids of memories it
/// was never given (`migrations/*/0003_tenancy.sql`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MemoryId(String);

impl MemoryId {
    /// Hex digits in an id.
    pub const LEN: usize = 32;

    /// The id `s` spells, if it has the form of one (whether a memory has
    /// it is the store's question).
    pub fn parse(s: &str) -> Option<MemoryId> {
        let ok = s.len() == Self::LEN && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        ok.then(|| MemoryId(s.to_owned()))
    }

    /// An id as the store holds it (the store wrote it in this form).
    pub(crate) fn stored(s: String) -> MemoryId {
        MemoryId(s)
    }

    /// The id's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for MemoryId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A stored memory.
#[derive(Debug, Clone, PartialEq)]
pub struct Memory {
    /// Its id.
    pub id: MemoryId,
    /// When it was stored, in milliseconds since the Unix epoch.
    pub created_at_ms: i64,
    /// What was stored.
    pub memory: NewMemory,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn title_falls_back_to_the_first_sentence() {
        let o = MemoryBody::Observation(Observation {
            kind: "bugfix".into(),
            text: "Fixed the race. It was in auth.".into(),
            ..Observation::default()
        });
        assert_eq!(o.title(), "Fixed the race.");
        assert_eq!(o.body(), "Fixed the race. It was in auth.");
    }

    #[test]
    fn summary_body_names_each_non_empty_field() {
        let s = MemoryBody::Summary(SessionSummary {
            request: "Add JWT".into(),
            learned: "Sessions use cookies".into(),
            files_edited: vec!["src/auth.ts".into(), " ".into()],
            ..SessionSummary::default()
        });
        assert_eq!(
            s.body(),
            "Request: Add JWT\nLearned: Sessions use cookies\nFiles edited: src/auth.ts"
        );
        assert_eq!(s.memory_type(), SUMMARY_TYPE);
        assert!(!s.is_blank());
        assert!(MemoryBody::Summary(SessionSummary::default()).is_blank());
    }

    /// A body whose every field holds its own name (a list: the name once).
    fn named(mut body: MemoryBody) -> MemoryBody {
        body.fields_mut(|field, value| match value {
            TextMut::One(s) => *s = field.name.to_owned(),
            TextMut::List(l) => *l = vec![field.name.to_owned()],
        });
        body
    }

    #[test]
    fn the_walk_visits_every_field_once_under_its_stored_name() {
        for body in [
            MemoryBody::Observation(Observation::default()),
            MemoryBody::Summary(SessionSummary::default()),
        ] {
            let body = named(body);
            let mut visited = Vec::new();
            body.fields(|field, value| visited.push((field.name, value.strings().collect::<Vec<_>>())));
            // The stored form (serde) holds every field: each must be the
            // one visited under that name, and nothing else is stored.
            let json = serde_json::to_value(&body).unwrap_or_default();
            let stored = json.as_object().cloned().unwrap_or_default();
            assert_eq!(stored.len(), visited.len() + 1, "{stored:?}");
            for (name, values) in visited {
                let value = &stored[name];
                let value: Vec<&str> = match value.as_array() {
                    Some(list) => list.iter().filter_map(|v| v.as_str()).collect(),
                    None => value.as_str().into_iter().collect(),
                };
                assert_eq!(value, [name], "{name}");
                assert_eq!(values, [name], "{name}");
            }
        }
    }

    #[test]
    fn body_blankness_and_sizes_read_every_field() {
        let o = named(MemoryBody::Observation(Observation::default()));
        assert_eq!(
            o.body(),
            "text\nFacts: facts\nFiles read: files_read\nFiles modified: files_modified"
        );
        assert_eq!(o.title(), "title");
        let s = named(MemoryBody::Summary(SessionSummary::default()));
        assert_eq!(
            s.body(),
            "Request: request\nInvestigated: investigated\nLearned: learned\nCompleted: completed\n\
             Next steps: next_steps\nFiles read: files_read\nFiles edited: files_edited\nNotes: notes"
        );
        let names = |b: &MemoryBody| b.field_bytes().into_iter().map(|(n, _)| n).collect::<Vec<_>>();
        assert!(o.field_bytes().iter().all(|&(name, n)| n == name.len()));
        assert_eq!(o.bytes(), names(&o).concat().len());
        assert_eq!(s.bytes(), names(&s).concat().len());
        assert_eq!(o.largest_field(), "files_modified");
        // Blank is every prose field blank: the type and file lists hold
        // no memory on their own.
        let mut paths_only = o.clone();
        paths_only.fields_mut(|field, value| {
            if field.role == FieldRole::Prose {
                value.strings().for_each(|s| *s = " \n".to_owned());
            }
        });
        assert!(paths_only.is_blank());
        assert_eq!(
            paths_only.body(),
            "Files read: files_read\nFiles modified: files_modified"
        );
        for prose in ["title", "text", "facts"] {
            let mut one = paths_only.clone();
            one.fields_mut(|field, value| {
                if field.name == prose {
                    value.strings().for_each(|s| *s = "x".to_owned());
                }
            });
            assert!(!one.is_blank(), "{prose}");
        }
    }

    #[test]
    fn memory_ids_are_32_lower_case_hex_digits() {
        let id = "0123456789abcdef0123456789abcdef";
        assert_eq!(MemoryId::parse(id).map(|m| m.to_string()).as_deref(), Some(id));
        for bad in [
            "42",
            "",
            &id.to_uppercase(),
            &format!("{id}0"),
            "0123456789abcdef0123456789abcdeg",
        ] {
            assert_eq!(MemoryId::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn content_round_trips_through_json() {
        let c = MemoryBody::Observation(Observation {
            kind: "decision".into(),
            title: "t".into(),
            text: "x".into(),
            facts: vec!["f".into()],
            ..Observation::default()
        });
        let json = serde_json::to_string(&c).unwrap_or_default();
        let back: MemoryBody =
            serde_json::from_str(&json).unwrap_or(MemoryBody::Summary(SessionSummary::default()));
        assert_eq!(back, c);
    }
}
