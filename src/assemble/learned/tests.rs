use super::*;

#[test]
fn a_piece_key_is_its_generations_and_its_texts() {
    let a = Learned::key("claude-2026", "hello");
    assert_eq!(a, Learned::key("claude-2026", "hello"));
    assert_ne!(
        a,
        Learned::key("claude-legacy", "hello"),
        "generations never share a count"
    );
    assert_ne!(a, Learned::key("claude-2026", "hello "));
    // The generation's length is in the key: no two (generation, text)
    // pairs run together into one.
    assert_ne!(Learned::key("ab", "c"), Learned::key("a", "bc"));
}

#[test]
fn learned_counts_are_kept_and_bounded() {
    let learned = Learned::new(100);
    learned.insert(Learned::key("g", "x"), 7);
    assert_eq!(learned.get(&Learned::key("g", "x")), Some(7));
    assert_eq!(learned.get(&Learned::key("g", "y")), None);
    for i in 0..1000 {
        learned.insert(Learned::key("g", &i.to_string()), i);
    }
    assert!(learned.len() <= 100, "{}", learned.len());
}

#[test]
fn without_a_counter_nothing_is_looked_up() {
    let catalog = crate::config::default_catalog();
    let learning = Learning::default();
    let gpt = catalog.models.resolve("gpt-4o").unwrap();
    assert!(learning.scope(gpt, "gpt-4o").is_none());
    let claude = catalog.models.resolve("claude-sonnet-5").unwrap();
    assert!(
        learning.scope(claude, "claude-sonnet-5").is_none(),
        "no counter for its provider: nothing to learn, no lookup made"
    );
    // Without measured frames the estimate keeps its own.
    assert_eq!(learning.tokenizer(claude, "claude-sonnet-5"), claude.tokenizer);
}

#[tokio::test]
async fn a_generation_learns_once_for_all_its_models_and_never_from_another() {
    let catalog = crate::config::default_catalog();
    let learning = Learning::default();
    learning.start(vec![("anthropic", closed_endpoint())]).unwrap();
    let claude = catalog.models.resolve("claude-sonnet-5").unwrap();
    let scope = learning.scope(claude, "claude-sonnet-5").unwrap();
    assert_eq!(scope.count("hi"), None, "nothing learned yet");
    learning.learned().insert(Learned::key("claude-2026", "hi"), 3);
    assert_eq!(scope.count("hi"), Some(3));
    let opus = catalog.models.resolve("claude-opus-5").unwrap();
    let same = learning.scope(opus, "claude-opus-5").unwrap();
    assert_eq!(same.count("hi"), Some(3), "one generation, one count");
    let legacy = catalog.models.resolve("claude-opus-4-6").unwrap();
    assert_eq!(
        learning.scope(legacy, "claude-opus-4-6").unwrap().count("hi"),
        None
    );
    let gemini = catalog.models.resolve("gemini-2.5-pro").unwrap();
    assert!(
        learning.scope(gemini, "gemini-2.5-pro").is_none(),
        "no Gemini counter"
    );
}

/// Settings for an endpoint nothing listens on (port 9 of loopback): calls
/// fail, and nothing here waits for them.
fn closed_endpoint() -> Settings {
    Settings {
        api: provider_count::Api::Anthropic,
        url: "http://127.0.0.1:9/v1/messages/count_tokens".to_owned(),
        api_key: provider_count::Secret::new("k"),
        requests_per_minute: 60,
        concurrency: 1,
        timeout: std::time::Duration::from_millis(100),
        queue: 16,
        breaker_failures: 1,
        breaker_cooldown: std::time::Duration::from_secs(60),
        wait: std::time::Duration::ZERO,
    }
}

