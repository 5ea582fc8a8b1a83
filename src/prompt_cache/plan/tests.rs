use proptest::prelude::*;

use super::*;

fn ttl(s: &str) -> Ttl {
    Ttl::parse(s).unwrap()
}

fn ttls(list: &[&str]) -> Ttls {
    Ttls::new(&list.iter().map(|s| ttl(s)).collect::<Vec<_>>()).unwrap()
}

fn anthropic() -> ProviderRules {
    ProviderRules {
        provider: Provider::Anthropic,
        min_tokens: 1024,
        step_tokens: 1,
        max_breakpoints: 4,
        ttls: ttls(&["5m", "1h"]),
        default_ttl: Some(ttl("5m")),
        lookback_blocks: 20,
        explicit_breakpoints: true,
    }
}

fn bedrock() -> ProviderRules {
    ProviderRules {
        provider: Provider::Bedrock,
        ttls: ttls(&["5m"]),
        ..anthropic()
    }
}

fn openai_explicit() -> ProviderRules {
    ProviderRules {
        provider: Provider::OpenAi,
        min_tokens: 1024,
        step_tokens: 128,
        max_breakpoints: 4,
        ttls: ttls(&["30m"]),
        default_ttl: Some(ttl("30m")),
        lookback_blocks: 0,
        explicit_breakpoints: true,
    }
}

fn implicit(provider: Provider, min: u32, step: u32) -> ProviderRules {
    ProviderRules {
        provider,
        min_tokens: min,
        step_tokens: step,
        max_breakpoints: 0,
        ttls: Ttls::NONE,
        default_ttl: None,
        lookback_blocks: 0,
        explicit_breakpoints: false,
    }
}

fn msg(part: PlanPart, tokens: u32) -> PlanMessage {
    let role = match part {
        PlanPart::System | PlanPart::Examples => Role::System,
        _ => Role::User,
    };
    PlanMessage {
        role,
        tokens,
        part,
        volatile: false,
    }
}

fn volatile(part: PlanPart, tokens: u32) -> PlanMessage {
    PlanMessage {
        volatile: true,
        ..msg(part, tokens)
    }
}

fn prompt<'a>(
    tools: u32,
    tools_tokens: u32,
    messages: &'a [PlanMessage],
    ttl: Option<&'a str>,
) -> PlanPrompt<'a> {
    PlanPrompt {
        tools,
        tools_tokens,
        messages,
        ttl,
    }
}

/// A system prompt of `system` tokens, one turn of 10 and a query of 5.
fn system_turn_query(system: u32) -> Vec<PlanMessage> {
    vec![
        msg(PlanPart::System, system),
        msg(PlanPart::Turn, 10),
        msg(PlanPart::Query, 5),
    ]
}

fn reasons(plan: &CachePlan) -> Vec<Option<Ineffective>> {
    plan.markers.iter().map(|m| m.reason).collect()
}

#[test]
fn marker_providers_cache_nothing_below_the_minimum_and_exactly_at_it() {
    for rules in [anthropic(), bedrock(), openai_explicit()] {
        let min = rules.min_tokens;
        // The system marker's prefix is `system`; the turn's is 10 more.
        for (system, system_effective, cacheable) in [
            (min - 11, false, 0),
            (min - 10, false, min),
            (min - 1, false, min + 9),
            (min, true, min + 10),
            (min + 1, true, min + 11),
        ] {
            let messages = system_turn_query(system);
            let p = plan(&rules, &prompt(0, 0, &messages, None)).unwrap();
            let at = format!("{} system {system}", rules.provider);
            assert_eq!(p.markers.len(), 2, "{at}");
            let m = &p.markers[0];
            assert_eq!(
                (m.kind, m.target),
                (BreakpointKind::EndOfSystem, MarkerTarget::Message(0))
            );
            assert_eq!(m.prefix_tokens, system, "{at}");
            assert_eq!(m.effective, system_effective, "{at}");
            assert_eq!(m.reason.is_some(), !system_effective, "{at}");
            if !system_effective {
                assert_eq!(m.reason, Some(Ineffective::BelowMinimum), "{at}");
            }
            assert_eq!(p.markers[1].kind, BreakpointKind::LastStableMessage);
            assert_eq!(p.cacheable_tokens, cacheable, "{at}");
            assert_eq!(p.prompt_tokens, system + 15);
        }
    }
}

