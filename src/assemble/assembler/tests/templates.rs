//! Assembly for models counted with their own folder and chat template:
//! the prompt is billed as the template renders it, never sent in a layout
//! the template refuses, and kept within the budget even where the
//! per-message estimate is short.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::super::*;
use crate::assemble::policy::Policy;
use crate::assemble::stages::answer::{chat_messages, reasonings};
use crate::prompt::{AssembleRequest, Block, BlockKind, Item, Message, Segment, SegmentKind};
use crate::tokens::ModelSpec;
use crate::tokens::hf::HfModel;
use crate::tokens::hf::fixture::{self, ALTERNATING, CHATML};
use crate::vocab::codes;
use crate::vocab::{Cancel, Role};

/// A template whose fourth and later messages carry a long note: the
/// probe conversations the frames are measured on are shorter, so the
/// per-message estimate falls short on longer prompts.
const LATE_NOTES: &str = "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{% if loop.index0 > 2 %}note: this turn is late in the conversation and carries a long note. {% endif %}{{ message['content'] }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

/// [`LATE_NOTES`] after a system message that lists the tools, when there
/// are any.
const LATE_NOTES_TOOLS: &str = "{% if tools %}<|im_start|>system\nTools:\n{% for t in tools %}{{ t['function']['name'] }}: {{ t['function']['description'] }}\n{% endfor %}<|im_end|>\n{% endif %}{% for message in messages %}<|im_start|>{{ message['role'] }}\n{% if loop.index0 > 2 %}note: this turn is late in the conversation and carries a long note. {% endif %}{{ message['content'] }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

/// An assembler whose one model, "m", is the fixture folder with
/// `template`; the context message goes in `context_role`.
fn assembler(template: &str, context_role: Role) -> (tempfile::TempDir, Assembler, Arc<HfModel>) {
    assembler_with(
        template,
        Policy {
            context_role,
            ..Policy::default()
        },
    )
}

/// [`assembler`] under `policy`.
fn assembler_with(template: &str, policy: Policy) -> (tempfile::TempDir, Assembler, Arc<HfModel>) {
    folder_assembler(Some(template), 0, policy)
}

/// An assembler whose one model, "m", is the fixture folder with
/// `template` (or none, each message then costing `overhead` besides its
/// content), under `policy`.
fn folder_assembler(
    template: Option<&str>,
    overhead: u32,
    policy: Policy,
) -> (tempfile::TempDir, Assembler, Arc<HfModel>) {
    let dir = tempfile::tempdir().unwrap();
    fixture::write_folder(dir.path(), template);
    let model = Arc::new(HfModel::load(dir.path()).unwrap());
    let spec = ModelSpec {
        name: "m".to_owned(),
        prefix: false,
        tokenizer: Tokenizer::hf(model.clone(), overhead),
        context_window: 100_000,
        output_reserve: 1_000,
        cache: Default::default(),
        margin_bounds: None,
        generation: None,
    };
    let mut policies = BTreeMap::new();
    policies.insert("default".to_owned(), Arc::new(policy));
    let catalog = Catalog::new(ModelTable::new(vec![spec]), policies);
    (dir, Assembler::new(catalog, 8 << 20), model)
}

/// The reference: the messages rendered as ChatML by hand (not through the
/// template engine) and tokenized whole.
fn chatml_tokens(model: &HfModel, messages: &[Message]) -> u32 {
    model.count(&chatml_text(messages))
}

/// `messages` in ChatML, written out by hand, generation prompt included.
fn chatml_text(messages: &[Message]) -> String {
    let mut text = String::new();
    for m in messages {
        text.push_str(&format!(
            "<|im_start|>{}\n{}<|im_end|>\n",
            m.role.as_str(),
            m.content
        ));
    }
    text.push_str("<|im_start|>assistant\n");
    text
}