#[tokio::test]
async fn a_counted_model_estimates_by_content_and_its_generation_learns_from_every_count() {
    use crate::provider_count::Sink as _;
    let catalog = crate::config::default_catalog();
    let learning = Learning::default();
    learning.start(vec![("anthropic", closed_endpoint())]).unwrap();
    let claude = catalog.models.resolve("claude-sonnet-5").unwrap();
    let t = learning.tokenizer(claude, "claude-sonnet-5");
    let c = t
        .content_estimate()
        .expect("a counted model estimates by content");
    assert_eq!(&*c.generation, "claude-2026");
    assert_eq!(c.snapshot.coefficients, Generation::Claude2026.prior());
    // A model of a public tokenizer stays exact.
    let gpt = catalog.models.resolve("gpt-4o").unwrap();
    assert!(learning.tokenizer(gpt, "gpt-4o").content_estimate().is_none());

    // What the provider counts teaches the generation, and no other.
    let sink = Sink {
        learned: learning.learned().clone(),
        estimates: learning.estimates.clone(),
    };
    let piece = |text: &str| Piece {
        model: "claude-sonnet-5".to_owned(),
        generation: Arc::from("claude-2026"),
        key: Learned::key("claude-2026", text),
        kind: PieceKind::Turn,
        text: Arc::from(text),
    };
    let mut frozen = vec![learning.estimates().get("claude-2026").current()];
    for i in 0..40u32 {
        let text = format!("word {i} ").repeat(1 + i as usize % 7);
        sink.learned(&piece(&text), 3 * (1 + i % 7));
        let now = learning.estimates().get("claude-2026").current();
        if !Arc::ptr_eq(&now, frozen.last().unwrap()) {
            frozen.push(now);
        }
    }
    let calibrator = learning.estimates().get("claude-2026");
    assert_eq!(calibrator.calibrator().observations(), 40);
    assert_eq!(
        learning
            .estimates()
            .get("claude-legacy")
            .calibrator()
            .observations(),
        0
    );
    // Frozen anew at 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 15, 18, 22, 27, 33,
    // 41: more apart as observations accumulate.
    let at: Vec<u64> = frozen.iter().map(|f| f.snapshot.observations).collect();
    assert_eq!(at, [0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 15, 18, 22, 27, 33]);
    // A request now counts with the learned coefficients, keyed apart.
    let later = learning.tokenizer(claude, "claude-sonnet-5");
    assert_ne!(later, t);
    assert_eq!(later.content_estimate().unwrap().snapshot.observations, 33);
}

