//! Escaping: text from a request (an attacker may have written it) can
//! neither close nor forge a wrapper we write around it.

/// Appends `value` escaped for a double-quoted attribute (no quote, angle
/// bracket or line break survives).
pub fn escape_attr(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\n' => out.push_str("&#10;"),
            '\r' => out.push_str("&#13;"),
            c => out.push(c),
        }
    }
}

/// Copies `content`, writing `&lt;` for every `<` that would open or close
/// one of `tags` (any case, whitespace allowed after `<` or `/`).
pub fn escape_tags(out: &mut String, content: &str, tags: &[&str]) {
    let bytes = content.as_bytes();
    let mut copied = 0;
    let mut from = 0;
    while let Some(off) = content[from..].find('<') {
        let at = from + off;
        if starts_tag(&bytes[at + 1..], tags) {
            out.push_str(&content[copied..at]);
            out.push_str("&lt;");
            copied = at + 1;
        }
        from = at + 1;
    }
    out.push_str(&content[copied..]);
}

/// Whether the bytes after a `<` spell `[ws]* /? [ws]* tagname`, any case,
/// for a tag name of `tags`.
pub fn starts_tag(rest: &[u8], tags: &[&str]) -> bool {
    let mut i = 0;
    while i < rest.len() && rest[i].is_ascii_whitespace() {
        i += 1;
    }
    if i < rest.len() && rest[i] == b'/' {
        i += 1;
        while i < rest.len() && rest[i].is_ascii_whitespace() {
            i += 1;
        }
    }
    let rest = &rest[i..];
    tags.iter()
        .any(|t| rest.len() >= t.len() && rest[..t.len()].eq_ignore_ascii_case(t.as_bytes()))
}
