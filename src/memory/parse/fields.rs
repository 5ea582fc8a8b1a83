//! One block's fields, read the way models write them rather than as XML:
//! a known field runs from `<name>` to its own `</name>` or, left open, to
//! the end of its block, and everything inside it but that closer is text.
//! Only the five predefined entities and character references are decoded
//! and CDATA sections unwrapped; whatever else XML would reject is kept byte
//! for byte. Every scan moves forward, so each byte is looked at a bounded
//! number of times (see the parent module's meter).

use std::borrow::Cow;

use super::{Element, Meter, close_tag_end, find_byte};
use crate::memory::model::{MemoryBody, Observation, SessionSummary};

/// Reads one block's body (between its opening and closing tags).
pub(super) fn parse_block(
    element: Element,
    body: &str,
    types: &[String],
    m: &Meter,
) -> Result<MemoryBody, String> {
    if holds_open_tag(body.as_bytes(), element.as_str().as_bytes(), m) {
        return Err(format!("nested <{}>", element.as_str()));
    }
    let fields = fields(element, body, m);
    match element {
        Element::Observation => observation(fields, types, m),
        Element::Summary => summary(fields, m),
    }
}

/// Whether `bytes` holds an opening tag of `name` anywhere.
fn holds_open_tag(bytes: &[u8], name: &[u8], m: &Meter) -> bool {
    let mut at = 0;
    while let Some(lt) = find_byte(bytes, at, b'<', m) {
        at = lt + 1;
        let name_end = lt + 1 + name.len();
        if bytes.get(lt + 1..name_end) == Some(name) && bytes.get(name_end).is_none_or(ends_tag_name) {
            return true;
        }
    }
    false
}

/// Every known field of a block's body, in order: the field's name and its
/// raw content (not yet decoded).
///
/// A field opens at `<name>` (attributes allowed) for a name the element
/// knows, and its content runs to the first `</name>` after it or, left
/// open, to the end of the body. Nothing inside a field is markup but its
/// own closer: unknown tags, stray closers and opens of other fields are
/// text. Between fields, unknown tags and text are skipped. Each byte is
/// looked at a bounded number of times.
fn fields<'a>(element: Element, body: &'a str, m: &Meter) -> Vec<(&'static str, &'a str)> {
    let bytes = body.as_bytes();
    let known = known_fields(element);
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(lt) = find_byte(bytes, at, b'<', m) {
        at = lt + 1;
        let Some(name) = known.iter().copied().find(|name| {
            let name_end = lt + 1 + name.len();
            bytes.get(lt + 1..name_end) == Some(name.as_bytes())
                && bytes.get(name_end).is_some_and(ends_tag_name)
        }) else {
            continue;
        };
        let Some((content_start, self_closing)) = open_tag_end(bytes, lt + 1 + name.len(), m) else {
            break; // `<name ...` with no `>` to the end
        };
        at = content_start;
        if self_closing {
            continue;
        }
        let (content_end, after) =
            find_close_tag(bytes, content_start, name.as_bytes(), m).unwrap_or((bytes.len(), bytes.len()));
        at = after;
        out.push((name, body.get(content_start..content_end).unwrap_or_default()));
    }
    out
}

/// Whether `b`, right after a tag's name, ends the name: `>`, `/` or
/// whitespace.
fn ends_tag_name(b: &u8) -> bool {
    *b == b'>' || *b == b'/' || b.is_ascii_whitespace()
}

fn known_fields(element: Element) -> &'static [&'static str] {
    match element {
        Element::Observation => &[
            "type",
            "title",
            "text",
            "narrative",
            "facts",
            "files_read",
            "files_modified",
            "files_edited",
        ],
        Element::Summary => &[
            "request",
            "investigated",
            "learned",
            "completed",
            "next_steps",
            "notes",
            "files_read",
            "files_edited",
            "files_modified",
        ],
    }
}

/// The end of an opening tag whose name ends at `name_end`: the offset just
/// past its `>` and whether it was self-closing (`/>`); `None` when no `>`
/// follows.
fn open_tag_end(bytes: &[u8], name_end: usize, m: &Meter) -> Option<(usize, bool)> {
    let gt = find_byte(bytes, name_end, b'>', m)?;
    Some((gt + 1, gt > name_end && bytes.get(gt - 1) == Some(&b'/')))
}