#[test]
fn markers_are_written_in_each_providers_terms() {
    let messages = system_turn_query(5000);
    let at = |rules: ProviderRules| plan(&rules, &prompt(2, 300, &messages, None)).unwrap();

    let a = at(anthropic());
    assert_eq!(a.markers.len(), 3);
    assert_eq!(a.markers[0].target, MarkerTarget::Tool(1));
    assert_eq!(a.markers[0].reason, Some(Ineffective::BelowMinimum));
    for m in &a.markers {
        assert_eq!(
            m.field,
            provider_field("cache_control", r#"{"type":"ephemeral"}"#.into())
        );
        assert_eq!(m.ttl, Some(ttl("5m")));
    }
    assert!(a.request_fields.is_empty());
    assert_eq!(a.cacheable_tokens, 5310);

    let b = at(bedrock());
    assert_eq!(
        b.markers[1].field,
        provider_field("cachePoint", r#"{"type":"default"}"#.into())
    );
    assert!(b.request_fields.is_empty());

    let o = at(openai_explicit());
    assert_eq!(
        o.markers[2].field,
        provider_field("prompt_cache_breakpoint", r#"{"mode":"explicit"}"#.into())
    );
    assert_eq!(
        o.request_fields,
        [provider_field(
            "prompt_cache_options",
            r#"{"mode":"explicit","ttl":"30m"}"#.into()
        )]
    );
    assert_eq!(
        o.cacheable_tokens, 5310,
        "read exactly at the marker, not in steps"
    );
}

#[test]
fn implicit_caches_read_the_stable_prefix_in_steps_from_the_minimum() {
    let cases = [
        (
            ProviderRules::default(),
            [(1023, 0), (1024, 1024), (1025, 1024), (1151, 1024), (1152, 1152)],
        ),
        (
            implicit(Provider::Gemini, 2048, 1),
            [(2047, 0), (2048, 2048), (2049, 2049), (4095, 4095), (4096, 4096)],
        ),
        (
            implicit(Provider::Vllm, 16, 16),
            [(15, 0), (16, 16), (17, 16), (31, 16), (32, 32)],
        ),
        (
            implicit(Provider::Sglang, 1, 1),
            [(0, 0), (1, 1), (2, 2), (3, 3), (4, 4)],
        ),
        (
            implicit(Provider::TrtLlm, 32, 32),
            [(31, 0), (32, 32), (33, 32), (63, 32), (64, 64)],
        ),
    ];
    for (rules, stable) in cases {
        for (tokens, cacheable) in stable {
            // Tools, system and the turn are stable; the query is not.
            let messages = [
                msg(PlanPart::System, tokens / 2),
                msg(PlanPart::Turn, tokens - tokens / 2),
                msg(PlanPart::Context, 700),
                msg(PlanPart::Query, 9),
            ];
            let p = plan(&rules, &prompt(0, 0, &messages, None)).unwrap();
            assert!(p.markers.is_empty() && p.request_fields.is_empty());
            assert_eq!(p.cacheable_tokens, cacheable, "{} {tokens}", rules.provider);
            assert_eq!(p.provider, rules.provider);
        }
    }
}

#[test]
fn anthropic_without_markers_caches_nothing() {
    let rules = ProviderRules {
        explicit_breakpoints: false,
        ..anthropic()
    };
    let messages = system_turn_query(5000);
    let p = plan(&rules, &prompt(0, 0, &messages, None)).unwrap();
    assert!(p.markers.is_empty());
    assert_eq!(p.cacheable_tokens, 0);
    assert_eq!(servable(&rules, 5000, &p), 0);
}

#[test]
fn the_breakpoint_limit_keeps_the_last_turn_then_the_longest_static_markers() {
    let messages = [
        msg(PlanPart::System, 2000),
        msg(PlanPart::Examples, 2000),
        msg(PlanPart::Summary, 100),
        msg(PlanPart::Turn, 50),
        msg(PlanPart::Turn, 50),
        msg(PlanPart::Query, 5),
    ];
    let p = |max| {
        let rules = ProviderRules {
            max_breakpoints: max,
            ..anthropic()
        };
        plan(&rules, &prompt(3, 1500, &messages, None)).unwrap()
    };
    let kinds: Vec<_> = p(4).markers.iter().map(|m| m.kind).collect();
    assert_eq!(
        kinds,
        [
            BreakpointKind::EndOfTools,
            BreakpointKind::EndOfSystem,
            BreakpointKind::EndOfExamples,
            BreakpointKind::LastStableMessage
        ]
    );
    assert_eq!(p(4).markers[3].target, MarkerTarget::Message(4));
    assert_eq!(p(4).markers[3].prefix_tokens, 5700);
    assert_eq!(reasons(&p(4)), [None; 4]);
    let over = Some(Ineffective::OverBreakpointLimit);
    assert_eq!(reasons(&p(3)), [over, None, None, None]);
    assert_eq!(reasons(&p(2)), [over, over, None, None]);
    assert_eq!(reasons(&p(1)), [over, over, over, None]);
    for max in 1..=4 {
        assert_eq!(p(max).cacheable_tokens, 5700);
    }
    // OpenAI's explicit mode holds to its limit too.
    let rules = ProviderRules {
        max_breakpoints: 2,
        ..openai_explicit()
    };
    let o = plan(&rules, &prompt(3, 1500, &messages, None)).unwrap();
    assert_eq!(reasons(&o), [over, over, None, None]);
}

#[test]
fn a_volatile_value_makes_every_marker_after_it_ineffective() {
    let messages = [
        volatile(PlanPart::System, 3000),
        msg(PlanPart::Examples, 2000),
        msg(PlanPart::Turn, 50),
        msg(PlanPart::Query, 5),
    ];
    let p = plan(&anthropic(), &prompt(4, 1200, &messages, None)).unwrap();
    let v = Some(Ineffective::VolatileBefore);
    assert_eq!(reasons(&p), [None, v, v, v]);
    assert_eq!(p.cacheable_tokens, 1200, "the tools still hit");
    // Implicitly, the prefix stops before the volatile message.
    let o = plan(&ProviderRules::default(), &prompt(4, 1200, &messages, None)).unwrap();
    assert_eq!(o.cacheable_tokens, 1152);
    // A volatile query after the last turn changes nothing.
    let tail = [
        msg(PlanPart::System, 3000),
        msg(PlanPart::Turn, 50),
        volatile(PlanPart::Query, 5),
    ];
    let t = plan(&anthropic(), &prompt(0, 0, &tail, None)).unwrap();
    assert_eq!(reasons(&t), [None, None]);
}

#[test]
fn markers_far_apart_in_one_prompt_all_take_effect() {
    // Each marker is its own entry, read where it is written.
    let with_turns = |system: u32, turns: usize| {
        let mut messages = vec![msg(PlanPart::System, system)];
        messages.extend(std::iter::repeat_n(msg(PlanPart::Turn, 100), turns));
        messages.push(msg(PlanPart::Query, 5));
        plan(&anthropic(), &prompt(0, 0, &messages, None)).unwrap()
    };
    for turns in [19, 20, 21, 60] {
        let p = with_turns(2000, turns);
        assert_eq!(reasons(&p), [None, None], "{turns} turns");
        assert_eq!(p.cacheable_tokens, 2000 + 100 * turns as u32);
    }
    let messages = [msg(PlanPart::System, 10), msg(PlanPart::Turn, 10)];
    let tools = plan(&anthropic(), &prompt(30, 2000, &messages, None)).unwrap();
    assert_eq!(reasons(&tools), [None, None, None]);
}

#[test]
fn an_append_reads_the_previous_entry_within_the_lookback() {
    // The previous prompt: system (message 0) and 10 turns (1..=10). The new
    // one appends `added` turns: its last turn is message 10 + added.
    let appended = |added: usize| {
        let mut messages = vec![msg(PlanPart::System, 2000)];
        messages.extend(std::iter::repeat_n(msg(PlanPart::Turn, 100), 10 + added));
        messages.push(msg(PlanPart::Query, 5));
        let mut p = plan(&anthropic(), &prompt(0, 0, &messages, None)).unwrap();
        let servable = after_append(&anthropic(), &mut p, 11, 3000);
        (servable, reasons(&p))
    };
    assert_eq!(
        appended(2),
        (3000, vec![None, None]),
        "the previous last turn is read"
    );
    assert_eq!(appended(20), (3000, vec![None, None]));
    // More blocks added than the provider looks back: only the system entry.
    assert_eq!(
        appended(21),
        (2000, vec![None, Some(Ineffective::LookbackExceeded)])
    );
    // OpenAI has no lookback limit.
    let mut long = vec![msg(PlanPart::System, 2000)];
    long.extend(std::iter::repeat_n(msg(PlanPart::Turn, 100), 60));
    let mut o = plan(&openai_explicit(), &prompt(0, 0, &long, None)).unwrap();
    assert_eq!(after_append(&openai_explicit(), &mut o, 2, 2100), 2100);
    // Below the minimum, nothing.
    let small = [
        msg(PlanPart::System, 500),
        msg(PlanPart::Turn, 100),
        msg(PlanPart::Turn, 100),
    ];
    let mut p = plan(&anthropic(), &prompt(0, 0, &small, None)).unwrap();
    assert_eq!(after_append(&anthropic(), &mut p, 2, 600), 0);
}

#[test]
fn a_requested_ttl_goes_on_the_static_markers_and_never_breaks_the_order() {
    let messages = [
        msg(PlanPart::System, 3000),
        msg(PlanPart::Turn, 50),
        msg(PlanPart::Query, 5),
    ];
    let p = plan(&anthropic(), &prompt(2, 1100, &messages, Some("1h"))).unwrap();
    let got: Vec<_> = p
        .markers
        .iter()
        .map(|m| (m.ttl, m.field.json.as_str(), m.reason))
        .collect();
    assert_eq!(
        got,
        [
            (Some(ttl("1h")), r#"{"type":"ephemeral","ttl":"1h"}"#, None),
            (Some(ttl("1h")), r#"{"type":"ephemeral","ttl":"1h"}"#, None),
            (Some(ttl("5m")), r#"{"type":"ephemeral"}"#, None),
        ]
    );
    // A default of 1h and a request for 5m: the last turn's 1h may not
    // follow the 5m entries, so it is lowered and reported.
    let long_default = ProviderRules {
        default_ttl: Some(ttl("1h")),
        ..anthropic()
    };
    let q = plan(&long_default, &prompt(2, 1100, &messages, Some("5m"))).unwrap();
    let last = &q.markers[2];
    assert_eq!(last.ttl, Some(ttl("5m")));
    assert_eq!(last.field.json, r#"{"type":"ephemeral","ttl":"5m"}"#);
    assert!(last.effective);
    assert_eq!(last.reason, Some(Ineffective::TtlOrder));
    // An ineffective 5m marker does not constrain the ones after it.
    let r = plan(&long_default, &prompt(2, 100, &messages, Some("5m"))).unwrap();
    assert_eq!(r.markers[0].reason, Some(Ineffective::BelowMinimum));
    assert_eq!(r.markers[2].reason, Some(Ineffective::TtlOrder));
    assert_eq!(r.markers[2].ttl, Some(ttl("5m")));
    // Bedrock writes a non-default lifetime on its cachePoint.
    let b = ProviderRules {
        ttls: ttls(&["5m", "1h"]),
        ..bedrock()
    };
    let bp = plan(&b, &prompt(0, 0, &messages, Some("1h"))).unwrap();
    assert_eq!(bp.markers[0].field.json, r#"{"type":"default","ttl":"1h"}"#);
    assert_eq!(bp.markers[1].field.json, r#"{"type":"default"}"#);
}

#[test]
fn openai_retention_and_options_are_never_sent_together() {
    let messages = system_turn_query(3000);
    let implicit_rules = ProviderRules::default();
    let p = plan(&implicit_rules, &prompt(0, 0, &messages, Some("24h"))).unwrap();
    assert_eq!(
        p.request_fields,
        [provider_field("prompt_cache_retention", "\"24h\"".into())]
    );
    let d = plan(&implicit_rules, &prompt(0, 0, &messages, Some("5m"))).unwrap();
    assert!(d.request_fields.is_empty(), "the default needs no field");
    let e = plan(&openai_explicit(), &prompt(0, 0, &messages, Some("30m"))).unwrap();
    let names: Vec<_> = e.request_fields.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["prompt_cache_options"]);
    assert_eq!(
        plan(&openai_explicit(), &prompt(0, 0, &messages, Some("24h"))),
        Err(PlanError::TtlNotOffered {
            ttl: ttl("24h"),
            provider: Provider::OpenAi,
            offered: ttls(&["30m"]),
        })
    );
}

#[test]
fn a_ttl_the_provider_does_not_offer_is_the_callers_error() {
    let messages = system_turn_query(3000);
    let at = |rules: &ProviderRules, t: &str| plan(rules, &prompt(0, 0, &messages, Some(t)));
    assert!(matches!(
        at(&anthropic(), "2h"),
        Err(PlanError::TtlNotOffered { .. })
    ));
    assert!(matches!(
        at(&bedrock(), "1h"),
        Err(PlanError::TtlNotOffered { .. })
    ));
    let gemini = implicit(Provider::Gemini, 2048, 1);
    let e = at(&gemini, "5m").unwrap_err();
    assert_eq!(
        e.to_string(),
        "gemini does not offer the cache ttl 5m (it offers: none)"
    );
    assert_eq!(
        at(&anthropic(), "soon"),
        Err(PlanError::UnknownTtl("soon".into()))
    );
    let long = "9".repeat(100);
    let Err(PlanError::UnknownTtl(echo)) = at(&anthropic(), &long) else {
        panic!("not refused")
    };
    assert_eq!(echo.len(), MAX_ECHO_CHARS);
    // Empty asks for the default.
    assert!(at(&gemini, "").is_ok());
    assert_eq!(at(&anthropic(), "").unwrap().markers[0].ttl, Some(ttl("5m")));
}

#[test]
fn servable_reads_exactly_at_markers_or_in_steps() {
    let messages = [
        msg(PlanPart::System, 2000),
        msg(PlanPart::Turn, 3000),
        msg(PlanPart::Query, 5),
    ];
    let a = plan(&anthropic(), &prompt(0, 0, &messages, None)).unwrap();
    assert_eq!(servable(&anthropic(), 100, &a), 0);
    assert_eq!(servable(&anthropic(), 2000, &a), 2000);
    assert_eq!(servable(&anthropic(), 4999, &a), 2000);
    assert_eq!(servable(&anthropic(), 5000, &a), 5000);
    assert_eq!(servable(&anthropic(), u32::MAX, &a), 5000);

    let rules = ProviderRules::default();
    let o = plan(&rules, &prompt(0, 0, &messages, None)).unwrap();
    assert_eq!(servable(&rules, 1000, &o), 0);
    assert_eq!(servable(&rules, 1500, &o), 1408);
    assert_eq!(servable(&rules, u32::MAX, &o), 4992, "the whole prompt, in steps");

    // OpenAI's explicit mode caches nothing without an effective marker.
    let bare = [msg(PlanPart::Query, 5000)];
    let e = plan(&openai_explicit(), &prompt(0, 0, &bare, None)).unwrap();
    assert!(e.markers.is_empty());
    assert_eq!(
        (e.cacheable_tokens, servable(&openai_explicit(), 5000, &e)),
        (0, 0)
    );
}

#[test]
fn labels_are_bounded_and_distinct() {
    let all = [
        Ineffective::BelowMinimum,
        Ineffective::OverBreakpointLimit,
        Ineffective::TtlOrder,
        Ineffective::VolatileBefore,
        Ineffective::LookbackExceeded,
    ];
    let mut labels: Vec<_> = all.iter().map(|r| r.as_str()).collect();
    labels.sort_unstable();
    labels.dedup();
    assert_eq!(labels.len(), all.len());
    assert!(
        labels
            .iter()
            .all(|l| l.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
    );
}

fn any_rules() -> impl Strategy<Value = ProviderRules> {
    let all_ttls = ["5m", "30m", "1h", "24h"];
    (
        prop::sample::select(Provider::ALL.to_vec()),
        prop::sample::select(vec![0u32, 1, 16, 1000, 1024, 2048, 4096]),
        prop::sample::select(vec![1u32, 16, 32, 128]),
        0u32..=4,
        prop::sample::subsequence(all_ttls.to_vec(), 0..=4),
        any::<prop::sample::Index>(),
        prop::sample::select(vec![0u32, 3, 20]),
        any::<bool>(),
    )
        .prop_map(
            |(provider, min, step, max, offered, default, lookback, explicit)| {
                let list: Vec<Ttl> = offered.iter().map(|s| ttl(s)).collect();
                ProviderRules {
                    provider,
                    min_tokens: min,
                    step_tokens: step,
                    max_breakpoints: max,
                    ttls: Ttls::new(&list).unwrap(),
                    default_ttl: (!list.is_empty()).then(|| list[default.index(list.len())]),
                    lookback_blocks: lookback,
                    explicit_breakpoints: explicit,
                }
            },
        )
}

fn any_message() -> impl Strategy<Value = PlanMessage> {
    (
        prop::sample::select(vec![
            PlanPart::System,
            PlanPart::Examples,
            PlanPart::Summary,
            PlanPart::Turn,
            PlanPart::Turn,
            PlanPart::Context,
            PlanPart::Query,
        ]),
        0u32..3000,
        prop::bool::weighted(0.1),
    )
        .prop_map(|(part, tokens, volatile)| PlanMessage {
            volatile,
            ..msg(part, tokens)
        })
}

proptest! {
    /// No plan is one its provider would reject, and what it promises holds.
    #[test]
    fn no_plan_is_one_the_provider_would_reject(
        rules in any_rules(),
        tools in 0u32..40,
        tools_tokens in 0u32..5000,
        mut messages in prop::collection::vec(any_message(), 0..40),
        asked in prop::option::of(prop::sample::select(vec!["5m", "30m", "1h", "24h", "", "2d"])),
        common in any::<u32>(),
    ) {
        // Static segments lead, as the assembler lays them out.
        messages.sort_by_key(|m| !m.part.is_static());
        let tools_tokens = if tools == 0 { 0 } else { tools_tokens };
        let p = prompt(tools, tools_tokens, &messages, asked);
        let result = plan(&rules, &p);
        let offered = match asked.filter(|a| !a.is_empty()) {
            None => true,
            Some(a) => Ttl::parse(a).is_some_and(|t| rules.ttls.contains(t)),
        };
        prop_assert_eq!(result.is_ok(), offered);
        let Ok(plan) = result else { return Ok(()) };

        let effective: Vec<&Marker> = plan.markers.iter().filter(|m| m.effective).collect();
        prop_assert!(effective.len() <= rules.marker_limit() as usize);
        prop_assert!(effective.len() <= 4);
        if rules.marker_limit() == 0 {
            prop_assert!(plan.markers.is_empty());
        }
        for pair in effective.windows(2) {
            prop_assert!(pair[0].prefix_tokens <= pair[1].prefix_tokens);
            if rules.provider != Provider::OpenAi {
                prop_assert!(pair[0].ttl >= pair[1].ttl, "a longer entry after a shorter one");
            }
        }
        for m in &plan.markers {
            prop_assert_eq!(m.effective, m.reason.is_none() || m.reason == Some(Ineffective::TtlOrder));
            if m.effective {
                prop_assert!(m.prefix_tokens >= rules.min_tokens);
            }
            if let Some(t) = m.ttl {
                prop_assert!(rules.ttls.contains(t));
            }
        }
        let names: Vec<&str> = plan.request_fields.iter().map(|f| f.name.as_str()).collect();
        prop_assert!(!(names.contains(&"prompt_cache_options") && names.contains(&"prompt_cache_retention")));
        if rules.provider != Provider::OpenAi {
            prop_assert!(names.is_empty());
        }

        let total: u64 = u64::from(tools_tokens) + messages.iter().map(|m| u64::from(m.tokens)).sum::<u64>();
        prop_assert_eq!(u64::from(plan.prompt_tokens), total);
        prop_assert!(plan.cacheable_tokens <= plan.prompt_tokens);
        prop_assert!(plan.cacheable_tokens == 0 || plan.cacheable_tokens >= rules.min_tokens);
        if rules.marker_limit() == 0 {
            prop_assert_eq!(plan.cacheable_tokens % rules.step_tokens, 0);
        } else {
            prop_assert_eq!(plan.cacheable_tokens, effective.last().map_or(0, |m| m.prefix_tokens));
        }

        let served = servable(&rules, common, &plan);
        prop_assert!(served <= common.min(plan.prompt_tokens));
        prop_assert!(servable(&rules, common / 2, &plan) <= served);
        prop_assert!(served == 0 || served >= rules.min_tokens);
    }
}