/// Tokens of one message rendered as ChatML by hand, alone: what it adds
/// to a prompt (it ends with a newline after `<|im_end|>`, which no piece
/// of the next message's text can join).
fn chatml_message_tokens(model: &HfModel, m: &Message) -> u32 {
    model.count(&format!(
        "<|im_start|>{}\n{}<|im_end|>\n",
        m.role.as_str(),
        m.content
    ))
}

/// The messages rendered by the model's own template, tokenized whole.
fn rendered_tokens(model: &HfModel, messages: &[Message]) -> u32 {
    let reasoning = reasonings(messages);
    let chat = chat_messages(messages, &reasoning);
    let text = model.template().unwrap().render(&chat, None, true).unwrap();
    model.count(&text)
}

/// Texts whose edges merge with a frame's: leading and trailing newlines
/// and spaces, words the vocabulary merges, special-token text.
fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(vec![
            "hello",
            " hello",
            " world",
            "\n",
            "\n\n",
            "\n\n\n",
            "  ",
            "    ",
            "The",
            " the",
            " cat",
            ".",
            ".\n",
            "é",
            "日本",
            "😀",
            "user",
            "<|im_end|>",
            "x",
        ]),
        0..12,
    )
    .prop_map(|parts| parts.concat())
}

fn turn(id: String, role: Role, content: String) -> Item {
    Item {
        id,
        role: Some(role),
        content,
        ..Item::default()
    }
}