#[tokio::test]
async fn a_usage_report_teaches_the_estimate_what_its_unlearned_texts_cost() {
    use crate::prompt::Message;
    use crate::vocab::Role;
    let catalog = crate::config::default_catalog();
    let learning = Learning::default();
    learning.start(vec![("anthropic", closed_endpoint())]).unwrap();
    let claude = catalog.models.resolve("claude-sonnet-5").unwrap();
    let frames = MeasuredFrames {
        priming: 3,
        message: 4,
        system: 5,
    };
    let tokenizer = claude
        .tokenizer
        .with_frames(frames)
        .with_content(learning.estimates().get("claude-2026").current());
    let message = |role, content: &str| Message {
        role,
        content: content.to_owned(),
        tool_call_ids: Vec::new(),
        tool_call_id: String::new(),
        thinking: Vec::new(),
    };
    let keys = KnownKeys::new(1 << 20);
    let known = "You answer briefly.";
    learning.learned().insert(Learned::key("claude-2026", known), 4);
    // A text long enough to be kept with its key: found by its bytes from
    // its fourth sighting, under the key it was learned by.
    let long = "Refunds reach the card they were paid with. ".repeat(12);
    learning.learned().insert(Learned::key("claude-2026", &long), 100);
    for sighting in 1..=5 {
        let (sources, _) = learning.sources(
            claude,
            "claude-sonnet-5",
            &tokenizer,
            &[message(Role::System, &long)],
            (200, 0),
            &keys,
        );
        assert_eq!(sources.provider, 3 + 5 + 100, "sighting {sighting}");
    }
    assert_eq!(keys.held_texts(), 1, "the long text is kept");
    let messages = [
        message(Role::System, known),
        message(Role::User, "How long do refunds take?"),
    ];
    let (sources, estimated) =
        learning.sources(claude, "claude-sonnet-5", &tokenizer, &messages, (40, 0), &keys);
    assert_eq!(sources.provider, 3 + 5 + 4 + 4, "frames and the learned text");
    assert_eq!(sources.estimated, 40 - 16);
    let e = estimated.expect("only a message text is estimated");
    assert_eq!(e.known, 16);
    assert_eq!(e.features, Features::of("How long do refunds take?"));
    // The report's total less what was known is what the text cost.
    let calibrator = learning.estimates().get("claude-2026");
    learning.observe_report(&e, 16 + 7);
    assert_eq!(calibrator.calibrator().observations(), 1);
    learning.observe_report(&e, 16);
    assert_eq!(
        calibrator.calibrator().observations(),
        1,
        "nothing left to learn from"
    );

    // Tools, thinking, or frames not measured: the total mixes in what
    // is not estimated by content, and teaches nothing.
    assert!(
        learning
            .sources(claude, "claude-sonnet-5", &tokenizer, &messages, (40, 12), &keys)
            .1
            .is_none()
    );
    let plain = claude
        .tokenizer
        .with_content(learning.estimates().get("claude-2026").current());
    assert!(
        learning
            .sources(claude, "claude-sonnet-5", &plain, &messages, (40, 0), &keys)
            .1
            .is_none()
    );
    let mut thinking = messages.clone();
    thinking[1].thinking = vec![Default::default()];
    assert!(
        learning
            .sources(claude, "claude-sonnet-5", &tokenizer, &thinking, (40, 0), &keys)
            .1
            .is_none()
    );
}

/// Under a content estimate a text's count key is its learned key, for
/// every model, frames and calibrator state of the generation: a request
/// looks up what the provider counted with the key it already has.
#[tokio::test]
async fn a_content_estimates_count_key_is_the_learned_key() {
    use crate::tokens::cache;
    let catalog = crate::config::default_catalog();
    let learning = Learning::default();
    learning.start(vec![("anthropic", closed_endpoint())]).unwrap();
    let text = "Refunds take five business days.";
    let want = Learned::key("claude-2026", text);
    let sonnet = learning.tokenizer(
        catalog.models.resolve("claude-sonnet-5").unwrap(),
        "claude-sonnet-5",
    );
    let opus = learning.tokenizer(catalog.models.resolve("claude-opus-5").unwrap(), "claude-opus-5");
    let framed = opus.with_frames(MeasuredFrames {
        priming: 1,
        message: 2,
        system: 3,
    });
    for t in [&sonnet, &opus, &framed] {
        assert_eq!(cache::key(t, text.as_bytes()), want, "{t}");
    }
    let legacy = catalog.models.resolve("claude-opus-4-6").unwrap();
    let legacy = learning.tokenizer(legacy, "claude-opus-4-6");
    assert_ne!(cache::key(&legacy, text.as_bytes()), want, "another generation");
    assert_eq!(
        cache::key(&legacy, text.as_bytes()),
        Learned::key("claude-legacy", text)
    );
    // The plain estimate (no counter) keys its counts by its own identity.
    let plain = &catalog.models.resolve("claude-sonnet-5").unwrap().tokenizer;
    assert_ne!(cache::key(plain, text.as_bytes()), want);
}

