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

#[test]
fn a_note_after_the_last_user_message_does_not_leave_it_cuttable() {
    let body = r#"{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"q1"},
        {"role":"assistant","content":"a1"},{"role":"user","content":"q2"},{"role":"developer","content":"note"}]}"#;
    // Turns: q1, a1, q2, note: the newest turn is q2 and what follows it.
    assert_eq!(newest(&chat::parse(body).unwrap()), 2);
}

#[test]
fn a_kept_call_keeps_its_reasoning() {
    let body = r#"{"model":"gpt-4o","input":[{"role":"user","content":"go"},
        {"type":"reasoning","id":"rs_1","summary":[]},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},
        {"type":"function_call_output","call_id":"c1","output":"r"},{"role":"user","content":"next"}]}"#;
    let p = crate::gateway::responses::parse(body).unwrap();
    let mut fates = vec![
        body::Fate {
            kept: true,
            ..body::Fate::default()
        };
        p.turns.len()
    ];
    // The assembler drops a closed cycle's thinking: the reasoning item stays.
    fates[1].thinking_dropped = true;
    let out = body::splice(body, &p, &fates, None, &[]);
    assert!(
        out.contains(r#"{"type":"reasoning","id":"rs_1","summary":[]}"#),
        "{out}"
    );
}

mod properties {
    use proptest::prelude::*;

    use super::super::newest;
    use crate::gateway::chat;

    /// A conversation of user turns and agent steps (an assistant call of
    /// one or two tools, then their results), ending anywhere.
    fn conversation() -> impl Strategy<Value = String> {
        proptest::collection::vec((any::<bool>(), 1usize..3, any::<bool>()), 1..12).prop_map(|steps| {
            let mut messages = Vec::new();
            for (k, (user, calls, answered)) in steps.into_iter().enumerate() {
                if user {
                    messages.push(format!(r#"{{"role":"user","content":"u{k}"}}"#));
                    continue;
                }
                let ids: Vec<String> = (0..calls).map(|c| format!("c{k}-{c}")).collect();
                let calls_json: Vec<String> = ids
                    .iter()
                    .map(|id| format!(r#"{{"id":"{id}","function":{{"name":"f","arguments":"{{}}"}}}}"#))
                    .collect();
                messages.push(format!(
                    r#"{{"role":"assistant","tool_calls":[{}]}}"#,
                    calls_json.join(",")
                ));
                if answered {
                    for id in &ids {
                        messages.push(format!(
                            r#"{{"role":"tool","tool_call_id":"{id}","content":"r"}}"#
                        ));
                    }
                }
            }
            format!(r#"{{"model":"gpt-4o","messages":[{}]}}"#, messages.join(","))
        })
    }

    proptest! {
        /// The pinned turns hold the last user or tool turn, every result
        /// pinned has its call pinned, and nothing is pinned before the
        /// last user turn unless a result needs it.
        #[test]
        fn the_newest_turn_holds_its_calls(body in conversation()) {
            use crate::vocab::Role;
            let p = chat::parse(&body).unwrap();
            let at = newest(&p);
            let turns = &p.turns;
            prop_assert!(at <= turns.len());
            if let Some(last) = turns.iter().rposition(|t| matches!(t.role, Some(Role::User | Role::Tool))) {
                prop_assert!(at <= last);
            }
            let made: Vec<&String> = turns[at..].iter().flat_map(|t| &t.tool_call_ids).collect();
            for t in turns[at..].iter().filter(|t| t.role == Some(Role::Tool)) {
                prop_assert!(made.contains(&&t.tool_call_id), "{} pinned without its call in {}", t.tool_call_id, body);
            }
            if at > 0 {
                // The turn before the cut is not needed by what is pinned.
                let before = &turns[at - 1];
                let needed = before.tool_call_ids.iter().any(|id| {
                    turns[at..].iter().any(|t| t.role == Some(Role::Tool) && &t.tool_call_id == id)
                });
                prop_assert!(!needed, "cut at {} leaves a call its results need", at);
            }
        }
    }
}

#[test]
fn a_fitted_requests_sources_add_up_to_its_input_tokens() {
    let usage = Usage {
        budget: 10_000,
        total_tokens: 100,
        static_tokens: 40,
        dynamic_tokens: 60,
        tokenizer: "estimate(cl100k_base,+20%)".to_owned(),
        exact: false,
        output_reserve: 1000,
        context_window: 200_000,
        tools_tokens: 30,
        tools_exact: false,
        sources: Sources {
            exact: 0,
            provider: 70,
            estimated: 30,
        },
    };
    let add_up = |s: Sources| s.exact + s.provider + s.estimated;
    // The messages as counted; tools and images by whether their rule is
    // the provider's.
    let s = sources(&usage, false, 50, true);
    assert_eq!((s.exact, s.provider, s.estimated), (50, 70, 60));
    assert_eq!(add_up(s), 100 + 30 + 50);
    let exact_tools = Usage {
        tools_exact: true,
        ..usage.clone()
    };
    let s = sources(&exact_tools, false, 50, false);
    assert_eq!((s.exact, s.provider, s.estimated), (30, 70, 80));
    // A count by convention is an estimate of every message.
    let s = sources(&usage, true, 0, true);
    assert_eq!((s.exact, s.provider, s.estimated), (0, 0, 130));
}
