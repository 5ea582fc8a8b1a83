//! The fingerprint and the divergence report through whole assemblies.

use proptest::prelude::*;

use crate::assemble::{AssembleError, Assembler};
use crate::prompt::{
    AssembleRequest, Assembly, Block, BlockKind, Change, Item, PartKind, Segment, SegmentKind,
};
use crate::prompt_cache::fingerprint::MAX_BYTES;
use crate::vocab::Role;

fn asm() -> Assembler {
    Assembler::new(crate::config::default_catalog(), 8 << 20)
}

fn turn(id: &str, role: Role, content: &str) -> Item {
    Item {
        id: id.to_owned(),
        role: Some(role),
        content: content.to_owned(),
        ..Item::default()
    }
}

fn evidence(id: &str, content: &str, score: f64) -> Item {
    Item {
        id: id.to_owned(),
        content: content.to_owned(),
        score,
        ..Item::default()
    }
}

/// A session's request after `turns` turns, with evidence `docs`.
fn request(turns: usize, docs: &[(&str, &str)], system: &str) -> AssembleRequest {
    let conversation = (0..turns)
        .map(|i| {
            let role = if i % 2 == 0 { Role::User } else { Role::Assistant };
            turn(
                &format!("t{i}"),
                role,
                &format!("Turn {i} of the conversation about refunds."),
            )
        })
        .collect();
    let docs = docs
        .iter()
        .enumerate()
        .map(|(i, (id, text))| evidence(id, text, 1.0 - i as f64 / 10.0))
        .collect();
    AssembleRequest {
        request_id: "r".to_owned(),
        model: "gpt-4o".to_owned(),
        static_segments: vec![
            Segment {
                id: "sys".to_owned(),
                kind: SegmentKind::System,
                content: system.to_owned(),
            },
            Segment {
                id: "policy".to_owned(),
                kind: SegmentKind::Policy,
                content: "Answer from the evidence only.".to_owned(),
            },
        ],
        blocks: vec![
            Block::new("history", BlockKind::RecentTurns, conversation),
            Block::new("docs", BlockKind::Evidence, docs),
        ],
        query: format!("Question number {turns}?"),
        session_id: "s".to_owned(),
        ..AssembleRequest::default()
    }
}

const SYSTEM: &str = "You are a careful assistant.";
const DOCS: [(&str, &str); 2] = [
    ("d1", "Refunds are granted within 30 days."),
    ("d2", "Shipping is free above 50 euros."),
];

/// `next` assembled with `previous`'s fingerprint.
fn after(a: &Assembler, previous: &Assembly, mut next: AssembleRequest) -> Assembly {
    next.previous_fingerprint = previous.fingerprint.clone();
    a.assemble(next).unwrap()
}

#[test]
fn an_identical_request_does_not_diverge() {
    let a = asm();
    let first = a.assemble(request(4, &DOCS, SYSTEM)).unwrap();
    assert!(first.divergence.is_none(), "no previous fingerprint, no report");
    assert!(!first.fingerprint.is_empty() && first.fingerprint.len() <= MAX_BYTES);
    let again = after(&a, &first, request(4, &DOCS, SYSTEM));
    let d = again.divergence.unwrap();
    assert_eq!(d.change, Change::None);
    assert_eq!(d.kind, None);
    assert_eq!(again.fingerprint, first.fingerprint);
    // The shared tokens are the whole prompt (within the context message's
    // seams, which are counted per item).
    let total = first.usage.total_tokens;
    assert!(
        d.token_offset <= total && d.token_offset + 8 >= total,
        "{} of {total}",
        d.token_offset
    );
}

#[test]
fn a_session_that_grows_appends() {
    let a = asm();
    let first = a.assemble(request(4, &DOCS, SYSTEM)).unwrap();
    let next = after(&a, &first, request(6, &DOCS, SYSTEM));
    let d = next.divergence.unwrap();
    assert_eq!(d.change, Change::Appended);
    assert_eq!(d.kind, Some(PartKind::Turn));
    assert_eq!(d.id, "t4", "the first new turn");
    // Two static messages, four turns: the new turn is message 6.
    assert_eq!(d.message_index, 6);
    assert!(d.token_offset > 0);
}

