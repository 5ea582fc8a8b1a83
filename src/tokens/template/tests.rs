use super::*;

fn render_with(source: &str, messages: &[ChatMessage<'_>]) -> Result<String, TemplateError> {
    ChatTemplate::new(source, vec![("bos_token".to_owned(), "<s>".to_owned())])?.render(messages, None, true)
}

/// A message.
fn m<'a>(role: &'a str, content: &'a str) -> ChatMessage<'a> {
    ChatMessage::new(role, content)
}

fn one(source: &str) -> Result<String, TemplateError> {
    render_with(source, &[m("user", "hi")])
}

/// `tojson` writes what Python's `json.dumps(v, ensure_ascii=False)` writes
/// (the expected texts are Python's output): spaced separators, non-ASCII
/// kept, only JSON's escapes, floats with `.0`, key order kept.
#[test]
fn tojson_writes_what_python_writes() {
    let src = r#"{{ {"name": "get_weather", "description": "Wetter für \"Köln\"\n<b>", "parameters": {"type": "object", "properties": {"unit": {"enum": ["c", "f"]}, "n": 1, "x": 1.0, "y": 2.5, "z": none, "t": true}}} | tojson }}"#;
    assert_eq!(
        one(src).unwrap(),
        r#"{"name": "get_weather", "description": "Wetter für \"Köln\"\n<b>", "parameters": {"type": "object", "properties": {"unit": {"enum": ["c", "f"]}, "n": 1, "x": 1.0, "y": 2.5, "z": null, "t": true}}}"#
    );
    let indented = r#"{{ {"name": "get_weather", "description": "Wetter für \"Köln\"\n<b>", "parameters": {"type": "object", "properties": {"unit": {"enum": ["c", "f"]}, "n": 1, "x": 1.0, "y": 2.5, "z": none, "t": true}}} | tojson(indent=2, sort_keys=true) }}"#;
    assert_eq!(
        one(indented).unwrap(),
        "{\n  \"description\": \"Wetter für \\\"Köln\\\"\\n<b>\",\n  \"name\": \"get_weather\",\n  \"parameters\": {\n    \"properties\": {\n      \"n\": 1,\n      \"t\": true,\n      \"unit\": {\n        \"enum\": [\n          \"c\",\n          \"f\"\n        ]\n      },\n      \"x\": 1.0,\n      \"y\": 2.5,\n      \"z\": null\n    },\n    \"type\": \"object\"\n  }\n}"
    );
    assert_eq!(
        one(r#"{{ {"a": [1, 2]} | tojson(separators=(",", ":")) }}"#).unwrap(),
        r#"{"a":[1,2]}"#
    );
    assert_eq!(one(r#"{{ "\u0001\t" | tojson }}"#).unwrap(), r#""\u0001\t""#);
}

/// Templates render as Jinja2 renders them in `transformers` (the expected
/// texts are its output): blocks on their own lines leave no blank lines or
/// indentation (`trim_blocks`, `lstrip_blocks`) and the final newline is
/// dropped; Python string methods, loop controls, slicing backwards,
/// namespaces and the special tokens a template reads all work.
#[test]
fn templates_render_as_in_transformers() {
    let cases = [
        (
            "{% for m in messages %}\n  {% if m.role == 'user' %}\n<u>{{ m.content }}</u>\n  {% else %}\n<a>{{ m.content }}</a>\n  {% endif %}\n{% endfor %}\n",
            [m("user", "hi"), m("assistant", "yo")],
            "<u>hi</u>\n<a>yo</a>\n",
        ),
        (
            "{{ bos_token }}{% set ns = namespace(n=0) %}{% for m in messages[::-1] %}{% if loop.index > 1 %}{% break %}{% endif %}{% set ns.n = ns.n + 1 %}[{{ m.content.strip() }}|{{ m.content.startswith(' h') }}|{{ 'a,b'.split(',') | length }}]{% endfor %}{{ ns.n }}",
            [m("user", "first"), m("user", " hello \n")],
            "<s>[hello|True|2]1",
        ),
    ];
    for (src, messages, expected) in cases {
        assert_eq!(render_with(src, &messages).unwrap(), expected);
    }
}

/// `raise_exception` refuses the input with the template's own message.
#[test]
fn raise_exception_refuses_with_its_message() {
    let src = "{% if messages[0].role != 'system' %}{{ raise_exception('Conversation roles must alternate') }}{% endif %}";
    let err = one(src).unwrap_err();
    assert_eq!(err.0, "Conversation roles must alternate");
}

/// A template that never ends runs out of fuel instead of holding a worker.
#[test]
fn an_endless_template_runs_out_of_fuel() {
    let src = "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}";
    assert!(one(src).is_err());
}

/// Python's `strftime` directives (expected texts from Python's
/// `datetime.utcfromtimestamp(1785024000).strftime`).
#[test]
fn strftime_formats_as_python() {
    assert_eq!(strftime(0, "%d %b %Y"), "01 Jan 1970");
    assert_eq!(
        strftime(1_785_024_000, "%d %b %Y|%A %j %B %y %H:%M:%S %e"),
        "26 Jul 2026|Sunday 207 July 26 00:00:00 26"
    );
    assert_eq!(strftime(1_785_024_000 + 3_723, "%H:%M:%S %% %q"), "01:02:03 % %q");
    for days in [0u64, 59, 60, 365, 10_957, 11_016, 20_000, 100_000] {
        let (y, m, d) = civil_from_days(days);
        assert_eq!(days_from_civil(y, m, d), days, "{y}-{m}-{d}");
    }
}

/// A template that does not compile is an error at construction.
/// A value that makes the engine panic (minijinja 2.24 slicing an empty
/// list backwards) refuses the request as a template error.
#[test]
fn an_engine_panic_is_a_template_error() {
    let err = render_with("{{ messages[::-1] }}", &[]).unwrap_err();
    assert_eq!(err.0, super::ENGINE_FAILED);
    assert_eq!(
        render_with("{{ messages[::-1] | length }}", &[m("user", "hi")]).unwrap(),
        "1"
    );
}

#[test]
fn a_broken_template_does_not_compile() {
    assert!(ChatTemplate::new("{% for m in messages %}", Vec::new()).is_err());
}

/// `trim` and `.strip()` strip what Python strips: its whitespace holds
/// U+001C to U+001F besides Unicode's (the expected texts are Python's
/// `str.strip` output); with characters given, only those.
#[test]
fn strip_and_trim_strip_pythons_whitespace() {
    let hi = |content| {
        render_with("[{{ messages[0]['content'] | trim }}|{{ messages[0]['content'].strip() }}|{{ messages[0]['content'].lstrip() }}|{{ messages[0]['content'].rstrip('\\x1f') }}|{{ 'xxaxx'.strip('x') }}]", &[ChatMessage::new("user", content)]).unwrap()
    };
    assert_eq!(
        hi("\u{1f} hi\u{a0}\u{1c}\n"),
        "[hi|hi|hi\u{a0}\u{1c}\n|\u{1f} hi\u{a0}\u{1c}\n|a]"
    );
    assert_eq!(hi("hi\u{1f}"), "[hi|hi|hi\u{1f}|hi|a]");
}

/// A conversation renders as `apply_chat_template` renders it: keys in the
/// caller's order, a message's reasoning under `reasoning_content` and
/// `thinking` whichever name it came by, and `continue_final_message` cut
/// after the last content, trailing spaces kept where the template keeps
/// them and dropped where it trims them.
#[test]
fn a_conversation_renders_as_apply_chat_template() {
    let t = ChatTemplate::new(
        "{% for m in messages %}[{{ m.reasoning_content }}|{{ m.thinking }}|{{ m | tojson }}]{% endfor %}",
        vec![],
    )
    .unwrap();
    let messages: Vec<Value> =
        serde_json::from_str(r#"[{"role": "assistant", "reasoning": "r", "content": "c"}]"#).unwrap();
    let c = Conversation {
        messages: &messages,
        ..Conversation::default()
    };
    assert_eq!(
        t.render_conversation(&c).unwrap(),
        r#"[r|r|{"thinking": "r", "role": "assistant", "reasoning": "r", "content": "c", "reasoning_content": "r"}]"#
    );
    for (template, kept) in [
        ("<{{ messages[0].content }}>", "<Sure, "),
        ("<{{ messages[0].content | trim }}>", "<Sure,"),
    ] {
        let t = ChatTemplate::new(template, vec![]).unwrap();
        let messages: Vec<Value> =
            serde_json::from_str(r#"[{"role": "assistant", "content": "Sure, "}]"#).unwrap();
        let c = Conversation {
            messages: &messages,
            continue_final_message: true,
            ..Conversation::default()
        };
        assert_eq!(t.render_conversation(&c).unwrap(), kept, "{template}");
    }
}

/// A template that reads a message in every way a map is read: fields by
/// name and by key, missing fields, iteration forwards and backwards,
/// length, truth, printing, `tojson`, Python's dict methods, equality,
/// filters over the list, and the strings' Python methods.
const MAP_READER: &str = "{% for m in messages %}[{{ m }}|{{ m | tojson }}|{{ m | length }}|{{ m.items() | list }}|{{ m.keys() | list }}|{{ m.values() | list }}|{{ m | list }}|{{ m | reverse | list }}|{{ m | dictsort }}|{{ 'thinking' in m }}|{{ 'name' in m }}|{{ m is mapping }}|{{ m.get('reasoning_content') }}|{{ m.get('name', 'none') }}|{{ m['role'] }}|{{ m[0] }}|{{ m.thinking is defined }}|{{ m.tool_calls is defined }}|{{ m.content is string }}|{{ m == messages[0] }}|{{ m != messages[-1] }}|{{ m | string }}|{% if m %}T{% endif %}|{{ m | first }}|{{ m.content | trim }}|{{ m.content.strip() }}|{{ m.content.lstrip('\\n') }}|{{ m.content.split('</think>')[-1] }}|{{ m.role + ': ' + m.content }}]\n{% endfor %}{{ messages | length }}|{{ messages | tojson }}|{{ messages | map(attribute='role') | join(',') }}|{{ messages | selectattr('reasoning_content') | list | length }}|{{ messages | rejectattr('thinking') | map(attribute='content') | list }}|{{ messages | groupby('role') | list | length }}|{{ messages[::-1] | map(attribute='role') | list }}|{{ messages[1:] | length }}";

/// Messages of every shape: with and without reasoning, empty, spaced,
/// Unicode, and a reasoning written into the content.
fn shapes() -> Vec<Vec<ChatMessage<'static>>> {
    let thought = |role, content, r| ChatMessage {
        role,
        content,
        reasoning: Some(r),
    };
    vec![
        vec![m("user", "hi")],
        vec![m("system", " Be brief.\n"), m("user", "")],
        vec![
            m("system", "S"),
            m("user", "Wetter in Köln? 🌧"),
            thought("assistant", "\n\nSonnig.", "Sie fragt nach dem Wetter.\n"),
            m("user", "\u{1f}und morgen?\u{a0}"),
        ],
        vec![
            m("user", "q"),
            m("assistant", "<think>\nr\n</think>\n\nanswer"),
            m("user", "<tool_response>x</tool_response>"),
            thought("assistant", "", ""),
        ],
        vec![
            m("user", "a"),
            m("assistant", "b"),
            m("tool", "{\"t\": 1}"),
            m("user", "c"),
        ],
    ]
}

/// A tool definition, for the templates that render tools.
fn tools() -> Vec<serde_json::Value> {
    vec![
        serde_json::json!({"type": "function", "function": {"name": "get_weather", "description": "Wetter für \"Köln\"", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}),
    ]
}

/// A message object answers every map operation as the serialized map it
/// replaced did: the same bytes, for every shape.
#[test]
fn a_message_object_renders_as_its_serialized_map() {
    let t = ChatTemplate::new(MAP_READER, vec![("bos_token".to_owned(), "<s>".to_owned())]).unwrap();
    for messages in shapes() {
        let before = t.render_serialized(&messages, None, true).unwrap();
        assert!(before.contains("True"), "{before}");
        assert_eq!(t.render(&messages, None, true).unwrap(), before);
    }
}

proptest::proptest! {
    /// Any conversation renders through message objects as through the
    /// serialized maps, and `trim` and `.strip()` leave what Python's
    /// `str.strip()` leaves, whether or not there is anything to strip.
    #[test]
    fn any_conversation_renders_as_its_serialized_maps(
        turns in proptest::collection::vec(
            (
                proptest::sample::select(vec!["system", "user", "assistant", "tool"]),
                "[ \\t\\n\\u{1c}\\u{1f}\\u{a0}a-z<>/{}\"é]{0,24}",
                proptest::option::of("[ \\na-z]{0,8}"),
            ),
            1..6,
        ),
    ) {
        let messages: Vec<ChatMessage<'_>> = turns
            .iter()
            .map(|(role, content, r)| ChatMessage { role, content, reasoning: r.as_deref() })
            .collect();
        let t = ChatTemplate::new(MAP_READER, Vec::new()).unwrap();
        proptest::prop_assert_eq!(
            t.render(&messages, None, false).map_err(|e| e.0),
            t.render_serialized(&messages, None, false).map_err(|e| e.0)
        );
        for (_, content, _) in &turns {
            let stripped = py_strip(content);
            proptest::prop_assert_eq!(
                render_with("{{ messages[0].content | trim }}|{{ messages[0].content.strip() }}", &[m("user", content)]).unwrap(),
                format!("{stripped}|{stripped}")
            );
        }
    }
}

/// A string marked safe comes out of `trim` and `.strip()` as a plain
/// string, as it did when they copied every string.
#[test]
fn a_safe_string_is_stripped_to_a_plain_one() {
    let safe = Value::from_safe_string("kept".to_owned());
    assert!(safe.is_safe());
    assert!(!stripped(&safe, "kept", "kept").is_safe());
    let plain = Value::from("kept");
    assert_eq!(stripped(&plain, "kept", "kept"), plain);
    assert_eq!(trim(Value::from(" x "), None).as_str(), Some("x"));
    assert_eq!(trim(Value::from(12), None).as_str(), Some("12"));
}

/// The real folders' templates (`CONTEXT_ASSEMBLER_HF_VOCAB`, when set)
/// render every shape through message objects as through the serialized
/// maps, with and without tools and the generation prompt; where a
/// template refuses a shape, both refuse it alike.
#[test]
fn real_templates_render_the_message_objects_as_the_serialized_maps() {
    let Some(templates) = real_templates() else {
        return;
    };
    let tools = tools();
    for &(family, t) in &templates {
        let mut rendered = 0;
        for messages in shapes() {
            for (tools, generate) in [(None, true), (Some(&tools[..]), false)] {
                let before = t.render_serialized(&messages, tools, generate).map_err(|e| e.0);
                rendered += usize::from(before.is_ok());
                assert_eq!(
                    t.render(&messages, tools, generate).map_err(|e| e.0),
                    before,
                    "{family}"
                );
            }
        }
        assert!(rendered >= 4, "{family}: {rendered} shapes rendered");
    }
}

/// A template that is not one of the known programs renders by the engine.
#[test]
fn an_unknown_template_renders_by_the_engine() {
    let t = ChatTemplate::new(MAP_READER, vec![("bos_token".to_owned(), "<s>".to_owned())]).unwrap();
    assert!(!t.renders_natively());
    let llama_like = "{% for m in messages %}{{ bos_token if loop.first }}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n{{ m.content | trim }}<|eot_id|>{% endfor %}";
    assert!(
        !ChatTemplate::new(llama_like, Vec::new())
            .unwrap()
            .renders_natively()
    );
}

/// The real folders' templates, each with the special tokens its folder
/// names, the folders loaded once for every test that reads them: `None`
/// without `CONTEXT_ASSEMBLER_HF_VOCAB` (which CI sets).
fn real_templates() -> Option<Vec<(&'static str, &'static ChatTemplate)>> {
    use crate::tokens::hf::HfModel;
    static LOADED: std::sync::OnceLock<Option<Vec<(&'static str, HfModel)>>> = std::sync::OnceLock::new();
    let folders = LOADED.get_or_init(|| {
        let Some(root) = std::env::var_os("CONTEXT_ASSEMBLER_HF_VOCAB") else {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI runs without CONTEXT_ASSEMBLER_HF_VOCAB"
            );
            eprintln!("CONTEXT_ASSEMBLER_HF_VOCAB not set: no real folder to check");
            return None;
        };
        let loaded = ["llama3_1", "qwen3", "gemma3", "deepseek_v3"]
            .into_iter()
            .map(|family| {
                let dir = std::path::Path::new(&root).join(family);
                (
                    family,
                    HfModel::load(&dir).unwrap_or_else(|e| panic!("{family}: {e}")),
                )
            })
            .collect();
        Some(loaded)
    });
    folders.as_ref().map(|folders| {
        folders
            .iter()
            .map(|(family, model)| (*family, model.template().expect("the folder's template")))
            .collect()
    })
}

/// Each real folder's template is a known program, rendered natively; every
/// shape renders as the engine renders it, a conversation the template
/// refuses is refused with the engine's message, and tools go to the engine.
#[test]
fn the_real_templates_render_natively_as_the_engine() {
    let Some(templates) = real_templates() else {
        return;
    };
    let tools = tools();
    for &(family, t) in &templates {
        assert!(t.renders_natively(), "{family}");
        let mut native = 0;
        for messages in shapes().iter().chain([&vec![m("user", "a"), m("user", "b")]]) {
            for generate in [true, false] {
                let engine = t.render_by_engine(messages, None, generate).map_err(|e| e.0);
                native += usize::from(t.native.as_ref().unwrap().render(messages, generate).is_some());
                assert_eq!(
                    t.render(messages, None, generate).map_err(|e| e.0),
                    engine,
                    "{family}"
                );
            }
            assert_eq!(
                t.render(messages, Some(&tools), true).map_err(|e| e.0),
                t.render_by_engine(messages, Some(&tools), true).map_err(|e| e.0),
                "{family}"
            );
        }
        assert!(native >= 8, "{family}: {native} shapes rendered natively");
        // Past the bound, the engine renders (and its fuel decides).
        let long: Vec<ChatMessage<'_>> = (0..=native::MAX_MESSAGES)
            .map(|i| m(if i % 2 == 0 { "user" } else { "assistant" }, "hi"))
            .collect();
        let n = t.native.as_ref().unwrap();
        assert!(
            n.render(&long[..native::MAX_MESSAGES], true).is_some(),
            "{family}"
        );
        assert!(n.render(&long, true).is_none(), "{family}");
    }
    // Gemma 3 refuses roles that do not alternate: the engine says so.
    let gemma = &templates.iter().find(|(f, _)| *f == "gemma3").unwrap().1;
    let refused = gemma
        .render(&[m("user", "a"), m("user", "b")], None, true)
        .unwrap_err();
    assert!(refused.0.contains("must alternate"), "{refused}");
}

/// A native renderer is kept only where it renders the probes as the
/// engine does: one family's renderer beside another family's template is
/// refused.
#[test]
fn a_native_renderer_that_disagrees_with_the_engine_is_not_kept() {
    let Some(templates) = real_templates() else {
        return;
    };
    for &(family, t) in &templates {
        let engine = |m: &[ChatMessage<'_>], generate| t.render_by_engine(m, None, generate).ok();
        assert!(t.native.as_ref().unwrap().agrees(engine), "{family}");
        for (other, o) in templates.iter().filter(|(f, _)| *f != family) {
            assert!(
                !o.native.as_ref().unwrap().agrees(engine),
                "{other}'s renderer on {family}'s template"
            );
        }
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(400))]
    /// Any conversation renders natively as the engine renders it, with
    /// each real folder's template: every role in any order, texts with
    /// Python's whitespace at either end, reasoning given or written into
    /// the content, tool results that look like queries.
    #[test]
    fn native_renders_as_the_engine_on_any_conversation(
        turns in proptest::collection::vec(
            (
                proptest::sample::select(vec!["system", "user", "assistant", "tool", "developer"]),
                proptest::sample::select(vec!["", " ", "\n", "\n\n", "\u{a0}", "\u{1f}", "x", "<think>", "</think>", "<tool_response>", "</tool_response>", "é", "{}"]),
                "[ \\na-z]{0,6}",
                proptest::sample::select(vec!["", " ", "\n", "\u{3000}", "</think>", "</tool_response>", "y"]),
                proptest::option::of("[ \\na-z<>/]{0,8}"),
            ),
            0..9,
        ),
        alternate in proptest::bool::ANY,
        generate in proptest::bool::ANY,
    ) {
        let Some(templates) = real_templates() else {
            return Ok(());
        };
        let contents: Vec<String> = turns.iter().map(|(_, a, b, c, _)| format!("{a}{b}{c}")).collect();
        let messages: Vec<ChatMessage<'_>> = turns
            .iter()
            .zip(&contents)
            .enumerate()
            .map(|(i, ((role, _, _, _, r), content))| ChatMessage {
                // Half the conversations alternate user and assistant after
                // a system prompt, as Gemma 3's template requires.
                role: match (alternate, i) {
                    (false, _) => role,
                    (true, 0) if *role == "system" => "system",
                    (true, i) if i % 2 == usize::from(turns[0].0 == "system") => "user",
                    (true, _) => "assistant",
                },
                content,
                reasoning: r.as_deref(),
            })
            .collect();
        for &(family, t) in &templates {
            let engine = t.render_by_engine(&messages, None, generate).map_err(|e| e.0);
            if let Some(text) = t.native.as_ref().unwrap().render(&messages, generate) {
                proptest::prop_assert_eq!(Ok(text), engine, "{}", family);
            }
        }
    }
}
