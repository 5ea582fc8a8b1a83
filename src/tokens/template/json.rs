//! `tojson` for chat templates, as `transformers` defines it: what Python's
//! `json.dumps(x, ensure_ascii=False)` writes (`", "` and `": "`
//! separators, non-ASCII kept, keys in their order unless sorted), where
//! minijinja's own escapes `<` and `'` for HTML and writes compact JSON.

use std::fmt::Write as _;

use minijinja::value::{Kwargs, Value};
use minijinja::{Error, ErrorKind};

/// `tojson`, as `transformers` defines it: Python's
/// `json.dumps(value, ensure_ascii=False, indent=indent,
/// separators=separators, sort_keys=sort_keys)`.
pub(super) fn tojson(value: &Value, kwargs: Kwargs) -> Result<Value, Error> {
    let indent: Option<Value> = kwargs.get("indent")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let separators: Option<Value> = kwargs.get("separators")?;
    let _: Option<bool> = kwargs.get("ensure_ascii")?;
    kwargs.assert_all_used()?;
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => Some(match v.as_str() {
            Some(s) => s.to_owned(),
            None => " ".repeat(usize::try_from(i64::try_from(v)?.max(0)).unwrap_or(0)),
        }),
    };
    let (item_sep, key_sep) = match separators {
        Some(v) if !v.is_none() => {
            let mut it = v.try_iter()?;
            let item = it.next().and_then(|s| s.as_str().map(str::to_owned));
            let key = it.next().and_then(|s| s.as_str().map(str::to_owned));
            match (item, key) {
                (Some(i), Some(k)) => (i, k),
                _ => {
                    return Err(Error::new(
                        ErrorKind::InvalidOperation,
                        "tojson: separators must be two strings",
                    ));
                }
            }
        }
        // Python's defaults: ", " without an indent, "," with one.
        _ if indent.is_some() => (",".to_owned(), ": ".to_owned()),
        _ => (", ".to_owned(), ": ".to_owned()),
    };
    let style = JsonStyle {
        indent: indent.as_deref(),
        item_sep: &item_sep,
        key_sep: &key_sep,
        sort_keys: sort_keys.unwrap_or(false),
    };
    let mut out = String::new();
    style.write(&mut out, value, 0)?;
    Ok(Value::from_safe_string(out))
}

/// How Python's `json.dumps` lays out a value.
struct JsonStyle<'a> {
    indent: Option<&'a str>,
    item_sep: &'a str,
    key_sep: &'a str,
    sort_keys: bool,
}

/// Containers nested deeper than this are refused (Python's own limit is
/// its recursion limit, about 1,000).
const MAX_JSON_DEPTH: usize = 512;

impl JsonStyle<'_> {
    fn newline(&self, out: &mut String, depth: usize) {
        if let Some(ind) = self.indent {
            out.push('\n');
            for _ in 0..depth {
                out.push_str(ind);
            }
        }
    }

    /// Writes `v`, keeping a map's keys in their order unless sorting.
    fn write(&self, out: &mut String, v: &Value, depth: usize) -> Result<(), Error> {
        use minijinja::value::ValueKind as K;
        if depth > MAX_JSON_DEPTH {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "tojson: nested too deeply",
            ));
        }
        match v.kind() {
            K::Undefined | K::None => out.push_str("null"),
            K::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
            K::Number => write_number(out, v),
            K::String => write_string(out, v.as_str().unwrap_or_default()),
            K::Seq | K::Iterable => {
                let items: Vec<Value> = v.try_iter()?.collect();
                self.write_list(out, &items, depth)?;
            }
            K::Map => {
                let mut entries: Vec<(Value, Value)> = Vec::new();
                for k in v.try_iter()? {
                    let item = v.get_item(&k)?;
                    entries.push((k, item));
                }
                if self.sort_keys {
                    entries.sort_by_key(|e| e.0.to_string());
                }
                if entries.is_empty() {
                    out.push_str("{}");
                    return Ok(());
                }
                out.push('{');
                for (i, (k, item)) in entries.iter().enumerate() {
                    if i > 0 {
                        out.push_str(self.item_sep);
                    }
                    self.newline(out, depth + 1);
                    match k.as_str() {
                        Some(key) => write_string(out, key),
                        // Python writes a number or bool key as its text.
                        None => write_string(out, &k.to_string()),
                    }
                    out.push_str(self.key_sep);
                    self.write(out, item, depth + 1)?;
                }
                self.newline(out, depth);
                out.push('}');
            }
            _ => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    format!("tojson: a {} is not JSON", v.kind()),
                ));
            }
        }
        Ok(())
    }

    fn write_list(&self, out: &mut String, items: &[Value], depth: usize) -> Result<(), Error> {
        if items.is_empty() {
            out.push_str("[]");
            return Ok(());
        }
        out.push('[');
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                out.push_str(self.item_sep);
            }
            self.newline(out, depth + 1);
            self.write(out, item, depth + 1)?;
        }
        self.newline(out, depth);
        out.push(']');
        Ok(())
    }
}

/// A number as Python writes it: integers as they are, floats by their
/// shortest representation with a `.0` when integral.
fn write_number(out: &mut String, v: &Value) {
    if let Ok(i) = i64::try_from(v.clone()) {
        if !v.is_integer() {
            // A float with an integral value.
            if (i as f64).abs() < 1e16 {
                let _ = write!(out, "{i}.0");
                return;
            }
        } else {
            let _ = write!(out, "{i}");
            return;
        }
    }
    if v.is_integer() {
        let _ = write!(out, "{v}");
        return;
    }
    match f64::try_from(v.clone()) {
        Ok(f) if f.is_nan() => out.push_str("NaN"),
        Ok(f) if f.is_infinite() => out.push_str(if f > 0.0 { "Infinity" } else { "-Infinity" }),
        Ok(f) => {
            let _ = write!(out, "{f}");
        }
        Err(_) => {
            let _ = write!(out, "{v}");
        }
    }
}

/// A string as Python's `json.dumps(..., ensure_ascii=False)` writes it.
fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}
