use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

fn parsed(api: Api, request: Request<'_>) -> Value {
    serde_json::from_slice(&body(api, "m-1", request).unwrap()).unwrap()
}

#[test]
fn anthropic_bodies_put_text_messages_system_and_tools_where_the_api_reads_them() {
    assert_eq!(
        parsed(Api::Anthropic, Request::Messages(&["hi \"there\""])),
        json!({"model": "m-1", "messages": [{"role": "user", "content": "hi \"there\""}]})
    );
    assert_eq!(
        parsed(Api::Anthropic, Request::Messages(&["a", "b", "c"])),
        json!({"model": "m-1", "messages": [
            {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
            {"role": "user", "content": "c"}]})
    );
    assert_eq!(
        parsed(Api::Anthropic, Request::System("be brief")),
        json!({"model": "m-1", "system": "be brief", "messages": [{"role": "user", "content": "a"}]})
    );
    let t = tools(
        r#"[{"name": "f", "input_schema": {"type": "object"}}]"#,
        Api::Anthropic,
    )
    .unwrap();
    assert_eq!(
        parsed(Api::Anthropic, Request::Tools(&t)),
        json!({"model": "m-1", "messages": [{"role": "user", "content": "a"}],
               "tools": [{"name": "f", "input_schema": {"type": "object"}}]})
    );
}

#[test]
fn gemini_bodies_use_contents_and_wrap_system_and_tools_in_a_generate_request() {
    assert_eq!(
        parsed(Api::Gemini, Request::Messages(&["a", "b", "c"])),
        json!({"contents": [
            {"role": "user", "parts": [{"text": "a"}]}, {"role": "model", "parts": [{"text": "b"}]},
            {"role": "user", "parts": [{"text": "c"}]}]})
    );
    assert_eq!(
        parsed(Api::Gemini, Request::System("be brief")),
        json!({"generateContentRequest": {"model": "models/m-1",
            "contents": [{"role": "user", "parts": [{"text": "a"}]}],
            "systemInstruction": {"parts": [{"text": "be brief"}]}}})
    );
    let t = tools(r#"[{"name": "f"}]"#, Api::Gemini).unwrap();
    assert_eq!(
        parsed(Api::Gemini, Request::Tools(&t)),
        json!({"generateContentRequest": {"model": "models/m-1",
            "contents": [{"role": "user", "parts": [{"text": "a"}]}],
            "tools": [{"functionDeclarations": [{"name": "f"}]}]}})
    );
}

#[test]
fn a_tool_set_must_be_a_json_array_of_named_definitions() {
    assert!(tools("[]", Api::Anthropic).is_ok());
    for bad in [
        "",
        "{}",
        "[",
        "\"[]\"",
        "[] []",
        " [1] ",
        r#"[{"description": "no name"}]"#,
    ] {
        assert!(
            matches!(tools(bad, Api::Anthropic), Err(CountError::Unsendable { .. })),
            "{bad:?}"
        );
    }
}

/// Each definition goes in the provider's shape, whichever of OpenAI's,
/// Anthropic's or Gemini's it came in.
#[test]
fn a_tool_set_is_sent_in_the_providers_shape() {
    let schema = json!({"type": "object", "properties": {"day": {"type": "string"}}});
    let openai = json!([{"type": "function", "function":
        {"name": "f", "description": "d", "parameters": schema}}]);
    let anthropic = json!([{"name": "f", "description": "d", "input_schema": schema}]);
    let gemini = json!([{"name": "f", "description": "d", "parameters": schema}]);
    for given in [&openai, &anthropic, &gemini] {
        let text = given.to_string();
        let to = |api| serde_json::from_str::<Value>(tools(&text, api).unwrap().get()).unwrap();
        assert_eq!(to(Api::Anthropic), anthropic, "{given}");
        assert_eq!(to(Api::Gemini), gemini, "{given}");
    }
    // Anthropic needs a schema: a tool without parameters has an empty one.
    let bare = tools(r#"[{"name": "now"}]"#, Api::Anthropic).unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(bare.get()).unwrap(),
        json!([{"name": "now", "input_schema": {"type": "object"}}])
    );
}

#[test]
fn model_names_are_bounded_and_safe_in_a_url_path() {
    for good in [
        "claude-opus-4-7",
        "gemini-2.5-flash",
        "claude-3-5@20240620",
        "a.b_c:0",
    ] {
        assert!(model_ok(good), "{good}");
    }
    let long = "m".repeat(super::super::MAX_MODEL_BYTES + 1);
    for bad in ["", "a/b", "a?b", "a b", "x%2F", "é", "{model}", long.as_str()] {
        assert!(!model_ok(bad), "{bad}");
    }
}

#[test]
fn answers_mean_what_the_status_and_count_say() {
    let a = Api::Anthropic;
    let g = Api::Gemini;
    assert_eq!(
        verdict(a, 200, None, br#"{"input_tokens": 12}"#),
        Verdict::Count(12)
    );
    assert_eq!(
        verdict(g, 200, None, br#"{"totalTokens": 9, "x": []}"#),
        Verdict::Count(9)
    );
    // Each API reads its own field only.
    assert_eq!(
        verdict(a, 200, None, br#"{"totalTokens": 9}"#),
        Verdict::Failed(Failure::NoCount)
    );
    assert_eq!(
        verdict(g, 200, None, br#"{"input_tokens": 9}"#),
        Verdict::Failed(Failure::NoCount)
    );
    assert_eq!(
        verdict(a, 200, None, br#"{"input_tokens": -1}"#),
        Verdict::Failed(Failure::NoCount)
    );
    assert_eq!(
        verdict(a, 200, None, br#"{"input_tokens": 99999999999}"#),
        Verdict::Count(u32::MAX)
    );
    for status in [400, 404, 413, 422] {
        assert_eq!(verdict(a, status, None, b"{}"), Verdict::Refused(status));
    }
    for status in [401, 403, 500, 502, 503, 529, 302] {
        assert_eq!(
            verdict(a, status, None, b""),
            Verdict::Failed(Failure::Status(status))
        );
    }
    assert_eq!(
        verdict(a, 429, Some(b"7"), b""),
        Verdict::Throttled(Duration::from_secs(7))
    );
}

#[test]
fn retry_after_is_whole_seconds_capped_and_defaults_to_one() {
    assert_eq!(retry_after(None), DEFAULT_RETRY_AFTER);
    assert_eq!(retry_after(Some(b" 3 ")), Duration::from_secs(3));
    assert_eq!(retry_after(Some(b"0")), Duration::ZERO);
    assert_eq!(retry_after(Some(b"86400")), MAX_RETRY_AFTER);
    for odd in [&b"Wed, 21 Oct 2015 07:28:00 GMT"[..], b"-1", b"1.5", b"\xff"] {
        assert_eq!(retry_after(Some(odd)), DEFAULT_RETRY_AFTER);
    }
}

proptest! {
    #[test]
    fn no_answer_panics(status in 0u16..1000, retry in proptest::option::of(any::<Vec<u8>>()),
                        body in any::<Vec<u8>>(), gemini in any::<bool>()) {
        let api = if gemini { Api::Gemini } else { Api::Anthropic };
        let _ = verdict(api, status, retry.as_deref(), &body);
    }
}
