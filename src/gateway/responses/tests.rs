use super::*;

#[test]
fn calls_of_one_step_are_one_turn_with_the_reasoning_before_them() {
    let body = r#"{"model":"gpt-4o","instructions":"be brief","max_output_tokens":64,"tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],
        "input":[{"role":"user","content":"go"},
        {"type":"reasoning","id":"r1","summary":[{"type":"summary_text","text":"think"}]},
        {"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},
        {"type":"function_call","call_id":"c2","name":"f","arguments":"{\"b\":2}"},
        {"type":"function_call_output","call_id":"c1","output":"one"},
        {"type":"function_call_output","call_id":"c2","output":[{"type":"input_text","text":"two"}]}]}"#;
    let p = parse(body).unwrap();
    assert_eq!(p.system, ["be brief"]);
    assert_eq!(p.max_output, Some(64));
    assert!(p.tools[0].contains(r#""name":"f""#));
    assert_eq!(p.turns.len(), 4);
    let step = &p.turns[1];
    assert_eq!(step.tool_call_ids, ["c1", "c2"]);
    assert_eq!(step.text, "f\n{}\nf\n{\"b\":2}");
    assert_eq!(step.thinking.len(), 1);
    assert_eq!(step.parts.len(), 3);
    assert_eq!(p.turns[3].text, "two");
    assert_eq!(&body[p.turns[2].clear.clone().unwrap()], r#""one""#);
    assert!(!p.continued);
}

#[test]
fn a_string_input_is_one_user_turn_and_a_continuation_is_marked() {
    let body = r#"{"model":"gpt-4o","input":"hello","previous_response_id":"resp_1"}"#;
    let p = parse(body).unwrap();
    assert_eq!(p.turns.len(), 1);
    assert_eq!(p.turns[0].text, "hello");
    assert_eq!(&body[p.list.clone()], r#""hello""#);
    assert!(p.continued);
    assert_eq!(
        parse(r#"{"model":"m","input":[{"type":"web_search_call"}]}"#).unwrap_err(),
        Unfit::Unsupported
    );
}
