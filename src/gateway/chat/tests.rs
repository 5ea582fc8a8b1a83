use super::*;

#[test]
fn leading_system_messages_are_the_prefix_and_the_rest_are_turns() {
    let body = r#"{"model":"gpt-4o","max_tokens":50,"messages":[
        {"role":"system","content":"s1"},{"role":"developer","content":[{"type":"text","text":"d"}]},
        {"role":"user","content":"u"},{"role":"system","content":"late"},
        {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},
        {"role":"tool","tool_call_id":"c1","content":"r"}],"tools":[{"type":"function","function":{"name":"f"}}]}"#;
    let p = parse(body).unwrap();
    assert_eq!(p.model, "gpt-4o");
    assert_eq!(p.max_output, Some(50));
    assert_eq!(p.system, ["s1", "d"]);
    assert_eq!(p.tools.len(), 1);
    let roles: Vec<_> = p.turns.iter().map(|t| t.role).collect();
    assert_eq!(
        roles,
        [
            Some(Role::User),
            Some(Role::System),
            Some(Role::Assistant),
            Some(Role::Tool)
        ]
    );
    assert_eq!(p.turns[2].text, "f\n{\"a\":1}");
    assert_eq!(p.turns[2].tool_call_ids, ["c1"]);
    assert_eq!(p.turns[3].tool_call_id, "c1");
    assert_eq!(&body[p.turns[3].clear.clone().unwrap()], r#""r""#);
    assert!(p.estimated, "a tool call is counted by convention");
    assert_eq!(p.elements.iter().filter(|e| e.fixed).count(), 2);
}

#[test]
fn max_completion_tokens_wins_and_parts_join_by_lines() {
    let body = r#"{"model":"m","max_tokens":5,"max_completion_tokens":7,"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"https://x.invalid/i.png","detail":"low"}},{"type":"text","text":"b"}]}]}"#;
    let p = parse(body).unwrap();
    assert_eq!(p.max_output, Some(7));
    assert_eq!(p.turns[0].text, "a\nb");
    assert_eq!(p.turns[0].images.len(), 1);
    assert!(p.turns[0].images[0].low);
}

#[test]
fn what_is_not_a_chat_request_says_why() {
    assert_eq!(parse("{").unwrap_err(), Unfit::Malformed);
    assert_eq!(parse(r#"{"model":"m"}"#).unwrap_err(), Unfit::NotChat);
    assert_eq!(
        parse(r#"{"model":"m","messages":{}}"#).unwrap_err(),
        Unfit::Malformed
    );
    assert_eq!(
        parse(r#"{"model":"m","messages":[{"role":"function","content":"x"}]}"#).unwrap_err(),
        Unfit::Unsupported
    );
    assert_eq!(
        parse(r#"{"model":"m","messages":[{"role":"user","content":[{"type":"input_audio"}]}]}"#)
            .unwrap_err(),
        Unfit::Unsupported
    );
    // A duplicate key is not one request.
    assert_eq!(
        parse(r#"{"model":"m","model":"n","messages":[]}"#).unwrap_err(),
        Unfit::Malformed
    );
}

#[test]
fn a_named_message_makes_the_count_an_estimate() {
    let plain = r#"{"model":"m","messages":[{"role":"user","content":"a"}]}"#;
    assert!(!parse(plain).unwrap().estimated);
    let named = r#"{"model":"m","messages":[{"role":"user","name":"ann","content":"a"}]}"#;
    assert!(parse(named).unwrap().estimated);
}

#[test]
fn the_list_and_a_results_content_are_found_whatever_the_spacing_and_escapes() {
    let body = "{\"model\":\"m\",\"messages\" : [ \n{\"role\":\"user\",\"content\":\"q\"},\n\t{\"role\":\"tool\",\"tool_call_id\":\"c\",\"content\":\"a\\\"b\\n\"} ] ,\"x\":1}";
    let p = parse(body).unwrap();
    assert_eq!(
        &body[p.list.clone()],
        &body[body.find('[').unwrap()..=body.rfind(']').unwrap()]
    );
    assert_eq!(&body[p.turns[1].clear.clone().unwrap()], r#""a\"b\n""#);
    assert_eq!(p.turns[1].text, "a\"b\n");
    let plain = r#"{"model":"m","messages":[{"role":"tool","tool_call_id":"c","content":"r s"}]}"#;
    let p = parse(plain).unwrap();
    assert_eq!(&plain[p.turns[0].clear.clone().unwrap()], r#""r s""#);
    let parts = r#"{"model":"m","messages":[{"role":"tool","tool_call_id":"c","content":[{"type":"text","text":"t"}]}]}"#;
    let p = parse(parts).unwrap();
    assert_eq!(
        &parts[p.turns[0].clear.clone().unwrap()],
        r#"[{"type":"text","text":"t"}]"#
    );
    let empty = r#"{"model":"m","messages":  [  ]}"#;
    let p = parse(empty).unwrap();
    assert_eq!(&empty[p.list.clone()], "[  ]");
    assert!(p.turns.is_empty());
}
