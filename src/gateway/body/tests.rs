use proptest::prelude::*;

use super::*;
use crate::gateway::{chat, messages};

fn kept(n: usize) -> Vec<Fate> {
    vec![
        Fate {
            kept: true,
            ..Fate::default()
        };
        n
    ]
}

#[test]
fn paths_choose_the_api() {
    assert_eq!(Api::of_path("/v1/chat/completions"), Some(Api::Chat));
    assert_eq!(Api::of_path("/v1/chat/completions?x=1"), Some(Api::Chat));
    assert_eq!(Api::of_path("/v1/messages"), Some(Api::Messages));
    assert_eq!(Api::of_path("/v1/responses"), Some(Api::Responses));
    assert_eq!(Api::of_path("/v1/embeddings"), None);
    assert_eq!(Api::of_path("/v1/chat/completions/render"), None);
}

#[test]
fn dropped_messages_go_and_kept_ones_keep_their_bytes() {
    let body = r#"{"model":"m","messages":[ {"role":"system","content":"s"},
        {"content":"a",  "role":"user"}, {"role":"assistant","content":"b"},{"role":"user","content":"c"} ],"n":1}"#;
    let p = chat::parse(body).unwrap();
    let mut fates = kept(3);
    fates[0].kept = false;
    fates[1].kept = false;
    let out = splice(body, &p, &fates, Some(r#"{"role":"user","content":"sum"}"#), &[]);
    assert_eq!(
        out,
        r#"{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"sum"},{"role":"user","content":"c"}],"n":1}"#
    );
}

#[test]
fn a_cleared_result_keeps_everything_but_its_content() {
    let body = r#"{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":[{"type":"text","text":"long"}],"name":"f"},{"role":"user","content":"q"}]}"#;
    let p = chat::parse(body).unwrap();
    let mut fates = kept(3);
    fates[1].cleared = Some("[cleared \"x\"]".to_owned());
    let out = splice(body, &p, &fates, None, &[]);
    assert!(
        out.contains(r#"{"role":"tool","tool_call_id":"c1","content":"[cleared \"x\"]","name":"f"}"#),
        "{out}"
    );
    assert!(out.contains(r#"{"role":"user","content":"q"}"#));
}

#[test]
fn an_anthropic_message_loses_only_the_blocks_of_dropped_turns() {
    let body = r#"{"model":"claude","max_tokens":10,"messages":[
        {"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s"},{"type":"tool_use","id":"u1","name":"f","input":{}}]},
        {"role":"user","content":[{"type":"tool_result","tool_use_id":"u1","content":"r"}, {"type":"text","text":"next"}]}]}"#;
    let p = messages::parse(body).unwrap();
    assert_eq!(p.turns.len(), 3);
    // The call and its result go; the user's words stay.
    let fates = vec![
        Fate::default(),
        Fate::default(),
        Fate {
            kept: true,
            ..Fate::default()
        },
    ];
    let out = splice(body, &p, &fates, None, &[]);
    assert!(
        out.ends_with(r#"[{"role":"user","content":[{"type":"text","text":"next"}]}]}"#),
        "{out}"
    );
    // Kept without its thinking: the thinking block goes, the call stays.
    let mut fates = kept(3);
    fates[0].thinking_dropped = true;
    let out = splice(body, &p, &fates, None, &[]);
    assert!(
        out.contains(
            r#"{"role":"assistant","content":[{"type":"tool_use","id":"u1","name":"f","input":{}}]}"#
        ),
        "{out}"
    );
}

#[test]
fn a_member_is_added_at_the_end_of_the_object() {
    assert_eq!(add_member(r#"{"a":1} "#, "k", r#""v""#), r#"{"a":1,"k":"v"} "#);
    assert_eq!(add_member("{\"a\" : 1\n}\n", "k", "2"), "{\"a\" : 1,\"k\":2\n}\n");
    assert_eq!(add_member("{ }", "k", "1"), r#"{"k":1 }"#);
}

fn chat_of(texts: &[String]) -> String {
    let messages: Vec<String> = texts
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            format!(r#"{{ "role" :"{role}","content": {} }}"#, quoted(t))
        })
        .collect();
    format!(
        r#"{{"model":"gpt-4o","messages": [ {} ], "x":[1, 2]}}"#,
        messages.join(" , ")
    )
}

proptest! {
    /// Whatever is kept is the caller's bytes, in order, and everything
    /// outside the list is untouched; keeping all is the identity on the
    /// list's elements.
    #[test]
    fn kept_elements_are_the_callers_bytes(
        texts in proptest::collection::vec("[a-z \"\\\\é]{0,12}", 1..12),
        keep in proptest::collection::vec(any::<bool>(), 12),
    ) {
        let body = chat_of(&texts);
        let p = chat::parse(&body).unwrap();
        let fates: Vec<Fate> = (0..p.turns.len())
            .map(|i| Fate { kept: keep[i], ..Fate::default() })
            .collect();
        let out = splice(&body, &p, &fates, None, &[]);
        let (head, tail) = (r#"{"model":"gpt-4o","messages": ["#, r#"], "x":[1, 2]}"#);
        prop_assert!(out.starts_with(head), "{}", out);
        prop_assert!(out.ends_with(tail), "{}", out);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let sent = v["messages"].as_array().unwrap();
        prop_assert_eq!(sent.len(), keep[..p.turns.len()].iter().filter(|&&k| k).count());
        let mut from = 0;
        for (i, el) in p.elements.iter().enumerate() {
            if keep[i] {
                let raw = &body[el.span.clone()];
                let at = out[from..].find(raw).map(|a| a + from);
                prop_assert!(at.is_some(), "{} not in {}", raw, out);
                from = at.unwrap_or(from) + raw.len();
            }
        }
        let all = splice(&body, &p, &kept(p.turns.len()), None, &[]);
        let joined: Vec<&str> = p.elements.iter().map(|e| &body[e.span.clone()]).collect();
        prop_assert_eq!(&all[p.list.start..], format!("[{}]{}", joined.join(","), &body[p.list.end..]));
    }
}

#[test]
fn an_empty_anthropic_content_is_a_turn_and_a_marker_fits_an_empty_object() {
    let body = r#"{"model":"m","messages":[{"role":"user","content":[]}]}"#;
    let p = messages::parse(body).unwrap();
    assert_eq!(p.turns.len(), 1);
    assert_eq!(splice(body, &p, &kept(1), None, &[]), body);
    let body = r#"{"model":"m","tools":[{ }],"messages":[]}"#;
    let p = messages::parse(body).unwrap();
    let edit = p.marks.tools[0].mark(body, r#"{"type":"ephemeral"}"#);
    let out = super::edit(body, &[edit]);
    assert_eq!(
        out,
        r#"{"model":"m","tools":[{ "cache_control":{"type":"ephemeral"}}],"messages":[]}"#
    );
}

#[test]
fn arrays_where_objects_belong_are_not_requests() {
    assert_eq!(
        chat::parse(r#"["gpt",[{"role":"user","content":"hi"}]]"#).unwrap_err(),
        Unfit::Malformed
    );
    let block_as_array = r#"{"model":"m","messages":[{"role":"user","content":[["text","hi"]]}]}"#;
    assert_eq!(messages::parse(block_as_array).unwrap_err(), Unfit::Malformed);
}