/// A static prefix counted while estimated is not kept: once its provider
/// has counted it, the next request counts the provider's figure, though
/// the calibrator (and so the tokenizer's identity) has not moved.
#[tokio::test]
async fn a_prefix_estimated_is_counted_again_once_learned() {
    use crate::assemble::Assembler;
    use crate::prompt::{AssembleRequest, Block, BlockKind, Item, Segment, SegmentKind};
    use crate::vocab::Role;
    let asm = Assembler::new(crate::config::default_catalog(), 64 << 20);
    asm.learning()
        .start(vec![("anthropic", closed_endpoint())])
        .unwrap();
    let system = "You answer questions about the harbour's tide tables, briefly and with sources.";
    let turn = "When is high water on Tuesday?";
    let query = "And on Wednesday?";
    let req = AssembleRequest {
        request_id: "prefix".to_owned(),
        model: "claude-sonnet-5".to_owned(),
        max_input_tokens: Some(10_000),
        static_segments: vec![Segment {
            id: "system".to_owned(),
            kind: SegmentKind::System,
            content: system.to_owned(),
        }],
        blocks: vec![Block::new(
            "conversation",
            BlockKind::RecentTurns,
            vec![Item {
                id: "t0".to_owned(),
                content: turn.to_owned(),
                role: Some(Role::User),
                trusted: true,
                ..Item::default()
            }],
        )],
        query: query.to_owned(),
        ..AssembleRequest::default()
    };
    let first = asm.assemble(req.clone()).unwrap().usage;
    assert_eq!(first.sources.provider, 0, "{first:?}");
    // The provider counts every text: 1 token each.
    for text in [system, turn, query] {
        asm.learning()
            .learned()
            .insert(Learned::key("claude-2026", text), 1);
    }
    let observations = asm
        .learning()
        .estimates()
        .get("claude-2026")
        .current()
        .snapshot
        .observations;
    let second = asm.assemble(req).unwrap().usage;
    assert_eq!(
        asm.learning()
            .estimates()
            .get("claude-2026")
            .current()
            .snapshot
            .observations,
        observations,
        "the estimate did not move"
    );
    let tok = asm.learning().tokenizer(
        asm.catalog().models.resolve("claude-sonnet-5").unwrap(),
        "claude-sonnet-5",
    );
    let frames = tok.priming_tokens() + tok.frame_tokens(Role::System) + 2 * tok.frame_tokens(Role::User);
    assert_eq!(second.total_tokens, 3 + frames, "{first:?} then {second:?}");
    assert_eq!(second.sources.provider, 3);
}

/// A count the frozen state misses by more than [`SURPRISE`], where the
/// calibrator's state now would not, freezes that state at once: the next
/// request estimates a new kind of text with what its first piece taught.
/// A count it misses by less waits for the schedule.
#[test]
fn a_count_the_frozen_state_misses_freezes_a_new_state_at_once() {
    let e = GenerationEstimate::new("claude-2026");
    let frozen_at = || e.current().snapshot.observations;
    // Prose counted as the frozen state estimates it: frozen on the
    // schedule alone (at 33, next at 41).
    for i in 0..38 {
        let text = format!("The order {i} ships within two days of payment. ").repeat(1 + i % 5);
        let f = Features::of(&text);
        e.observe(&f, e.current().snapshot.estimate(&f).round() as u32);
    }
    assert_eq!(frozen_at(), 33);
    let text = "Refunds take five business days from the day the parcel arrives. ".repeat(8);
    let f = Features::of(&text);
    e.observe(&f, (1.015 * e.current().snapshot.estimate(&f)).round() as u32);
    assert_eq!(frozen_at(), 33, "a miss of 1.5% waits for the schedule");
    // Chinese at one token a character, where the prior says 0.89.
    let zh = |s: &str| {
        let text = s.repeat(12);
        (Features::of(&text), text.chars().count() as u32)
    };
    let (f, tokens) = zh("退款将在包裹到达后五个工作日内处理。");
    let miss = |f: &Features, tokens: u32| (e.current().snapshot.estimate(f) / f64::from(tokens) - 1.0).abs();
    assert!(miss(&f, tokens) > 0.08, "{}", miss(&f, tokens));
    e.observe(&f, tokens);
    assert_eq!(frozen_at(), 40, "frozen at once");
    let (next, tokens) = zh("订单发货后我们会通过电子邮件通知您。");
    assert!(miss(&next, tokens) < SURPRISE, "{}", miss(&next, tokens));
}
