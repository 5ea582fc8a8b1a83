use super::*;

#[test]
fn results_are_turns_of_their_own_and_thinking_stays_with_its_turn() {
    let body = r#"{"model":"claude-sonnet-4-5","max_tokens":100,"system":[{"type":"text","text":"a"},{"type":"text","text":"b"}],
        "tools":[{"name":"f","description":"d","input_schema":{"type":"object"}}],
        "messages":[{"role":"user","content":"go"},
        {"role":"assistant","content":[{"type":"thinking","thinking":"hm","signature":"sig"},{"type":"text","text":"calling"},{"type":"tool_use","id":"u1","name":"f","input":{"x":1}}]},
        {"role":"user","content":[{"type":"tool_result","tool_use_id":"u1","content":[{"type":"text","text":"out"}]},{"type":"text","text":"thanks"}]}]}"#;
    let p = parse(body).unwrap();
    assert_eq!(p.system, ["a\nb"]);
    assert_eq!(p.max_output, Some(100));
    assert!(p.tools[0].contains(r#""parameters":{"type":"object"}"#));
    let roles: Vec<_> = p.turns.iter().map(|t| t.role).collect();
    assert_eq!(
        roles,
        [
            Some(Role::User),
            Some(Role::Assistant),
            Some(Role::Tool),
            Some(Role::User)
        ]
    );
    let call = &p.turns[1];
    assert_eq!(call.text, "calling\nf\n{\"x\":1}");
    assert_eq!(call.thinking[0].signature, "sig");
    assert!(call.parts.iter().any(|p| p.thinking));
    assert_eq!(p.turns[2].tool_call_id, "u1");
    assert_eq!(p.turns[2].text, "out");
    assert_eq!(
        &body[p.turns[2].clear.clone().unwrap()],
        r#"[{"type":"text","text":"out"}]"#
    );
    assert_eq!(p.turns[3].text, "thanks");
}

#[test]
fn unknown_blocks_and_roles_are_not_cut() {
    assert_eq!(
        parse(r#"{"model":"c","messages":[{"role":"user","content":[{"type":"document"}]}]}"#).unwrap_err(),
        Unfit::Unsupported
    );
    assert_eq!(
        parse(r#"{"model":"c","messages":[{"role":"system","content":"x"}]}"#).unwrap_err(),
        Unfit::Unsupported
    );
    // A tool_use from the user is not a call.
    assert_eq!(
        parse(r#"{"model":"c","messages":[{"role":"user","content":[{"type":"tool_use","id":"x"}]}]}"#)
            .unwrap_err(),
        Unfit::Unsupported
    );
}