#[test]
fn a_timestamp_in_the_system_prompt_is_named() {
    let a = asm();
    let first = a
        .assemble(request(2, &DOCS, "You are careful. Now: 2026-11-27T08:00:00Z"))
        .unwrap();
    let next = after(
        &a,
        &first,
        request(2, &DOCS, "You are careful. Now: 2026-11-27T08:00:05Z"),
    );
    let d = next.divergence.unwrap();
    assert_eq!(d.change, Change::VolatileValue);
    assert_eq!(
        (d.kind, d.id.as_str(), d.message_index, d.token_offset),
        (Some(PartKind::System), "sys", 0, 0)
    );
    // Without a volatile value, a changed system prompt is just that.
    let plain = after(&a, &first, request(2, &DOCS, "You are careful."));
    assert_eq!(plain.divergence.unwrap().change, Change::SystemChanged);
}

#[test]
fn a_changed_tool_comes_first() {
    let a = asm();
    let with = |tool: &str| AssembleRequest {
        tools: vec![tool.to_owned()],
        ..request(2, &DOCS, SYSTEM)
    };
    let first = a.assemble(with(r#"{"name":"refund","parameters":{}}"#)).unwrap();
    let next = after(&a, &first, with(r#"{"name":"refund2","parameters":{}}"#));
    let d = next.divergence.unwrap();
    assert_eq!(
        (d.change, d.kind, d.token_offset),
        (Change::ToolsChanged, Some(PartKind::Tools), 0)
    );
}

#[test]
fn a_new_evidence_item_is_an_addition_in_the_context() {
    let a = asm();
    let first = a.assemble(request(2, &DOCS, SYSTEM)).unwrap();
    let more = [DOCS[0], ("d9", "Gift cards are not refunded."), DOCS[1]];
    let next = after(&a, &first, request(2, &more, SYSTEM));
    let d = next.divergence.unwrap();
    assert_eq!(d.change, Change::ItemAdded);
    assert_eq!(d.kind, Some(PartKind::Evidence));
}

#[test]
fn another_model_or_salt_is_another_prompt() {
    let a = asm();
    let first = a.assemble(request(2, &DOCS, SYSTEM)).unwrap();
    let salted = AssembleRequest {
        cache_salt: "tenant-b".to_owned(),
        ..request(2, &DOCS, SYSTEM)
    };
    assert_eq!(
        after(&a, &first, salted).divergence.unwrap().change,
        Change::ModelChanged
    );
    let other = AssembleRequest {
        model: "gpt-4".to_owned(),
        ..request(2, &DOCS, SYSTEM)
    };
    assert_eq!(
        after(&a, &first, other).divergence.unwrap().change,
        Change::ModelChanged
    );
}

#[test]
fn an_unreadable_fingerprint_is_the_callers_error() {
    let a = asm();
    for bad in [vec![0xff], vec![1u8; 4], vec![7u8; MAX_BYTES + 1]] {
        let req = AssembleRequest {
            previous_fingerprint: bad,
            ..request(2, &DOCS, SYSTEM)
        };
        match a.assemble(req) {
            Err(AssembleError::InvalidArgument(v)) => assert_eq!(v[0].field, "previous_fingerprint"),
            other => panic!("{other:?}"),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// A change to the text of message `k` of a session's request is
    /// reported at or before message `k`, never after it; the same request
    /// is reported unchanged.
    #[test]
    fn a_change_is_reported_at_or_before_where_it_is(turns in 1usize..12, at in 0usize..40, same in any::<bool>()) {
        let a = asm();
        let first = a.assemble(request(turns, &DOCS, SYSTEM)).unwrap();
        let mut next = request(turns, &DOCS, SYSTEM);
        let messages = first.messages.len();
        let k = at % messages;
        if !same {
            // Static segments, then the turns, then the context, the query.
            match k {
                0 => next.static_segments[0].content.push('!'),
                1 => next.static_segments[1].content.push('!'),
                k if k < 2 + turns => next.blocks[0].items[k - 2].content.push('!'),
                k if k + 1 < messages => next.blocks[1].items[0].content.push('!'),
                _ => next.query.push('!'),
            }
        }
        let d = after(&a, &first, next).divergence.unwrap();
        if same {
            prop_assert_eq!(d.change, Change::None);
        } else {
            prop_assert!(d.change != Change::None);
            prop_assert!(d.message_index as usize <= k, "{:?} for a change in message {}", d, k);
        }
    }
}

/// `request` with a static prefix of about `words` words.
fn long(turns: usize, words: usize, model: &str) -> AssembleRequest {
    AssembleRequest {
        model: model.to_owned(),
        ..request(
            turns,
            &DOCS,
            &"Follow the refund policy to the letter. ".repeat(words / 7),
        )
    }
}

#[test]
fn openai_caches_implicitly_in_steps_above_its_minimum() {
    let a = asm();
    let out = a.assemble(long(4, 1400, "gpt-4o")).unwrap();
    let plan = &out.cache_plan;
    assert_eq!(plan.provider, "openai");
    assert!(plan.markers.is_empty(), "{plan:?}");
    assert!(
        plan.cacheable_tokens >= 1024 && plan.cacheable_tokens.is_multiple_of(128),
        "{plan:?}"
    );
    assert!(plan.cacheable_tokens <= out.usage.total_tokens);
    // Below the minimum, nothing.
    let small = a.assemble(request(2, &DOCS, SYSTEM)).unwrap();
    assert_eq!(small.cache_plan.cacheable_tokens, 0);
}

#[test]
fn anthropic_markers_say_whether_they_take_effect() {
    let a = asm();
    let small = a.assemble(long(2, 40, "claude-3-5-sonnet")).unwrap();
    let plan = &small.cache_plan;
    assert_eq!(plan.provider, "anthropic");
    assert!(!plan.markers.is_empty());
    for m in &plan.markers {
        assert!(!m.effective, "{m:?}");
        assert_eq!(m.reason, Some(crate::prompt::Ineffective::BelowMinimum));
        assert_eq!(m.field.name, "cache_control");
    }
    let big = a.assemble(long(4, 1600, "claude-3-5-sonnet")).unwrap();
    let effective: Vec<_> = big.cache_plan.markers.iter().filter(|m| m.effective).collect();
    assert!(
        !effective.is_empty() && effective.len() <= 4,
        "{:?}",
        big.cache_plan
    );
    assert!(effective.iter().all(|m| m.prefix_tokens >= 1024));
    // A longer lifetime goes on the static markers; one the provider does
    // not offer is refused.
    let hour = a
        .assemble(AssembleRequest {
            cache_ttl: "1h".to_owned(),
            ..long(4, 1600, "claude-3-5-sonnet")
        })
        .unwrap();
    assert!(
        hour.cache_plan
            .markers
            .iter()
            .any(|m| m.ttl_seconds == Some(3600))
    );
    let week = a.assemble(AssembleRequest {
        cache_ttl: "7d".to_owned(),
        ..long(4, 1600, "claude-3-5-sonnet")
    });
    match week {
        Err(AssembleError::InvalidArgument(v)) => assert_eq!(v[0].field, "cache_ttl"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_divergence_says_what_the_cache_can_still_serve() {
    let a = asm();
    let first = a.assemble(long(4, 1400, "gpt-4o")).unwrap();
    let grown = after(&a, &first, long(6, 1400, "gpt-4o"));
    let d = grown.divergence.unwrap();
    assert_eq!(d.change, Change::Appended);
    assert!(
        d.servable_tokens >= 1024 && d.servable_tokens.is_multiple_of(128),
        "{d:?}"
    );
    assert!(d.servable_tokens <= d.token_offset);
    let changed = after(
        &a,
        &first,
        AssembleRequest {
            tools: vec![r#"{"name":"new"}"#.to_owned()],
            ..long(4, 1400, "gpt-4o")
        },
    );
    assert_eq!(
        changed.divergence.unwrap().servable_tokens,
        0,
        "a new tool breaks everything"
    );
}

#[test]
fn a_removed_turn_and_a_reordered_memory_are_named() {
    let a = asm();
    let first = a.assemble(request(6, &DOCS, SYSTEM)).unwrap();
    let mut removed = request(6, &DOCS, SYSTEM);
    removed.blocks[0].items.remove(3);
    let d = after(&a, &first, removed).divergence.unwrap();
    assert_eq!(d.change, Change::TurnChanged);
    assert_eq!((d.kind, d.message_index), (Some(PartKind::Turn), 5), "{d:?}");

    let memories = |scores: [f64; 2]| {
        let mut r = request(2, &DOCS, SYSTEM);
        r.blocks.push(Block::new(
            "memory",
            BlockKind::Memory,
            vec![
                evidence("m1", "The customer prefers email.", scores[0]),
                evidence("m2", "The customer lives in Lyon.", scores[1]),
            ],
        ));
        r
    };
    let first = a.assemble(memories([0.9, 0.1])).unwrap();
    let d = after(&a, &first, memories([0.1, 0.9])).divergence.unwrap();
    assert_eq!(d.change, Change::ItemReordered);
    assert_eq!(d.kind, Some(PartKind::Memory));
}

#[test]
fn a_session_past_its_budget_appends_then_steps_its_window() {
    let a = asm();
    let at = |turns: usize| AssembleRequest {
        max_input_tokens: Some(400),
        ..request(turns, &DOCS, SYSTEM)
    };
    let mut previous = a.assemble(at(10)).unwrap();
    let mut seen = Vec::new();
    for turns in (12..=120).step_by(2) {
        let next = after(&a, &previous, at(turns));
        seen.push(next.divergence.as_ref().unwrap().change);
        previous = next;
    }
    assert!(seen.contains(&Change::WindowStep), "{seen:?}");
    assert!(seen.contains(&Change::Appended), "{seen:?}");
    assert!(
        seen.iter()
            .all(|c| matches!(c, Change::Appended | Change::WindowStep)),
        "a growing session only appends or steps its window: {seen:?}"
    );
}

#[test]
fn an_anthropic_session_reads_its_previous_turns_through_the_lookback() {
    let a = asm();
    let first = a.assemble(long(4, 1600, "claude-3-5-sonnet")).unwrap();
    let grown = after(&a, &first, long(6, 1600, "claude-3-5-sonnet"));
    let d = grown.divergence.unwrap();
    assert_eq!(d.change, Change::Appended);
    assert_eq!(
        d.servable_tokens, d.token_offset,
        "the previous last turn's entry is read"
    );
    // Twenty-odd turns at once are past the 20-block lookback: only the
    // static entry is read, and the last turn's marker says why.
    let far = after(&a, &first, long(40, 1600, "claude-3-5-sonnet"));
    let d = far.divergence.unwrap();
    assert!(d.servable_tokens < d.token_offset, "{d:?}");
    let last = far.cache_plan.markers.last().unwrap();
    assert!(last.effective);
    assert_eq!(last.reason, Some(crate::prompt::Ineffective::LookbackExceeded));
}

#[test]
fn static_segments_past_those_kept_apart_are_one_part() {
    let a = asm();
    let many = |changed: Option<usize>| {
        let mut r = request(2, &DOCS, SYSTEM);
        r.static_segments = (0..24)
            .map(|i| Segment {
                id: format!("s{i}"),
                kind: SegmentKind::System,
                content: if changed == Some(i) {
                    format!("Rule {i}, changed.")
                } else {
                    format!("Rule {i}.")
                },
            })
            .collect();
        r
    };
    let first = a.assemble(many(None)).unwrap();
    let d = after(&a, &first, many(Some(20))).divergence.unwrap();
    assert_eq!(d.change, Change::SystemChanged);
    // Reported at the part that holds segments 15 and after: at or before
    // the change, never past it.
    assert_eq!((d.id.as_str(), d.message_index), ("s15", 15));
    let d = after(&a, &first, many(Some(3))).divergence.unwrap();
    assert_eq!((d.id.as_str(), d.message_index), ("s3", 3));
}

#[test]
fn entries_live_as_long_as_their_longest_effective_marker_says() {
    use crate::prompt_cache::plan::{PlanMessage, PlanPart, PlanPrompt, plan};
    let catalog = crate::config::default_catalog();
    let rules = |model: &str| catalog.models.resolve(model).unwrap().cache.provider;
    let messages = |system: u32| {
        [
            PlanMessage {
                role: Role::System,
                tokens: system,
                part: PlanPart::System,
                volatile: false,
            },
            PlanMessage {
                role: Role::User,
                tokens: 10,
                part: PlanPart::Query,
                volatile: false,
            },
        ]
    };
    let lifetime = |model: &str, system: u32, ttl: Option<&str>| {
        let r = rules(model);
        let m = messages(system);
        let p = plan(
            &r,
            &PlanPrompt {
                tools: 0,
                tools_tokens: 0,
                messages: &m,
                ttl,
            },
        )
        .unwrap();
        super::lifetime(&r, &p).as_secs()
    };
    assert_eq!(lifetime("claude-3-5-sonnet", 3000, Some("1h")), 3600);
    assert_eq!(lifetime("claude-3-5-sonnet", 3000, None), 300);
    assert_eq!(
        lifetime("claude-3-5-sonnet", 100, Some("1h")),
        300,
        "no effective marker"
    );
    assert_eq!(lifetime("gpt-4o", 3000, None), 300);
    assert_eq!(
        lifetime("gemini-2.5", 3000, None),
        300,
        "no lifetime offered: five minutes"
    );
}

/// Where a prompt first differs, in tokens: the divergence's offset when
/// `change` alters `request`, sent after `request`'s own answer.
fn offset_of(a: &Assembler, request: &AssembleRequest, change: impl FnOnce(&mut AssembleRequest)) -> u32 {
    let first = a.assemble(request.clone()).unwrap();
    let mut next = request.clone();
    change(&mut next);
    after(a, &first, next).divergence.unwrap().token_offset
}

/// Each part carries its own message's tokens: changing turn `k` diverges
/// after the tokens of the turns before it, so the offsets step by one
/// turn's message each (the turns here cost the same), and the context
/// message's opening is not one turn's.
#[test]
fn the_offset_of_each_turn_steps_by_the_turn_before_it() {
    let a = asm();
    let req = request(6, &DOCS, SYSTEM);
    let offsets: Vec<u32> = (0..6)
        .map(|k| {
            offset_of(&a, &req, |r| {
                r.blocks[0].items[k].content = format!("Turn {k} changed its mind entirely.")
            })
        })
        .collect();
    let steps: Vec<u32> = offsets.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(steps[0] > 0, "{offsets:?}");
    assert!(steps.iter().all(|&s| s == steps[0]), "{offsets:?}");
}

/// The summary message's part is what the summary message costs: with a
/// summary block, the first turn's offset grows by exactly what the
/// prompt's total does.
#[test]
fn the_summary_part_costs_what_the_summary_message_does() {
    let a = asm();
    let plain = request(4, &DOCS, SYSTEM);
    let mut summarized = plain.clone();
    summarized.blocks.push(Block::new(
        "summary",
        BlockKind::Summary,
        vec![evidence(
            "s1",
            "Earlier, the customer asked about a late parcel.",
            1.0,
        )],
    ));
    let first_turn = |r: &mut AssembleRequest| r.blocks[0].items[0].content = "Changed.".to_owned();
    let total = |r: &AssembleRequest| a.assemble(r.clone()).unwrap().usage.total_tokens;
    let grown = offset_of(&a, &summarized, first_turn) - offset_of(&a, &plain, first_turn);
    assert!(grown > 0);
    assert_eq!(grown, total(&summarized) - total(&plain));
}

/// The context message's parts are what the context message costs, its
/// opening with its first item: with evidence, the query's offset grows by
/// what the prompt's total does.
#[test]
fn the_context_parts_cost_what_the_context_message_does() {
    let a = asm();
    let (with, without) = (request(4, &DOCS, SYSTEM), request(4, &[], SYSTEM));
    let query = |r: &mut AssembleRequest| r.query = "Another question entirely?".to_owned();
    let total = |r: &AssembleRequest| a.assemble(r.clone()).unwrap().usage.total_tokens;
    let grown = offset_of(&a, &with, query) - offset_of(&a, &without, query);
    assert_eq!(grown, total(&with) - total(&without));
}

/// A volatile value in a segment after the first is named on that segment
/// (each segment kept apart has its own volatile bit).
#[test]
fn a_timestamp_in_the_second_segment_is_named() {
    let a = asm();
    let at = |now: &str| {
        let mut r = request(2, &DOCS, SYSTEM);
        r.static_segments[1].content = format!("Answer from the evidence only. Now: {now}");
        r
    };
    let first = a.assemble(at("2026-11-27T08:00:00Z")).unwrap();
    let d = after(&a, &first, at("2026-11-27T08:00:05Z")).divergence.unwrap();
    assert_eq!(d.change, Change::VolatileValue);
    assert_eq!(d.id, "policy");
}

/// What the provider is expected to serve from its cache, as a usage
/// report reads it back: nothing the first time a prefix is assembled,
/// its cacheable tokens when it was assembled just before, and nothing
/// after another sidecar's prompt (a previous fingerprint) whose prefix
/// this one has not seen: the provider may have served it, this sidecar
/// cannot say.
#[test]
fn the_cache_is_expected_to_serve_a_prefix_assembled_just_before() {
    use crate::prompt_cache::feedback::UsageReport;
    let expected = |a: &Assembler, mut req: AssembleRequest, id: &str| {
        req.request_id = id.to_owned();
        let out = a.assemble(req).unwrap();
        let report = UsageReport {
            request_id: id.to_owned(),
            provider: "openai".to_owned(),
            prompt_tokens: out.usage.total_tokens,
            ..UsageReport::default()
        };
        (a.report_usage(&report).unwrap().expected_cached, out)
    };
    let a = asm();
    let (first, out) = expected(&a, long(4, 1400, "gpt-4o"), "first");
    assert_eq!(first, 0, "a prefix never seen");
    let (again, _) = expected(&a, long(4, 1400, "gpt-4o"), "again");
    assert!(
        again >= 1024 && again <= out.cache_plan.cacheable_tokens,
        "{again}"
    );
    let mut next = long(6, 1400, "gpt-4o");
    next.previous_fingerprint = out.fingerprint.clone();
    let (elsewhere, out) = expected(&asm(), next, "elsewhere");
    assert!(out.divergence.is_some_and(|d| d.servable_tokens > 0));
    assert_eq!(elsewhere, 0, "a prefix this sidecar has not seen");
}

/// A volatile value in the policy (the second segment) makes every marker
/// from its message on ineffective, and each message's tokens are its own:
/// the markers before it keep their prefix, those after it say why not.
#[test]
fn a_volatile_value_makes_the_markers_after_it_ineffective() {
    let a = asm();
    let mut req = long(4, 1600, "claude-3-5-sonnet");
    req.static_segments[1].content = "Answer from the evidence only. Now: 2026-11-27T08:00:00Z".to_owned();
    let out = a.assemble(req).unwrap();
    let markers = &out.cache_plan.markers;
    assert!(!markers.is_empty(), "{:?}", out.cache_plan);
    for m in markers {
        assert!(!m.effective, "{m:?}");
        assert_eq!(
            m.reason,
            Some(crate::prompt::Ineffective::VolatileBefore),
            "{m:?}"
        );
    }
}

/// A marker's prefix is the prompt through the message it marks: the
/// static prefix's tokens through the last static message, every message's
/// through the last.
#[test]
fn a_markers_prefix_is_the_prompt_through_its_message() {
    use crate::prompt::{BreakpointKind, MarkerTarget};
    let a = asm();
    let out = a.assemble(long(4, 1600, "claude-3-5-sonnet")).unwrap();
    let markers = &out.cache_plan.markers;
    let system = markers
        .iter()
        .find(|m| m.kind == BreakpointKind::EndOfSystem)
        .expect("a marker at the end of the system prompt");
    assert_eq!(system.prefix_tokens, out.usage.static_tokens, "{system:?}");
    let last_system = out.messages.iter().rposition(|m| m.role == Role::System).unwrap();
    assert_eq!(system.target, MarkerTarget::Message(last_system as u32));
    let last = out.messages.len() as u32 - 1;
    for m in markers {
        if let MarkerTarget::Message(i) = m.target {
            assert!(m.prefix_tokens <= out.usage.total_tokens, "{m:?}");
            if i == last {
                assert_eq!(m.prefix_tokens, out.usage.total_tokens, "{m:?}");
            }
        }
    }
}