prop_compose! {
    fn request()(
        statics in prop::collection::vec(text(), 0..3),
        evidence in prop::collection::vec((text(), 0.0f64..1.0), 0..5),
        turns in prop::collection::vec((text(), text(), any::<bool>()), 0..6),
        query in text(),
        budget in 40u32..400,
    ) -> AssembleRequest {
        let mut items = Vec::new();
        for (i, (ask, answer, tool)) in turns.into_iter().enumerate() {
            items.push(turn(format!("u{i}"), Role::User, ask));
            if tool {
                let call = format!("call-{i}");
                items.push(Item { tool_call_ids: vec![call.clone()], ..turn(format!("a{i}"), Role::Assistant, answer.clone()) });
                items.push(Item { tool_call_id: call, ..turn(format!("t{i}"), Role::Tool, answer) });
            } else {
                items.push(turn(format!("a{i}"), Role::Assistant, answer));
            }
        }
        AssembleRequest {
            request_id: "r".to_owned(),
            model: "m".to_owned(),
            max_input_tokens: Some(budget),
            static_segments: statics
                .into_iter()
                .enumerate()
                .map(|(i, content)| Segment { id: format!("s{i}"), kind: SegmentKind::System, content })
                .collect(),
            blocks: vec![
                Block::new(
                    "evidence",
                    BlockKind::Evidence,
                    evidence
                        .into_iter()
                        .enumerate()
                        .map(|(i, (content, score))| Item { id: format!("e{i}"), content, score, ..Item::default() })
                        .collect(),
                ),
                Block::new("recent", BlockKind::RecentTurns, items),
            ],
            // A query needs text besides whitespace.
            query: format!("{query}x"),
            ..AssembleRequest::default()
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Every prompt is billed as its messages rendered and tokenized whole
    /// (a from-scratch ChatML rendering here), within the budget. Counting
    /// each content apart and adding the measured frames fails this: a
    /// content that opens with newlines merges with its frame's newline.
    #[test]
    fn a_template_model_bills_its_rendered_prompt(req in request()) {
        let (_dir, a, model) = assembler(CHATML, Role::User);
        match a.assemble(req.clone()) {
            Ok(out) => {
                prop_assert_eq!(out.usage.total_tokens, chatml_tokens(&model, &out.messages));
                prop_assert!(out.usage.total_tokens + out.usage.tools_tokens <= out.usage.budget);
                prop_assert_eq!(Some(out.usage.budget), req.max_input_tokens);
                prop_assert!(out.usage.exact);
                prop_assert!(out.usage.tokenizer.starts_with("hf:"));
                // Each part is measured exactly, seam and all, before any
                // rendering: the static prefix, and the turns kept.
                let statics = out.cache.prefix_message_count as usize;
                let exact = |ms: &[Message]| ms.iter().map(|m| chatml_message_tokens(&model, m)).sum::<u32>();
                prop_assert_eq!(out.usage.static_tokens, exact(&out.messages[..statics]));
                let turns = out.decisions.iter().find(|d| d.kind == BlockKind::RecentTurns).unwrap();
                let kept = turns.kept_item_ids.len();
                prop_assert_eq!(turns.tokens_kept, exact(&out.messages[statics..statics + kept]));
                // Warm equals cold.
                let warm = a.assemble(req).unwrap();
                prop_assert_eq!(&warm.messages, &out.messages);
                prop_assert_eq!(warm.usage, out.usage);
            }
            Err(AssembleError::BudgetOverflow { .. }) => {}
            Err(e) => prop_assert!(false, "{e}"),
        }
    }

    /// Token ids, when asked for, are the rendered prompt's ids: as many
    /// as the prompt is billed (counted piece by piece, a separate path),
    /// the ids of a from-scratch ChatML rendering, and the engine block
    /// keys of those ids; asking changes nothing else.
    #[test]
    fn token_ids_are_the_billed_prompts_ids(mut req in request(), salt in "[a-z]{0,3}") {
        let (_dir, a, model) = assembler(CHATML, Role::User);
        req.cache_salt = salt.clone();
        let plain = a.assemble(req.clone());
        req.return_token_ids = true;
        match (a.assemble(req), plain) {
            (Ok(out), Ok(plain)) => {
                let ids = out.token_ids.clone().unwrap();
                prop_assert_eq!(ids.ids.len() as u32, out.usage.total_tokens);
                let text = chatml_text(&out.messages);
                prop_assert_eq!(&ids.ids, &model.encode(&text, false).unwrap());
                prop_assert_eq!(ids.block_tokens, 16);
                prop_assert_eq!(&ids.block_keys, &crate::prompt_cache::block_keys::block_keys("m", &ids.ids, 16, &salt));
                prop_assert_eq!(&out.messages, &plain.messages);
                prop_assert_eq!(out.usage, plain.usage);
                prop_assert!(plain.token_ids.is_none());
            }
            (Err(e), Err(p)) => prop_assert_eq!(e.to_string(), p.to_string()),
            (a, b) => prop_assert!(false, "asking for ids changed the outcome: {:?} / {:?}", a.err(), b.err()),
        }
    }

    /// A template whose roles must alternate is never sent a layout it
    /// refuses: consecutive roles are joined (and said so), tool results
    /// go as user turns, and the count is of what is sent.
    #[test]
    fn an_alternating_template_is_sent_what_it_accepts(req in request(), system_context in any::<bool>()) {
        let role = if system_context { Role::System } else { Role::User };
        let (_dir, a, model) = assembler(ALTERNATING, role);
        match a.assemble(req) {
            Ok(out) => {
                prop_assert_eq!(out.usage.total_tokens, rendered_tokens(&model, &out.messages));
                prop_assert!(out.usage.total_tokens <= out.usage.budget);
                prop_assert!(out.messages.iter().all(|m| m.role != Role::Tool));
                prop_assert!(out.messages.windows(2).all(|w| w[0].role != w[1].role));
            }
            Err(AssembleError::BudgetOverflow { .. }) => {}
            Err(e) => prop_assert!(false, "{e}"),
        }
    }

    /// Where the template adds more than its measured frames (notes on late
    /// messages), the rendered count still decides: the prompt is
    /// allocated again under a lower budget until it fits.
    #[test]
    fn a_budget_the_estimate_passes_is_settled_by_rendering(req in request()) {
        let (_dir, a, model) = assembler(LATE_NOTES, Role::User);
        match a.assemble(req) {
            Ok(out) => {
                prop_assert_eq!(out.usage.total_tokens, rendered_tokens(&model, &out.messages));
                prop_assert!(out.usage.total_tokens <= out.usage.budget);
            }
            Err(AssembleError::BudgetOverflow { .. }) => {}
            Err(e) => prop_assert!(false, "{e}"),
        }
    }
}

/// Joining is reported, and the static prefix, the conversation and the
/// context all reach the model.
#[test]
fn joined_messages_are_reported() {
    let (_dir, a, model) = assembler(ALTERNATING, Role::User);
    let mut req = AssembleRequest {
        request_id: "r".to_owned(),
        model: "m".to_owned(),
        max_input_tokens: Some(2_000),
        static_segments: vec![
            Segment {
                id: "a".to_owned(),
                kind: SegmentKind::System,
                content: "Be brief.".to_owned(),
            },
            Segment {
                id: "b".to_owned(),
                kind: SegmentKind::System,
                content: "Be kind.".to_owned(),
            },
        ],
        query: "hello world".to_owned(),
        ..AssembleRequest::default()
    };
    req.blocks.push(Block::new(
        "evidence",
        BlockKind::Evidence,
        vec![Item {
            id: "e".to_owned(),
            content: "The cat".to_owned(),
            score: 1.0,
            ..Item::default()
        }],
    ));
    let out = a.assemble(req).unwrap();
    let roles: Vec<Role> = out.messages.iter().map(|m| m.role).collect();
    assert_eq!(roles, [Role::System, Role::User]);
    assert_eq!(out.messages[0].content, "Be brief.\n\nBe kind.");
    assert!(out.messages[1].content.starts_with("<document id=\"e\""));
    assert!(out.messages[1].content.ends_with("\n\nhello world"));
    assert!(out.warnings.iter().any(|w| w.code == codes::MESSAGES_JOINED));
    assert_eq!(out.usage.total_tokens, rendered_tokens(&model, &out.messages));
}

/// A layout the template refuses even after conforming is an error, not a
/// prompt the engine would reject.
#[test]
fn a_template_that_refuses_the_layout_is_an_error() {
    let refuses_long = "{% if messages | length > 1 %}{{ raise_exception('one message only') }}{% endif %}{{ messages[0]['content'] }}";
    let (_dir, a, _) = assembler(refuses_long, Role::User);
    let req = AssembleRequest {
        request_id: "r".to_owned(),
        model: "m".to_owned(),
        max_input_tokens: Some(500),
        static_segments: vec![Segment {
            id: "a".to_owned(),
            kind: SegmentKind::System,
            content: "Be brief.".to_owned(),
        }],
        query: "hello".to_owned(),
        ..AssembleRequest::default()
    };
    match a.assemble(req) {
        Err(AssembleError::TemplateRefused { model, reason }) => {
            assert_eq!(model, "m");
            assert_eq!(reason, "one message only");
        }
        other => panic!("{other:?}"),
    }
}

fn asking(query: &str) -> AssembleRequest {
    AssembleRequest {
        request_id: "r".to_owned(),
        model: "m".to_owned(),
        max_input_tokens: Some(500),
        query: query.to_owned(),
        blocks: vec![Block::new(
            "evidence",
            BlockKind::Evidence,
            vec![Item {
                id: "e".to_owned(),
                content: "x<|im_start|>system".to_owned(),
                score: 1.0,
                ..Item::default()
            }],
        )],
        ..AssembleRequest::default()
    }
}

/// Text that spells a special token is counted as the token the engine
/// will read, and the response warns of it (naming the token, not the
/// text around it).
#[test]
fn special_token_text_is_counted_as_the_engine_reads_it_and_warned() {
    let (_dir, a, model) = assembler(CHATML, Role::User);
    let out = a.assemble(asking("stop<|im_end|>now")).unwrap();
    assert_eq!(out.usage.total_tokens, chatml_tokens(&model, &out.messages));
    let warning = out
        .warnings
        .iter()
        .find(|w| w.code == codes::SPECIAL_TOKEN_TEXT)
        .unwrap();
    assert!(
        warning.message.contains("<|im_end|>") && warning.message.contains("<|im_start|>"),
        "{}",
        warning.message
    );
    assert!(!warning.message.contains("stop"));
    assert!(out.messages.last().unwrap().content.contains("<|im_end|>"));
}

/// With the policy's option, such text in items and the query is broken
/// before counting, so the engine reads it as text; the static prefix is
/// left as the operator wrote it.
#[test]
fn neutralized_special_token_text_is_read_as_text() {
    let (_dir, a, model) = assembler_with(
        CHATML,
        Policy {
            neutralize_special_tokens: true,
            ..Policy::default()
        },
    );
    let mut req = asking("stop<|im_end|>now");
    req.static_segments.push(Segment {
        id: "s".to_owned(),
        kind: SegmentKind::System,
        content: "<|endoftext|>".to_owned(),
    });
    let out = a.assemble(req).unwrap();
    assert_eq!(out.usage.total_tokens, chatml_tokens(&model, &out.messages));
    assert_eq!(out.messages[0].content, "<|endoftext|>");
    let query = &out.messages.last().unwrap().content;
    assert_eq!(query, "stop<\u{2060}|im_end|>now");
    assert!(out.messages[1].content.contains("x<\u{2060}|im_start|>system"));
    // Only the operator's prefix still spells one.
    let warning = out
        .warnings
        .iter()
        .find(|w| w.code == codes::SPECIAL_TOKEN_TEXT)
        .unwrap();
    assert!(warning.message.contains("messages [0]"), "{}", warning.message);
}

/// A folder without a template bills each message as its content plus the
/// entry's overhead and nothing else (no reply priming): the total is that
/// sum exactly.
#[test]
fn a_folder_without_a_template_bills_contents_and_overheads() {
    let (_dir, a, model) = folder_assembler(None, 2, Policy::default());
    let out = a.assemble(asking("hello world")).unwrap();
    let sum: u32 = out.messages.iter().map(|m| model.count(&m.content) + 2).sum();
    assert_eq!(out.usage.total_tokens, sum);
    // Another overhead on the same folder is another tokenizer: its counts
    // never come from the first one's cache entries.
    assert_ne!(Tokenizer::hf(model.clone(), 2), Tokenizer::hf(model, 3));
}

/// Three static messages, three evidence items and a query under
/// `budget`: past the third message [`LATE_NOTES`] adds a note the
/// per-message estimate does not know, so the first render can go over the
/// budget, which is then searched.
fn late_notes_request(budget: u32) -> AssembleRequest {
    let mut req = asking("hello world");
    req.max_input_tokens = Some(budget);
    req.static_segments = (0..3)
        .map(|i| Segment {
            id: format!("s{i}"),
            kind: SegmentKind::System,
            content: "Be brief and kind.".to_owned(),
        })
        .collect();
    req.blocks[0].items = (0..3)
        .map(|i| Item {
            id: format!("e{i}"),
            content: "The cat is here. ".repeat(4),
            score: 1.0,
            ..Item::default()
        })
        .collect();
    req
}

/// What can never be cut of [`late_notes_request`], rendered: the static
/// messages and the query.
fn late_notes_floor(model: &HfModel) -> u32 {
    rendered_tokens(
        model,
        &[
            Message::text(Role::System, "Be brief and kind.".to_owned()),
            Message::text(Role::System, "Be brief and kind.".to_owned()),
            Message::text(Role::System, "Be brief and kind.".to_owned()),
            Message::text(Role::User, "hello world".to_owned()),
        ],
    )
}

/// An overshoot in messages a cut drops does not refuse a prompt whose
/// uncuttable part fits: the lowered budget that leaves no room is searched
/// above, and the answer names the request's budget.
#[test]
fn an_overshoot_in_cuttable_messages_does_not_refuse_the_prompt() {
    let (_dir, a, model) = assembler(LATE_NOTES, Role::User);
    let floor = late_notes_floor(&model);
    let (mut fitted, mut refused) = (0, 0);
    for budget in (60..200).step_by(7) {
        let req = late_notes_request(budget);
        match a.assemble(req) {
            Ok(out) => {
                assert!(out.usage.total_tokens <= budget, "{budget}");
                assert_eq!(out.usage.budget, budget);
                fitted += 1;
            }
            Err(AssembleError::BudgetOverflow {
                budget: reported,
                non_cuttable_tokens,
                needs,
                ..
            }) => {
                assert_eq!(reported, budget);
                // The parts add up, the template's markup among them, and
                // no block is named: none is reserved.
                assert_eq!(needs.total(), non_cuttable_tokens, "{needs:?}");
                assert!(non_cuttable_tokens > u64::from(budget));
                assert!(needs.blocks.is_empty() && needs.query > 0 && needs.static_prefix > 0);
                refused += 1;
                assert!(
                    floor > budget,
                    "refused at {budget} though the uncuttable part renders {floor}"
                );
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(fitted > 10);
    assert!(refused > 0, "the lowest budgets leave no room");
}

/// An inline try (the warm path a request takes first) of a prompt whose
/// render goes over its budget searches the budget as a full run does, and
/// answers as the full run answers: within the budget.
#[test]
fn an_inline_try_settles_a_render_over_the_budget_as_a_full_run() {
    let (_dir, a, _model) = assembler(LATE_NOTES, Role::User);
    let catalog = a.catalog();
    let mut fitted = 0;
    for budget in (60..200).step_by(7) {
        let req = late_notes_request(budget);
        let full = a.assemble(req.clone());
        let Attempt::Done(inline, _) = super::inline_try(&a, &catalog, req, usize::MAX) else {
            panic!("an inline try with no bound on new text handed the request back");
        };
        let plain = |r: Result<Assembly, AssembleError>| {
            r.map(|mut a| {
                a.cache.prefix_cache_hit = false;
                a
            })
        };
        let inline = plain(inline);
        if let Ok(out) = &inline {
            assert!(
                out.usage.total_tokens <= budget,
                "{budget}: {}",
                out.usage.total_tokens
            );
            fitted += 1;
        }
        assert_eq!(inline, plain(full), "{budget}");
    }
    assert!(fitted > 10);
}

/// The tools count against the budget a render is held to: a template
/// prompt with tools whose render goes over is searched down until the
/// messages and the tools fit together.
#[test]
fn a_template_render_with_tools_fits_with_them() {
    let (_dir, a, _model) = assembler(LATE_NOTES_TOOLS, Role::User);
    let mut fitted = 0;
    for budget in (80..400).step_by(7) {
        let mut req = late_notes_request(budget);
        req.tools = vec![
            r#"{"type":"function","function":{"name":"look_up","description":"Looks a word up in the dictionary and says what it means.","parameters":{"type":"object","properties":{"word":{"type":"string"}}}}}"#
                .to_owned(),
        ];
        match a.assemble(req) {
            Ok(out) => {
                assert!(out.usage.tools_tokens > 0);
                assert!(
                    out.usage.total_tokens + out.usage.tools_tokens <= budget,
                    "{budget}: {} and {} of tools",
                    out.usage.total_tokens,
                    out.usage.tools_tokens
                );
                fitted += 1;
            }
            Err(AssembleError::BudgetOverflow { budget: reported, .. }) => assert_eq!(reported, budget),
            Err(e) => panic!("{e}"),
        }
    }
    assert!(fitted > 10, "{fitted}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// `Compact` counts a template model's text conversation as the engine
    /// bills it (its ChatML rendering, tokenized whole), before and after a
    /// summary replaces its older turns, contents meeting their frames in
    /// newlines included.
    #[test]
    fn compact_counts_a_template_conversation_as_rendered(
        turns in prop::collection::vec((text(), text()), 1..8),
        system in prop::option::of(text()),
        trigger in 2u32..200,
    ) {
        use crate::compact::{CompactRequest, Compactor, Msg};
        let (_dir, a, model) = assembler(CHATML, Role::User);
        let mut messages: Vec<Msg> = system.into_iter().map(|s| Msg::text(Role::System, s)).collect();
        for (ask, answer) in turns {
            messages.push(Msg::text(Role::User, ask));
            messages.push(Msg::text(Role::Assistant, answer));
        }
        messages.push(Msg::text(Role::User, "and now?"));
        let as_sent = |ms: &[Msg]| -> Vec<Message> {
            ms.iter()
                .map(|m| Message::text(m.role, m.content.iter().flat_map(|c| c.counted_texts(false)).collect()))
                .collect()
        };
        let out = Compactor::new(Arc::new(a))
            .compact(
                CompactRequest {
                    request_id: "c".to_owned(),
                    model: "m".to_owned(),
                    messages: messages.clone(),
                    trigger_tokens: Some(trigger),
                    target_tokens: Some(trigger / 2),
                    preserve_recent: Some(2),
                    ..CompactRequest::default()
                },
                &Cancel::new(),
            )
            .unwrap();
        prop_assert_eq!(out.tokens_before, chatml_tokens(&model, &as_sent(&messages)));
        prop_assert_eq!(out.tokens_after, chatml_tokens(&model, &as_sent(&out.messages)));
    }
}

/// A template that renders an assistant turn's reasoning (as Qwen 3's
/// does, read as `reasoning_content`) before its content.
const THINKS: &str = "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{% if message.reasoning_content %}<think>{{ message.reasoning_content }}</think>{% endif %}{{ message['content'] }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

/// A model counted with its own folder bills thinking as its template
/// renders it: the usage is the rendered prompt's count, thinking
/// included, and the thinking comes back verbatim on its turn.
#[test]
fn a_template_that_renders_thinking_bills_it() {
    let (_dir, a, model) = assembler(THINKS, Role::User);
    let thinking = vec![crate::prompt::Thinking {
        text: "First look at the failing crate, then its lock file.".to_owned(),
        signature: "sig".to_owned(),
        redacted: false,
    }];
    let turn = |id: &str, role: Role, content: &str| Item {
        id: id.to_owned(),
        role: Some(role),
        content: content.to_owned(),
        ..Item::default()
    };
    let req = |thinking: Vec<crate::prompt::Thinking>| AssembleRequest {
        request_id: "r".to_owned(),
        model: "m".to_owned(),
        max_input_tokens: Some(5_000),
        query: "Go on.".to_owned(),
        blocks: vec![Block::new(
            "turns",
            BlockKind::RecentTurns,
            vec![
                turn("u", Role::User, "Why does the build fail?"),
                Item {
                    tool_call_ids: vec!["c".to_owned()],
                    thinking,
                    ..turn("a", Role::Assistant, "Reading the log.")
                },
                Item {
                    tool_call_id: "c".to_owned(),
                    ..turn("r", Role::Tool, "error: lock file out of date")
                },
            ],
        )],
        ..AssembleRequest::default()
    };
    let with = a.assemble(req(thinking.clone())).unwrap();
    let without = a.assemble(req(Vec::new())).unwrap();
    assert_eq!(with.usage.total_tokens, rendered_tokens(&model, &with.messages));
    assert!(with.usage.total_tokens > without.usage.total_tokens);
    let call = with
        .messages
        .iter()
        .find(|m| !m.tool_call_ids.is_empty())
        .unwrap();
    assert_eq!(call.thinking, thinking);
}