/// The first closing tag of `name` at or after `from`: where it starts and
/// the offset just past it.
fn find_close_tag(bytes: &[u8], from: usize, name: &[u8], m: &Meter) -> Option<(usize, usize)> {
    let mut at = from;
    while let Some(lt) = find_byte(bytes, at, b'<', m) {
        at = lt + 1;
        if let Some(end) = close_tag_end(bytes, lt, name, false, m) {
            return Some((lt, end));
        }
    }
    None
}

fn observation(fields: Vec<(&str, &str)>, types: &[String], m: &Meter) -> Result<MemoryBody, String> {
    let mut kind: Option<String> = None;
    let mut o = Observation::default();
    let mut narrative = String::new();
    for (name, raw) in fields {
        match name {
            "type" if kind.is_none() => kind = Some(text(raw, m).to_lowercase()),
            "title" => append(&mut o.title, text(raw, m)),
            "text" => append(&mut o.text, text(raw, m)),
            "narrative" => append(&mut narrative, text(raw, m)),
            "facts" => o.facts.extend(entries(raw, m)),
            "files_read" => o.files_read.extend(entries(raw, m)),
            "files_modified" | "files_edited" => o.files_modified.extend(entries(raw, m)),
            _ => {} // a second type
        }
    }
    append(&mut o.text, narrative);
    o.kind = match kind {
        None => return Err("observation has no type".into()),
        Some(k) if k.is_empty() => return Err("observation has no type".into()),
        Some(k) if !types.contains(&k) => {
            return Err(format!("unknown observation type ({} bytes)", k.len()));
        }
        Some(k) => k,
    };
    if o.text.is_empty() && o.title.is_empty() {
        return Err("observation has no text".into());
    }
    Ok(MemoryBody::Observation(o))
}

fn summary(fields: Vec<(&str, &str)>, m: &Meter) -> Result<MemoryBody, String> {
    let mut s = SessionSummary::default();
    for (name, raw) in fields {
        let field = match name {
            "request" => &mut s.request,
            "investigated" => &mut s.investigated,
            "learned" => &mut s.learned,
            "completed" => &mut s.completed,
            "next_steps" => &mut s.next_steps,
            "notes" => &mut s.notes,
            "files_read" => {
                s.files_read.extend(entries(raw, m));
                continue;
            }
            _ => {
                s.files_edited.extend(entries(raw, m));
                continue;
            }
        };
        append(field, text(raw, m));
    }
    let content = MemoryBody::Summary(s);
    if content.is_blank() {
        return Err("summary is empty".into());
    }
    Ok(content)
}

/// A field's text: decoded and trimmed.
fn text(raw: &str, m: &Meter) -> String {
    decode(raw, m).trim().to_string()
}

/// Longest item tag name in a list field (`<fact>`, `<file>`, ...).
const MAX_ITEM_NAME: usize = 64;

/// A list field's entries, blank ones skipped. When its content starts with
/// a tag (`<fact>`, `<file>`, any name), each item element's text is an
/// entry (an item left open ends with the list) and text between items is
/// ignored; otherwise each line of its text is one.
fn entries(raw: &str, m: &Meter) -> Vec<String> {
    let bytes = raw.as_bytes();
    let first = raw.len() - raw.trim_start().len();
    m.add(first);
    let is_name_start = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_alphabetic() || *b == b'_');
    if !(bytes.get(first) == Some(&b'<') && is_name_start(bytes.get(first + 1))) {
        m.add(raw.len());
        return text(raw, m)
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect();
    }
    let mut out = Vec::new();
    let mut at = first;
    while let Some(lt) = find_byte(bytes, at, b'<', m) {
        at = lt + 1;
        if !is_name_start(bytes.get(lt + 1)) {
            continue;
        }
        let name_len = bytes
            .iter()
            .skip(lt + 1)
            .take(MAX_ITEM_NAME + 1)
            .take_while(|b| b.is_ascii_alphanumeric() || b"_-.:".contains(b))
            .count();
        m.add(name_len);
        let name_end = lt + 1 + name_len;
        if name_len > MAX_ITEM_NAME || !bytes.get(name_end).is_some_and(ends_tag_name) {
            continue;
        }
        let Some((content_start, self_closing)) = open_tag_end(bytes, name_end, m) else {
            break;
        };
        at = content_start;
        if self_closing {
            continue;
        }
        let name = bytes.get(lt + 1..name_end).unwrap_or_default();
        let (content_end, after) =
            find_close_tag(bytes, content_start, name, m).unwrap_or((bytes.len(), bytes.len()));
        at = after;
        let entry = text(raw.get(content_start..content_end).unwrap_or_default(), m);
        if !entry.is_empty() {
            out.push(entry);
        }
    }
    out
}

