//! What counting by the provider costs the request path (issue 52), side by
//! side in process: a warm `Assemble` of a Claude conversation (claude-sonnet-5,
//! generation claude-2026) with every piece's count learned, against the same
//! request for a model of another generation where nothing is learned yet
//! (claude-opus-4-6: the lookups, all missing, and the estimate), and against
//! gpt-4o (a public tokenizer: no lookup). Counting is configured for
//! Anthropic (an endpoint nothing listens on), so the lookups are made; a
//! lookup costs a blake3 of each distinct text once per request and a table
//! probe, the usage's sources a blake3 of each message. Without a counter
//! configured no lookup is made (the `no_counter` arm: the same Claude
//! request on an assembler without one).
//!
//!   cargo bench --bench learned
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::Duration;

use context_assembler::assemble::Assembler;
use context_assembler::assemble::learned::Learned;
use context_assembler::prompt::{AssembleRequest, Block, BlockKind, Item, Segment, SegmentKind};
use context_assembler::provider_count::{Api, Secret, Settings};
use context_assembler::vocab::Role;
use context_assembler::workload::{self, Rng};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

/// A conversation of `turns` alternating turns of prose.
fn request(model: &str, turns: usize) -> AssembleRequest {
    let mut rng = Rng::new(5);
    let items = (0..turns)
        .map(|i| Item {
            id: format!("t{i}"),
            content: workload::prose(&mut rng, if i % 2 == 0 { 300 } else { 1500 }),
            role: Some(if i % 2 == 0 { Role::User } else { Role::Assistant }),
            trusted: true,
            ..Item::default()
        })
        .collect();
    AssembleRequest {
        request_id: "bench".to_owned(),
        model: model.to_owned(),
        max_input_tokens: Some(100_000),
        static_segments: vec![Segment {
            id: "system".to_owned(),
            kind: SegmentKind::System,
            content: workload::prose(&mut rng, 4000),
        }],
        blocks: vec![Block::new("conversation", BlockKind::RecentTurns, items)],
        query: "What follows from that?".to_owned(),
        ..AssembleRequest::default()
    }
}

/// Every text of `req` learned under `generation` (the counts themselves do
/// not matter here, only that each lookup hits).
fn learn_all(asm: &Assembler, generation: &str, req: &AssembleRequest) {
    let learned = asm.learning().learned();
    let learn = |text: &str| learned.insert(Learned::key(generation, text), 1 + (text.len() / 4) as u32);
    req.static_segments.iter().for_each(|s| learn(&s.content));
    req.blocks
        .iter()
        .flat_map(|b| &b.items)
        .for_each(|i| learn(&i.content));
    learn(&req.query);
}

/// A counter for Anthropic whose endpoint nothing listens on: learning is
/// on (lookups are made), the calls fail once and the breaker stays open,
/// so nothing runs beside the requests timed.
fn counting_on(asm: &Assembler) {
    let settings = Settings {
        api: Api::Anthropic,
        url: "http://127.0.0.1:9/v1/messages/count_tokens".to_owned(),
        api_key: Secret::new("bench"),
        requests_per_minute: 60,
        concurrency: 1,
        timeout: Duration::from_millis(100),
        queue: 1024,
        breaker_failures: 1,
        breaker_cooldown: Duration::from_secs(3600),
        wait: Duration::ZERO,
    };
    asm.learning().start(vec![("anthropic", settings)]).unwrap();
}

fn warm_assemble(c: &mut Criterion) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let _entered = runtime.enter();
    let mut g = c.benchmark_group("learned_warm_assemble");
    for turns in [10, 60] {
        let asm = Assembler::new(context_assembler::config::default_catalog(), 256 << 20);
        counting_on(&asm);
        let learned_req = request("claude-sonnet-5", turns);
        learn_all(&asm, "claude-2026", &learned_req);
        let out = asm.assemble(learned_req.clone()).unwrap();
        assert_eq!(
            out.usage.sources.estimated,
            out.usage.total_tokens - out.usage.sources.provider
        );
        assert!(out.usage.sources.provider > 0, "the learned counts were used");
        let estimated_req = request("claude-opus-4-6", turns);
        let gpt_req = request("gpt-4o", turns);
        // The same Claude request where no counter is configured: no lookup.
        let plain = Assembler::new(context_assembler::config::default_catalog(), 256 << 20);
        for (label, asm, req) in [
            ("learned", &asm, &learned_req),
            ("not_learned", &asm, &estimated_req),
            ("no_counter", &plain, &learned_req),
            ("public_tokenizer", &asm, &gpt_req),
        ] {
            asm.assemble(req.clone()).unwrap();
            g.bench_function(BenchmarkId::new(label, turns), |b| {
                b.iter(|| black_box(asm.assemble(req.clone()).unwrap().usage.total_tokens))
            });
        }
    }
    g.finish();
}

criterion_group!(benches, warm_assemble);
criterion_main!(benches);
