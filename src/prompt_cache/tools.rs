//! Tool definitions: canonical JSON, so that definitions that differ only in
//! key order or insignificant whitespace give identical bytes (and so the
//! same prefix hash and provider cache entry). Keys are sorted bytewise at
//! every level, arrays and the order of the tools stay as given, numbers and
//! strings are written in serde_json's one normal form (shortest round-trip
//! floats, UTF-8 kept, only the required escapes).

use crate::vocab::FieldViolation;

/// Canonicalizes every definition, or reports each one that is not a JSON
/// object by its field path (`tools[i]`). Parser messages name a line and a
/// column, never the content.
pub fn canonicalize(tools: &[String]) -> Result<Vec<String>, Vec<FieldViolation>> {
    let mut out = Vec::with_capacity(tools.len());
    let mut bad = Vec::new();
    for (i, raw) in tools.iter().enumerate() {
        let field = format!("tools[{i}]");
        match serde_json::from_str::<serde_json::Value>(raw) {
            Ok(v @ serde_json::Value::Object(_)) => match serde_json::to_string(&v) {
                Ok(s) => out.push(s),
                Err(e) => bad.push(FieldViolation::new(field, format!("cannot re-encode: {e}"))),
            },
            Ok(_) => bad.push(FieldViolation::new(
                field,
                "must be a JSON object (one tool definition)",
            )),
            Err(e) => bad.push(FieldViolation::new(field, format!("not valid JSON: {e}"))),
        }
    }
    if bad.is_empty() { Ok(out) } else { Err(bad) }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn key_order_and_whitespace_do_not_matter() {
        let a = r#"{"type":"function","function":{"name":"lookup","parameters":{"type":"object","properties":{"id":{"type":"string"}}}}}"#;
        let b = "{\n  \"function\": {\"parameters\": {\"properties\": {\"id\": {\"type\": \"string\"}},\n \"type\": \"object\"},\n \"name\": \"lookup\"},\n  \"type\": \"function\"\n}";
        let ca = canonicalize(&[a.to_owned()]).unwrap();
        assert_eq!(ca, canonicalize(&[b.to_owned()]).unwrap());
        assert_eq!(
            ca[0],
            r#"{"function":{"name":"lookup","parameters":{"properties":{"id":{"type":"string"}},"type":"object"}},"type":"function"}"#
        );
    }

    #[test]
    fn order_of_tools_and_arrays_is_kept() {
        let t = canonicalize(&[r#"{"b":[3,1,2]}"#.to_owned(), r#"{"a":1}"#.to_owned()]).unwrap();
        assert_eq!(t, [r#"{"b":[3,1,2]}"#, r#"{"a":1}"#]);
    }

    #[test]
    fn invalid_definitions_name_their_index() {
        let err = canonicalize(&[
            r#"{"ok":true}"#.to_owned(),
            "{not json".to_owned(),
            "[1,2]".to_owned(),
        ])
        .unwrap_err();
        let fields: Vec<_> = err.iter().map(|v| v.field.as_str()).collect();
        assert_eq!(fields, ["tools[1]", "tools[2]"]);
        assert!(!err[0].description.contains("not json"), "no content echoed");
    }

    proptest! {
        /// Canonical output is a fixed point and means the same JSON.
        #[test]
        fn canonical_form_is_idempotent(keys in prop::collection::vec("[a-z\u{e9}\u{1F600}\"\\\\ ]{0,6}", 0..6), n in any::<i64>(), f in -1e9f64..1e9) {
            let mut obj = serde_json::Map::new();
            for (i, k) in keys.iter().enumerate() {
                obj.insert(k.clone(), if i % 2 == 0 { serde_json::json!(n) } else { serde_json::json!([f, k]) });
            }
            let raw = serde_json::to_string_pretty(&serde_json::Value::Object(obj)).unwrap();
            let once = canonicalize(std::slice::from_ref(&raw)).unwrap();
            prop_assert_eq!(&canonicalize(&once).unwrap(), &once);
            let a: serde_json::Value = serde_json::from_str(&raw).unwrap();
            let b: serde_json::Value = serde_json::from_str(&once[0]).unwrap();
            prop_assert_eq!(a, b);
        }
    }
}