/// Appends a repeated field's value on its own line.
fn append(field: &mut String, value: String) {
    if value.is_empty() {
        return;
    }
    if field.is_empty() {
        *field = value;
    } else {
        field.push('\n');
        field.push_str(&value);
    }
}

/// A field's raw content as text: the five predefined references
/// (`&lt;` ...) and character references (`&#65;`, `&#x41;`) of XML
/// characters are decoded and CDATA sections unwrapped; everything else,
/// including what XML would reject (a bare `&` or `<`, an undefined entity,
/// an unterminated CDATA section), is kept byte for byte.
pub(super) fn decode<'a>(raw: &'a str, m: &Meter) -> Cow<'a, str> {
    const CDATA: &str = "<![CDATA[";
    let bytes = raw.as_bytes();
    // One walk, and a reference's digits looked at once more.
    m.add(2 * raw.len());
    let mut out = String::new();
    let mut kept = 0;
    let mut at = 0;
    // Set once no `]]>` is left: every later CDATA opening is then text.
    let mut no_cdata_end = false;
    while let Some(&b) = bytes.get(at) {
        let rest = raw.get(at..).unwrap_or_default();
        let (decoded, len) = match b {
            b'&' => match reference(rest.as_bytes()) {
                Some((c, len)) => (Cow::Owned(c.to_string()), len),
                None => {
                    at += 1;
                    continue;
                }
            },
            b'<' if !no_cdata_end && rest.starts_with(CDATA) => {
                let inner = rest.get(CDATA.len()..).unwrap_or_default();
                match inner.find("]]>") {
                    Some(end) => {
                        m.add(end);
                        (
                            Cow::Borrowed(inner.get(..end).unwrap_or_default()),
                            CDATA.len() + end + 3,
                        )
                    }
                    None => {
                        m.add(inner.len());
                        no_cdata_end = true;
                        at += CDATA.len();
                        continue;
                    }
                }
            }
            _ => {
                at += 1;
                continue;
            }
        };
        out.push_str(raw.get(kept..at).unwrap_or_default());
        out.push_str(&decoded);
        at += len;
        kept = at;
    }
    if kept == 0 {
        return Cow::Borrowed(raw);
    }
    out.push_str(raw.get(kept..).unwrap_or_default());
    Cow::Owned(out)
}

/// The character a reference at the start of `rest` (at its `&`) stands
/// for, and the reference's length: one of the five predefined entities,
/// or `&#digits;`/`&#xhex;` naming a character XML allows.
fn reference(rest: &[u8]) -> Option<(char, usize)> {
    const NAMED: [(&[u8], char); 5] = [
        (b"&lt;", '<'),
        (b"&gt;", '>'),
        (b"&amp;", '&'),
        (b"&quot;", '"'),
        (b"&apos;", '\''),
    ];
    if let Some(&(name, c)) = NAMED.iter().find(|(name, _)| rest.starts_with(name)) {
        return Some((c, name.len()));
    }
    let (digits_at, radix) = if rest.starts_with(b"&#x") {
        (3, 16)
    } else if rest.starts_with(b"&#") {
        (2, 10)
    } else {
        return None;
    };
    let digits = rest
        .iter()
        .skip(digits_at)
        .take_while(|b| char::from(**b).is_digit(radix))
        .count();
    let end = digits_at + digits;
    if digits == 0 || rest.get(end) != Some(&b';') {
        return None;
    }
    let mut value: u32 = 0;
    for &d in rest.get(digits_at..end)? {
        let digit = char::from(d).to_digit(radix)?;
        // Past the last code point it can only stay invalid.
        value = value.saturating_mul(radix).saturating_add(digit).min(0x11_0000);
    }
    let c = char::from_u32(value)?;
    let xml_char =
        matches!(c, '\t' | '\n' | '\r' | ' '..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..);
    xml_char.then_some((c, end + 1))
}
