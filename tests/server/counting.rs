//! Counting by the provider (issue 52) through the real server: a model
//! without a public tokenizer (`claude-sonnet-5`, generation claude-2026)
//! learns each piece's count from a stand-in of Anthropic's counting
//! endpoint, off the request path; once learned, an assembled prompt's count
//! is the provider's count of that prompt.

use std::time::{Duration, Instant};

use context_assembler::grpc::pb;

use super::common::TestServer;

use crate::sources::standin::{self, StandIn};

const SYSTEM: &str = "You answer questions about the harbour's tide tables, briefly and with sources.";
const TURNS: [(&str, pb::Role); 4] = [
    ("When is high water on Tuesday?", pb::Role::User),
    (
        "High water on Tuesday is at 06:42 and again at 19:05, 4.1 metres.",
        pb::Role::Assistant,
    ),
    ("And the lowest tide of the week?", pb::Role::User),
    (
        "Thursday at 13:10, 0.6 metres; the chart datum is noted in table 3.",
        pb::Role::Assistant,
    ),
];
const QUERY: &str = "Is Saturday morning safe for a boat drawing 1.2 metres?";

fn request(model: &str) -> pb::AssembleRequest {
    pb::AssembleRequest {
        request_id: "tides".to_owned(),
        model: model.to_owned(),
        max_input_tokens: Some(20_000),
        static_segments: vec![pb::Segment {
            id: "system".to_owned(),
            kind: pb::SegmentKind::System.into(),
            content: SYSTEM.to_owned(),
        }],
        blocks: vec![pb::Block {
            name: "conversation".to_owned(),
            kind: pb::BlockKind::RecentTurns.into(),
            items: TURNS
                .iter()
                .enumerate()
                .map(|(i, (text, role))| pb::Item {
                    id: format!("t{i}"),
                    content: (*text).to_owned(),
                    role: (*role).into(),
                    trusted: true,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        query: QUERY.to_owned(),
        ..Default::default()
    }
}

async fn server_counting_with(standin: &StandIn) -> (tempfile::TempDir, TestServer) {
    server_counting_with_extra(standin, "").await
}

/// A server counting with `standin`, with `extra` lines in its counting table.
async fn server_counting_with_extra(standin: &StandIn, extra: &str) -> (tempfile::TempDir, TestServer) {
    crate::sources::counting_server_with(standin, TestServer::args(), extra).await
}

#[tokio::test]
async fn once_every_piece_is_learned_a_prompt_counts_what_the_provider_counts() {
    let standin = StandIn::start().await;
    let (_dir, server) = server_counting_with(&standin).await;
    let mut client = server.client();
    let first = client
        .assemble(request("claude-sonnet-5"))
        .await
        .unwrap()
        .into_inner();
    let messages: Vec<String> = first.messages.iter().map(|m| m.content.clone()).collect();
    assert_eq!(messages.len(), 6, "{messages:?}");
    let turns: Vec<&str> = messages[1..].iter().map(String::as_str).collect();
    let expected = StandIn::count_with(Some(&messages[0]), None, &turns);

    // Learned in the background: the same request comes to the provider's
    // count once its pieces and the model's frames are in.
    let u = first.usage.clone().unwrap();
    assert!(!u.exact && u.tokens_estimated > 0 && u.tokens_exact == 0, "{u:?}");
    assert_eq!(u.tokens_provider + u.tokens_estimated, u.total_tokens);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut usage = u.clone();
    while usage.total_tokens != expected && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let again = client
            .assemble(request("claude-sonnet-5"))
            .await
            .unwrap()
            .into_inner();
        usage = again.usage.unwrap();
    }
    assert_eq!(
        usage.total_tokens, expected,
        "the first request's estimate was {}",
        u.total_tokens
    );
    // Every token now says it is the provider's.
    assert!(usage.exact, "{usage:?}");
    assert_eq!(
        (usage.tokens_provider, usage.tokens_estimated, usage.tokens_exact),
        (expected, 0, 0)
    );

    // Each piece went to the provider once, however often it was counted:
    // three calls measure the model's frames, then one per text.
    let calls = standin.requests();
    let pieces = calls.len() - 3;
    assert_eq!(
        pieces,
        6,
        "{:?}",
        calls.iter().map(|c| c.text()).collect::<Vec<_>>()
    );
    // Another model of the same generation needs no call for the same texts.
    let other = client
        .assemble(request("claude-opus-5"))
        .await
        .unwrap()
        .into_inner();
    assert!(other.usage.is_some());
    // Its frames are measured in the background: waited for (a busy
    // machine may take a while), then until no stray call follows.
    let deadline = Instant::now() + Duration::from_secs(10);
    while standin.requests().len() < calls.len() + 3 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    until_quiet(&standin).await;
    let later = standin.requests().len();
    assert_eq!(
        later,
        calls.len() + 3,
        "only claude-opus-5's frames were measured"
    );
    server.stop().await;
}

#[tokio::test]
async fn with_the_provider_down_requests_answer_on_time_estimated() {
    let standin = StandIn::start().await;
    standin.set_mode(standin::Mode::Down);
    let (_dir, server) = server_counting_with(&standin).await;
    let mut client = server.client();
    for _ in 0..3 {
        let started = Instant::now();
        let answer = client
            .assemble(request("claude-sonnet-5"))
            .await
            .unwrap()
            .into_inner();
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "a request never waits for the provider"
        );
        let u = answer.usage.unwrap();
        assert!(!u.exact);
        assert_eq!((u.tokens_provider, u.tokens_estimated), (0, u.total_tokens));
    }
    // A model with a public tokenizer is exact whatever the provider does.
    let gpt = client.assemble(request("gpt-4o")).await.unwrap().into_inner();
    let u = gpt.usage.unwrap();
    assert!(u.exact);
    assert_eq!(
        (u.tokens_exact, u.tokens_provider, u.tokens_estimated),
        (u.total_tokens, 0, 0)
    );
    server.stop().await;
}

/// A session of one kind of content: each turn `bytes` long.
fn session_texts(kind: &str, seed: u64, turns: usize, bytes: usize) -> Vec<String> {
    use context_assembler::workload::{self, Rng};
    let mut rng = Rng::new(seed);
    (0..turns)
        .map(|i| match kind {
            "prose" => workload::prose(&mut rng, bytes),
            "code" => workload::code(&mut rng, bytes),
            "cjk" => (0..bytes / 3)
                .map(|_| match rng.below(12) {
                    0 => '，',
                    1 => '。',
                    _ => char::from_u32(0x4E00 + rng.below(0x5000) as u32).unwrap_or('字'),
                })
                .chain(std::iter::once(char::from(b'0' + j_digit(i))))
                .collect(),
            "json" => (0..bytes / 48)
                .map(|j| {
                    format!(
                        "{{\"id\":{},\"sku\":\"A-{}\",\"price\":{}.{:02},\"ok\":true}}",
                        rng.below(100_000),
                        rng.below(10_000),
                        rng.below(1000),
                        j % 100
                    )
                })
                .collect::<Vec<_>>()
                .join(","),
            "german" => {
                let words = [
                    "Größe",
                    "Straßenbahn",
                    "über",
                    "täglich",
                    "Qualität",
                    "Bürger",
                    "während",
                    "prüfen",
                    "Haltestelle",
                    "der",
                    "die",
                    "und",
                    "für",
                    "wird",
                    "Überprüfung",
                    "schön",
                ];
                let mut s = String::new();
                while s.len() < bytes {
                    s.push_str(rng.pick(&words));
                    s.push_str(if rng.below(9) == 0 { ". " } else { " " });
                }
                s
            }
            _ => unreachable!("{kind}"),
        })
        .collect()
}

fn j_digit(i: usize) -> u8 {
    (i % 10) as u8
}

/// The request of a session's `n`-th turn: the system prompt, every turn
/// so far, a question; a budget the conversation soon overflows.
fn session_request(kind: &str, texts: &[String], n: usize, budget: u32) -> pb::AssembleRequest {
    let mut req = request("claude-sonnet-5");
    req.request_id = format!("{kind}-{n}");
    req.max_input_tokens = Some(budget);
    req.blocks[0].items = texts[..n]
        .iter()
        .enumerate()
        .map(|(i, text)| pb::Item {
            id: format!("t{i}"),
            content: text.clone(),
            role: if i % 2 == 0 {
                pb::Role::User
            } else {
                pb::Role::Assistant
            }
            .into(),
            trusted: true,
            ..Default::default()
        })
        .collect();
    req
}

/// What the stand-in counts for an assembled prompt (its first message
/// the system prompt).
fn standin_count(answer: &pb::AssembleResponse) -> u32 {
    let messages: Vec<&str> = answer.messages.iter().map(|m| m.content.as_str()).collect();
    let system =
        (answer.messages.first().map(|m| m.role) == Some(pb::Role::System.into())).then(|| messages[0]);
    let turns = if system.is_some() {
        &messages[1..]
    } else {
        &messages[..]
    };
    StandIn::count_with(system, None, turns)
}

/// Sessions of prose, code, Chinese, JSON and German, each request fitted
/// to a budget its conversation overflows: whatever the provider does, no
/// prompt is over its budget by the provider's own count, and every
/// request answers without waiting for it.
async fn sessions_stay_within_budget(mode: standin::Mode) {
    const BUDGET: u32 = 1500;
    let standin = StandIn::start().await;
    standin.set_mode(mode.clone());
    let (_dir, server) = server_counting_with(&standin).await;
    let mut client = server.client();
    let mut worst = 0.0f64;
    for (seed, kind) in ["prose", "code", "cjk", "json", "german"].into_iter().enumerate() {
        let texts = session_texts(kind, seed as u64, 12, 600);
        for n in 1..=texts.len() {
            let started = Instant::now();
            let answer = client
                .assemble(session_request(kind, &texts, n, BUDGET))
                .await
                .unwrap()
                .into_inner();
            assert!(
                started.elapsed() < Duration::from_secs(2),
                "{mode:?}: never waits"
            );
            let usage = answer.usage.clone().unwrap();
            assert!(usage.total_tokens <= BUDGET, "{usage:?}");
            let counted = standin_count(&answer);
            worst = worst.max(f64::from(counted) / f64::from(BUDGET));
            assert!(
                counted <= BUDGET,
                "{mode:?} {kind} request {n}: the provider counts {counted} tokens for a prompt of {} estimated at {}",
                BUDGET,
                usage.total_tokens
            );
        }
    }
    eprintln!(
        "{mode:?}: the fullest prompt used {:.0}% of its budget",
        worst * 100.0
    );
    server.stop().await;
}

#[tokio::test]
async fn learning_sessions_stay_within_budget() {
    sessions_stay_within_budget(standin::Mode::Normal).await;
}

#[tokio::test]
async fn with_the_provider_down_sessions_stay_within_budget() {
    sessions_stay_within_budget(standin::Mode::Down).await;
}

#[tokio::test]
async fn with_the_provider_slow_sessions_stay_within_budget() {
    sessions_stay_within_budget(standin::Mode::Slow(Duration::from_millis(1500))).await;
}

#[tokio::test]
async fn with_the_provider_refusing_sessions_stay_within_budget() {
    sessions_stay_within_budget(standin::Mode::Refusing).await;
}

/// With `wait_ms`, a request whose static prefix the provider has not
/// counted yet waits for it (at most that long): the first answer already
/// counts the system prompt as the provider does. Without it, the first
/// answer is all estimated. With the provider down, nobody waits.
#[tokio::test]
async fn wait_ms_lets_a_first_seen_prefix_be_counted_before_its_request() {
    let standin = StandIn::start().await;
    standin.set_mode(standin::Mode::Slow(Duration::from_millis(50)));
    let (_dir, server) = server_counting_with_extra(&standin, "wait_ms = 1500").await;
    let mut client = server.client();
    let started = Instant::now();
    let first = client
        .assemble(request("claude-sonnet-5"))
        .await
        .unwrap()
        .into_inner();
    let waited = started.elapsed();
    let u = first.usage.unwrap();
    // The frames' three probes and the system prompt, at 50 ms each.
    assert!(waited >= Duration::from_millis(150), "{waited:?}");
    assert!(waited < Duration::from_millis(1500), "{waited:?}");
    assert_eq!(
        u.static_tokens,
        standin::text_tokens(SYSTEM) + standin::SYSTEM,
        "the system prompt and its frame are the provider's: {u:?}"
    );
    assert!(u.tokens_provider >= u.static_tokens, "{u:?}");
    server.stop().await;

    // Without wait_ms: the same first request is all estimated.
    let fresh = StandIn::start().await;
    fresh.set_mode(standin::Mode::Slow(Duration::from_millis(50)));
    let (_dir, server) = server_counting_with(&fresh).await;
    let u = server
        .client()
        .assemble(request("claude-sonnet-5"))
        .await
        .unwrap()
        .into_inner()
        .usage
        .unwrap();
    assert_eq!(u.tokens_provider, 0, "{u:?}");
    server.stop().await;

    // The provider down: its breaker opens, and then nobody waits.
    let down = StandIn::start().await;
    down.set_mode(standin::Mode::Down);
    let (_dir, server) = server_counting_with_extra(&down, "wait_ms = 1500").await;
    let mut client = server.client();
    let mut quick = 0;
    for i in 0..12 {
        let mut req = request("claude-sonnet-5");
        req.static_segments[0].content = format!("{SYSTEM} (variant {i})");
        let started = Instant::now();
        client.assemble(req).await.unwrap();
        quick += usize::from(started.elapsed() < Duration::from_millis(500));
    }
    assert!(
        quick >= 6,
        "once the breaker is open requests stop waiting: {quick} of 12 quick"
    );
    server.stop().await;
}

/// The tool set is one piece: sent once in the provider's shape (OpenAI's
/// function definitions become Anthropic's), and once counted, what tool
/// use adds to a prompt is the provider's figure.
#[tokio::test]
async fn a_tool_set_is_counted_by_the_provider_as_one_piece() {
    let standin = StandIn::start().await;
    let (_dir, server) = server_counting_with(&standin).await;
    let mut client = server.client();
    let tool = r#"{"type":"function","function":{"name":"lookup_tide","description":"Tide times for a day","parameters":{"type":"object","properties":{"day":{"type":"string"}}}}}"#;
    let mut req = request("claude-sonnet-5");
    req.tools = vec![tool.to_owned()];
    let expected = standin::tools_cost(&serde_json::json!([{
        "name": "lookup_tide",
        "description": "Tide times for a day",
        "input_schema": {"type": "object", "properties": {"day": {"type": "string"}}}
    }]));
    let first = client
        .assemble(req.clone())
        .await
        .unwrap()
        .into_inner()
        .usage
        .unwrap();
    assert!(!first.tools_exact, "{first:?}");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut usage = first.clone();
    while !usage.tools_exact && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        usage = client
            .assemble(req.clone())
            .await
            .unwrap()
            .into_inner()
            .usage
            .unwrap();
    }
    assert!(usage.tools_exact, "{usage:?}");
    assert_eq!(
        usage.tools_tokens, expected,
        "first estimated at {}",
        first.tools_tokens
    );
    let sets: Vec<_> = standin
        .requests()
        .into_iter()
        .filter(|r| r.text().contains("lookup_tide"))
        .collect();
    assert_eq!(sets.len(), 1, "the set went to the provider once");
    assert!(sets[0].text().contains("input_schema"), "in Anthropic's shape");
    server.stop().await;
}

/// The answer to [`QUERY`], as the gateway reports it and as the session's
/// next request sends it back.
const ANSWER: &str =
    "Saturday at 07:30 the water stands at 2.9 metres, so a boat drawing 1.2 metres has room.";
const NEXT: &str = "And on Sunday evening?";

/// The session's next request: the turns so far, the query and `answer`,
/// then a new question.
fn next_request(id: &str, answer: &str) -> pb::AssembleRequest {
    let mut r = request("claude-sonnet-5");
    r.request_id = id.to_owned();
    let items = &mut r.blocks[0].items;
    for (text, role) in [(QUERY, pb::Role::User), (answer, pb::Role::Assistant)] {
        items.push(pb::Item {
            id: format!("t{}", items.len()),
            content: text.to_owned(),
            role: role.into(),
            trusted: true,
            ..Default::default()
        });
    }
    r.query = NEXT.to_owned();
    r
}

#[tokio::test]
async fn an_answer_reported_with_its_usage_is_counted_before_the_next_request() {
    let standin = StandIn::start().await;
    let (_dir, server) = server_counting_with(&standin).await;
    let mut client = server.client();
    let first = client
        .assemble(request("claude-sonnet-5"))
        .await
        .unwrap()
        .into_inner();
    let reported = client
        .report_usage(pb::ReportUsageRequest {
            request_id: first.request_id.clone(),
            provider: "anthropic".to_owned(),
            prompt_tokens: first.usage.unwrap().total_tokens,
            answer: ANSWER.to_owned(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(reported.matched);

    // The provider counts the answer before any request sends it.
    let answer_key = pb::CountTokensRequest {
        tokenizer: Some(pb::count_tokens_request::Tokenizer::Model(
            "claude-sonnet-5".to_owned(),
        )),
        text: ANSWER.to_owned().into(),
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !standin.requests().iter().any(|c| c.text().contains(ANSWER)) {
        assert!(
            Instant::now() < deadline,
            "the reported answer was never sent to the provider"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    loop {
        let c = client
            .count_tokens(answer_key.clone())
            .await
            .unwrap()
            .into_inner();
        if c.tokens_estimated == 0 {
            assert_eq!(c.tokens_provider, c.tokens);
            break;
        }
        assert!(Instant::now() < deadline, "the answer's count was never learned");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Its next request estimates only the new question; the same request
    // with an answer never reported estimates that answer too.
    let next = client
        .assemble(next_request("tides-2", ANSWER))
        .await
        .unwrap()
        .into_inner()
        .usage
        .unwrap();
    let unreported = ANSWER.replace("Saturday", "Friday");
    let control = client
        .assemble(next_request("tides-2b", &unreported))
        .await
        .unwrap()
        .into_inner()
        .usage
        .unwrap();
    assert!(
        next.tokens_estimated > 0,
        "the new question is not counted yet: {next:?}"
    );
    assert!(
        next.tokens_estimated < control.tokens_estimated,
        "reported answer: {next:?}; unreported: {control:?}"
    );
    let sent = standin
        .requests()
        .iter()
        .filter(|c| c.text().contains(ANSWER))
        .count();
    assert_eq!(sent, 1, "the answer was counted once");
    server.stop().await;
}

#[tokio::test]
async fn a_message_joined_from_several_pieces_is_counted_once_it_repeats() {
    let standin = StandIn::start().await;
    let (_dir, server) = server_counting_with(&standin).await;
    let mut client = server.client();
    // Two passages: one context message holding both.
    let mut with_evidence = request("claude-sonnet-5");
    with_evidence.blocks.push(pb::Block {
        name: "evidence".to_owned(),
        kind: pb::BlockKind::Evidence.into(),
        items: ["Table 3: Saturday 07:30, 2.9 m.", "Table 4: Sunday 19:10, 3.1 m."]
            .iter()
            .enumerate()
            .map(|(i, text)| pb::Item {
                id: format!("doc{i}"),
                content: (*text).to_owned(),
                score: 1.0 - i as f64 / 10.0,
                trusted: true,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    });
    let first = client.assemble(with_evidence.clone()).await.unwrap().into_inner();
    let joined = first
        .messages
        .iter()
        .find(|m| m.content.contains("Table 3") && m.content.contains("Table 4"))
        .map(|m| m.content.clone())
        .expect("one message holds both passages");
    // Repeated, the prompt comes to be counted by the provider whole.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let usage = client
            .assemble(with_evidence.clone())
            .await
            .unwrap()
            .into_inner()
            .usage
            .unwrap();
        if usage.exact {
            assert_eq!(usage.tokens_provider, usage.total_tokens);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still estimated: {usage:?}; sent to the provider: {:?}",
            standin.requests().iter().map(|c| c.text()).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let whole = serde_json::to_string(&joined).unwrap();
    let sent = standin
        .requests()
        .iter()
        .filter(|c| c.text().contains(&whole))
        .count();
    assert_eq!(sent, 1, "the joined message went to the provider once");
    server.stop().await;
}

/// Waits until the stand-in has had no new request for a while: the
/// counter has caught up with what the last request handed it.
async fn until_quiet(standin: &StandIn) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = standin.requests().len();
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = standin.requests().len();
        if now == seen || Instant::now() > deadline {
            return;
        }
        seen = now;
    }
}

/// A session whose window moves as it grows: the summary of compacted turns
/// that a request keeps is new each time the window moves, and the request
/// before most often knew it (its own summary and the turns up to the next
/// anchor): it is counted by the provider before the request that sends it.
/// Without counting ahead, no new summary is counted before it is sent.
#[tokio::test]
async fn the_summary_the_windows_next_step_keeps_is_counted_before_it_is_sent() {
    const BUDGET: u32 = 2500;
    let standin = StandIn::start().await;
    let (_dir, server) = server_counting_with(&standin).await;
    let mut client = server.client();
    let texts = session_texts("prose", 3, 40, 600);
    let (mut summaries, mut ahead) = (0, 0);
    let mut last = String::new();
    for n in 1..=texts.len() {
        let sent_before = standin.requests();
        let answer = client
            .assemble(session_request("prose", &texts, n, BUDGET))
            .await
            .unwrap()
            .into_inner();
        let summary = answer
            .messages
            .iter()
            .find(|m| m.content.contains("compacted-turns"));
        if let Some(s) = summary.filter(|s| s.content != last) {
            summaries += 1;
            let quoted = serde_json::to_string(&s.content).unwrap();
            let known = sent_before.iter().any(|c| c.text().contains(&quoted));
            eprintln!("request {n}: a new summary, counted ahead: {known}");
            ahead += usize::from(known);
            last = s.content.clone();
        }
        until_quiet(&standin).await;
    }
    eprintln!("{ahead} of {summaries} new summaries counted ahead");
    assert!(summaries >= 4, "{summaries} new summaries");
    assert!(
        2 * ahead >= summaries,
        "{ahead} of {summaries} new summaries counted ahead"
    );
    server.stop().await;
}
