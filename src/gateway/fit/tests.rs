use super::*;
use crate::gateway::{chat, messages};

#[test]
fn the_newest_turn_is_the_last_user_message() {
    let body = r#"{"model":"m","messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"}]}"#;
    assert_eq!(newest(&chat::parse(body).unwrap()), 2);
    // An assistant prefill goes with it.
    let body = r#"{"model":"m","messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"},{"role":"assistant","content":"{"}]}"#;
    assert_eq!(newest(&chat::parse(body).unwrap()), 2);
}

#[test]
fn in_an_agent_loop_the_newest_turn_is_the_last_results_with_their_call() {
    let body = r#"{"model":"m","messages":[{"role":"user","content":"a"},
        {"role":"assistant","tool_calls":[{"id":"c1","function":{"name":"f","arguments":"{}"}},{"id":"c2","function":{"name":"f","arguments":"{}"}}]},
        {"role":"tool","tool_call_id":"c1","content":"1"},{"role":"tool","tool_call_id":"c2","content":"2"}]}"#;
    assert_eq!(newest(&chat::parse(body).unwrap()), 1);
    // Anthropic: the user message holding the results, and the call.
    let body = r#"{"model":"c","messages":[{"role":"user","content":"a"},
        {"role":"assistant","content":[{"type":"tool_use","id":"u1","name":"f","input":{}}]},
        {"role":"user","content":[{"type":"tool_result","tool_use_id":"u1","content":"r"},{"type":"text","text":"and"}]}]}"#;
    assert_eq!(newest(&messages::parse(body).unwrap()), 1);
}

#[test]
fn the_reserve_is_the_requests_maximum_output_inside_the_window() {
    assert_eq!(reserve(None, 100, 1000), Some(100));
    assert_eq!(reserve(Some(300), 100, 1000), Some(300));
    assert_eq!(reserve(Some(1000), 100, 1000), None);
    assert_eq!(reserve(Some(u64::MAX), 100, 1000), None);
}

#[test]
fn refusals_speak_each_providers_error_shape() {
    let r = refusal(Api::Chat, 400, "context_length_exceeded", "messages", "too long");
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(v["error"]["code"], "context_length_exceeded");
    assert_eq!(v["error"]["param"], "messages");
    let r = refusal(Api::Messages, 413, "too_large", "", "big");
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "request_too_large");
    let r = too_large(Api::Responses, 10, 5);
    assert_eq!(r.status, 413);
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(v["error"]["param"], serde_json::Value::Null);
}
