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
    /// indexes besides the title).
    pub fn body(&self) -> String {
        let mut out = String::new();
        match self {
            MemoryBody::Observation(o) => {
                out.push_str(o.text.trim());
                push_list(&mut out, "Facts", &o.facts);
                push_list(&mut out, "Files read", &o.files_read);
                push_list(&mut out, "Files modified", &o.files_modified);
            }
            MemoryBody::Summary(s) => {
                for (label, value) in [
                    ("Request", &s.request),
                    ("Investigated", &s.investigated),
                    ("Learned", &s.learned),
                    ("Completed", &s.completed),
                    ("Next steps", &s.next_steps),
                ] {
                    push_field(&mut out, label, value);
                }
                push_list(&mut out, "Files read", &s.files_read);
                push_list(&mut out, "Files edited", &s.files_edited);
                push_field(&mut out, "Notes", &s.notes);
            }
        }
        out
    }

    /// Whether there is nothing to remember (every field blank).
    pub fn is_blank(&self) -> bool {
        let blank = |s: &str| s.trim().is_empty();
        match self {
            MemoryBody::Observation(o) => {
                blank(&o.text) && blank(&o.title) && o.facts.iter().all(|f| blank(f))
            }
            MemoryBody::Summary(s) => [
                &s.request,
                &s.investigated,
                &s.learned,
                &s.completed,
                &s.next_steps,
                &s.notes,
            ]
            .iter()
            .all(|f| blank(f)),
        }
    }
}

impl MemoryBody {
    /// Each field's name and size in bytes (a list field's bytes summed), in
    /// declaration order: what a memory's size limit is measured on.
    pub fn field_bytes(&self) -> Vec<(&'static str, usize)> {
        let list = |v: &[String]| v.iter().map(String::len).sum::<usize>();
        match self {
            MemoryBody::Observation(o) => vec![
                ("type", o.kind.len()),
                ("title", o.title.len()),
                ("text", o.text.len()),
                ("facts", list(&o.facts)),
                ("files_read", list(&o.files_read)),
                ("files_modified", list(&o.files_modified)),
            ],
            MemoryBody::Summary(s) => vec![
                ("request", s.request.len()),
                ("investigated", s.investigated.len()),
                ("learned", s.learned.len()),
                ("completed", s.completed.len()),
                ("next_steps", s.next_steps.len()),
                ("files_read", list(&s.files_read)),
                ("files_edited", list(&s.files_edited)),
                ("notes", s.notes.len()),
            ],
        }
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

fn push_field(out: &mut String, label: &str, value: &str) {
    let value = value.trim();
    if value.is_empty() {
        return;
    }
    if !out.is_empty() {
        out.push('\n');
    }
    out.push_str(label);
    out.push_str(": ");
    out.push_str(value);
}

fn push_list(out: &mut String, label: &str, values: &[String]) {
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
