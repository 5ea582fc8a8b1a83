//! What a summary finds in a message's text: the path-like tokens listed
//! as key files, and the sentences naming pending work. Both are looked for
//! in every compacted text, so each first asks a cheap question that most
//! text answers "none" to (a `/`; one pass of an automaton) before it cuts
//! the text into tokens or sentences.

use std::sync::LazyLock;

use aho_corasick::AhoCorasick;

use super::MAX_NAME_CHARS;

/// Extensions that make a slash-separated token a key file.
const FILE_EXTENSIONS: [&str; 30] = [
    "rs", "toml", "md", "json", "yaml", "yml", "py", "ts", "tsx", "js", "jsx", "go", "java", "kt", "c", "h",
    "cc", "cpp", "hpp", "cs", "rb", "swift", "proto", "sql", "sh", "html", "css", "txt", "lock", "xml",
];

/// Words that mark a sentence as pending work.
pub(super) const PENDING_WORDS: [&str; 6] =
    ["todo", "next", "pending", "follow up", "follow-up", "remaining"];

/// Sentences of `text` naming pending work (case-insensitive whole words).
/// An ASCII text in which no word occurs at all (most text) has none: one
/// pass of the automaton over it says so before it is cut into sentences.
pub(super) fn pending_sentences(text: &str) -> impl Iterator<Item = &str> {
    let none = text.is_ascii() && pending_words().is_some_and(|words| !words.is_match(text));
    sentences(if none { "" } else { text })
        .map(str::trim)
        .filter(|s| !s.is_empty() && names_pending_work(s))
}

/// [`PENDING_WORDS`] as an ASCII-case-blind automaton. Building from a
/// handful of short literals cannot fail; were it to, callers take their
/// copying path.
fn pending_words() -> Option<&'static AhoCorasick> {
    static WORDS: LazyLock<Option<AhoCorasick>> = LazyLock::new(|| {
        AhoCorasick::builder()
            .ascii_case_insensitive(true)
            .build(PENDING_WORDS)
            .ok()
    });
    WORDS.as_ref()
}

/// Whether `sentence` holds one of [`PENDING_WORDS`] as a whole word, in any
/// case. ASCII (nearly every sentence): one pass of an ASCII-case-blind
/// automaton over the bytes, no copy. Otherwise the sentence is lower-cased
/// first, since Unicode lower-casing can turn other letters into ASCII ones
/// (the Kelvin sign into `k`) and change byte offsets.
pub(super) fn names_pending_work(sentence: &str) -> bool {
    let automaton = pending_words().filter(|_| sentence.is_ascii());
    let Some(words) = automaton else {
        let lower = sentence.to_lowercase();
        return PENDING_WORDS.iter().any(|w| has_word(&lower, w));
    };
    let bytes = sentence.as_bytes();
    // Overlapping: a match that fails the word test must not hide one that
    // starts inside it.
    words.find_overlapping_iter(sentence).any(|m| {
        let before = m.start().checked_sub(1).and_then(|i| bytes.get(i)).copied();
        let after = bytes.get(m.end()).copied();
        !before.is_some_and(|b| b.is_ascii_alphanumeric())
            && !after.is_some_and(|b| b.is_ascii_alphanumeric())
    })
}

/// The sentences of `text`: each ends after `.`, `!` or `?` followed by
/// whitespace (or the end), or at a line break, so `src/main.rs` or `3.5`
/// never end one.
pub(super) fn sentences(text: &str) -> impl Iterator<Item = &str> {
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    std::iter::from_fn(move || {
        while let Some((i, c)) = chars.next() {
            let next = chars.peek().map(|&(_, n)| n);
            let stop = matches!(c, '.' | '!' | '?') && next.is_none_or(char::is_whitespace);
            if c == '\n' || stop {
                let end = i + c.len_utf8();
                let sentence = &text[start..end];
                start = end;
                return Some(sentence);
            }
        }
        (start < text.len()).then(|| {
            let rest = &text[start..];
            start = text.len();
            rest
        })
    })
}

/// Whether the lower-case `word` occurs in the lower-cased `lower` between
/// non-alphanumeric characters.
pub(super) fn has_word(lower: &str, word: &str) -> bool {
    lower.match_indices(word).any(|(at, _)| {
        let before = lower[..at].chars().next_back();
        let after = lower[at + word.len()..].chars().next();
        !before.is_some_and(char::is_alphanumeric) && !after.is_some_and(char::is_alphanumeric)
    })
}

/// The path-like tokens of `text`, in order: a `/` and a known extension;
/// surrounding punctuation and a `:line` suffix trimmed; no URLs.
pub(super) fn files_in(text: &str) -> impl Iterator<Item = &str> {
    // Every path has a `/`: a text without one (most prose) has none, and
    // neither has a token without one (trimming never removes it).
    let any = text.contains('/');
    text.split(is_separator)
        .take_while(move |_| any)
        .filter(|token| token.contains('/'))
        .filter_map(as_file)
}

/// Whether `c` separates the tokens [`files_in`] reads.
pub(super) fn is_separator(c: char) -> bool {
    matches!(
        c,
        '"' | '\'' | '`' | '<' | '>' | '(' | ')' | '[' | ']' | '{' | '}' | ',' | ';' | '|' | '='
    ) || c.is_whitespace()
}

/// The path `token` names, trimmed of punctuation and a `:line` or
/// `:line:column` suffix, if it is one.
pub(super) fn as_file(token: &str) -> Option<&str> {
    let mut token = token.trim_end_matches(['.', ':', '!', '?', '*']);
    for _ in 0..2 {
        if let Some((path, n)) = token.rsplit_once(':')
            && !n.is_empty()
            && n.bytes().all(|b| b.is_ascii_digit())
        {
            token = path;
        }
    }
    let is_file = token.contains('/')
        && !token.contains("://")
        && token.chars().count() <= MAX_NAME_CHARS
        && token
            .rsplit_once('.')
            .is_some_and(|(stem, ext)| !stem.ends_with('/') && FILE_EXTENSIONS.contains(&ext));
    is_file.then_some(token)
}
