//! Hot-path benchmarks by size: counting (ours vs tiktoken-rs, and with a
//! model folder ours vs Hugging Face's tokenizers), cache
//! lookups, whole assemblies warm and cold at 10/100/1000 items and
//! 1k/8k/32k tokens, including the wire decode/encode a server does, and
//! conversation compaction at 50/200/1000 messages.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use context_assembler::assemble::Assembler;
use context_assembler::compact::{CompactRequest, Compactor, Content, Msg};
use context_assembler::grpc::pb;
use context_assembler::prompt::AssembleRequest;
use context_assembler::tokens::cache::CountCache;
use context_assembler::tokens::{Encoding, Tokenizer};
use context_assembler::vocab::{Cancel, Role};
use context_assembler::workload::{self, Rng, Shape};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use prost::Message as _;

const CACHE_BYTES: u64 = 256 << 20;

fn inputs() -> Vec<(&'static str, String)> {
    let mb = 1 << 20;
    vec![
        ("prose", workload::prose(&mut Rng::new(7), mb)),
        ("code", workload::code(&mut Rng::new(8), mb)),
        ("spaces", " ".repeat(mb)),
        ("one_letter", "a".repeat(mb)),
    ]
}

/// Counting with a model folder's own vocabulary, 1 MB inputs, side by side:
/// ours (the fast count where the folder's tokenizer is one it reproduces)
/// against Hugging Face's `tokenizers` crate on the same folder, checked to
/// give the same count and the same ids first, each measured both ways. The
/// folders are the ones `.ci/hf_vocab.sh` fetches, found in
/// `CONTEXT_ASSEMBLER_HF_VOCAB` (default target/hf-vocab); without them the
/// group has nothing to measure and says so.
fn counting_model_folders(c: &mut Criterion) {
    let root = std::env::var_os("CONTEXT_ASSEMBLER_HF_VOCAB")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/hf-vocab"));
    let mut g = c.benchmark_group("count_1mb_hf");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(4))
        .warm_up_time(Duration::from_secs(1));
    for family in ["llama3_1", "qwen3", "gemma3", "deepseek_v3"] {
        let dir = root.join(family);
        if !dir.join("tokenizer.json").exists() {
            eprintln!("count_1mb_hf: no {} (run .ci/hf_vocab.sh)", dir.display());
            continue;
        }
        let model = context_assembler::tokens::hf::HfModel::load(&dir).unwrap();
        for (name, text) in inputs()
            .into_iter()
            .filter(|(n, _)| ["prose", "code"].contains(n))
        {
            assert_eq!(
                model.count(&text),
                model.reference_count(&text),
                "{family} {name}"
            );
            assert_eq!(
                model.encode(&text, false),
                model.reference_encode(&text, false),
                "{family} {name}: ids"
            );
            g.throughput(Throughput::Bytes(text.len() as u64));
            g.bench_with_input(BenchmarkId::new(format!("ours/{family}"), name), &text, |b, t| {
                b.iter(|| model.count(black_box(t)))
            });
            g.bench_with_input(
                BenchmarkId::new(format!("hf_tokenizers/{family}"), name),
                &text,
                |b, t| b.iter(|| model.reference_count(black_box(t))),
            );
            // The ids, as a render node asks for them.
            g.bench_with_input(
                BenchmarkId::new(format!("ours_ids/{family}"), name),
                &text,
                |b, t| b.iter(|| model.encode(black_box(t), false)),
            );
            g.bench_with_input(
                BenchmarkId::new(format!("hf_tokenizers_ids/{family}"), name),
                &text,
                |b, t| b.iter(|| model.reference_encode(black_box(t), false)),
            );
        }
    }
    g.finish();
}

/// The exact count of a long conversation rendered by a model's template
/// (60 turns, about 130 KB), where each request adds a turn the cache has not
/// seen, side by side: the rendering tokenized whole (what every request
/// paid before), and counted piece by piece where the added tokens cut it,
/// each piece through the count cache (the earlier turns are hits), with the
/// rendering itself measured alone; and the rendering's ids, by the fast
/// path and by Hugging Face's tokenizer. Folders as for `count_1mb_hf`.
fn rendered_count_model_folders(c: &mut Criterion) {
    use context_assembler::tokens::ChatMessage;
    use context_assembler::tokens::hf::{HfModel, Piece};
    let root = std::env::var_os("CONTEXT_ASSEMBLER_HF_VOCAB")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/hf-vocab"));
    let mut g = c.benchmark_group("rendered_count_hf");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(4))
        .warm_up_time(Duration::from_secs(1));
    let mut rng = Rng::new(11);
    let turns: Vec<String> = (0..60).map(|_| workload::prose(&mut rng, 2200)).collect();
    for family in ["llama3_1", "qwen3", "gemma3", "deepseek_v3"] {
        let dir = root.join(family);
        if !dir.join("tokenizer.json").exists() {
            eprintln!("rendered_count_hf: no {} (run .ci/hf_vocab.sh)", dir.display());
            continue;
        }
        let model = Arc::new(HfModel::load(&dir).unwrap());
        let tok = Tokenizer::hf(model.clone(), 0);
        let template = model.template().unwrap();
        let next = std::cell::Cell::new(0u64);
        // The conversation with a last user turn no request sent before.
        let render = || {
            next.set(next.get() + 1);
            let last = format!("And what about case {}?", next.get());
            let mut msgs: Vec<ChatMessage<'_>> = turns
                .iter()
                .enumerate()
                .map(|(i, t)| ChatMessage::new(if i % 2 == 0 { "user" } else { "assistant" }, t))
                .collect();
            msgs.push(ChatMessage::new("user", &last));
            template.render(&msgs, None, true).unwrap()
        };
        let cache = CountCache::new(CACHE_BYTES);
        let by_pieces = |text: &str| {
            let mut n = 0;
            model
                .split(text, |p| {
                    n += match p {
                        Piece::Added => 1,
                        Piece::Text(t) => cache.count(&tok, t).0,
                    }
                })
                .unwrap();
            n
        };
        let sample = render();
        assert_eq!(by_pieces(&sample), model.count(&sample), "{family}");
        g.throughput(Throughput::Bytes(sample.len() as u64));
        g.bench_function(BenchmarkId::new("render", family), |b| {
            b.iter(|| black_box(render()))
        });
        // The same conversation by the template engine, whatever the
        // template: where `render` is native (a known template program),
        // the two side by side are what writing it out saves.
        let msgs: Vec<ChatMessage<'_>> = turns
            .iter()
            .enumerate()
            .map(|(i, t)| ChatMessage::new(if i % 2 == 0 { "user" } else { "assistant" }, t))
            .collect();
        assert_eq!(
            template.render(&msgs, None, true).unwrap(),
            template.render_by_engine(&msgs, None, true).unwrap(),
            "{family}"
        );
        g.bench_function(BenchmarkId::new("render_engine", family), |b| {
            b.iter(|| black_box(template.render_by_engine(&msgs, None, true).unwrap()))
        });
        g.bench_function(BenchmarkId::new("render_native", family), |b| {
            b.iter(|| black_box(template.render(&msgs, None, true).unwrap()))
        });
        g.bench_function(BenchmarkId::new("whole", family), |b| {
            b.iter(|| model.count(&render()))
        });
        g.bench_function(BenchmarkId::new("pieces", family), |b| {
            b.iter(|| by_pieces(&render()))
        });
        // The ids, as the render node answers them: the fast path where the
        // folder has one, and Hugging Face's tokenizer, side by side.
        assert_eq!(
            model.encode(&sample, false),
            model.reference_encode(&sample, false)
        );
        g.bench_function(BenchmarkId::new("ids", family), |b| {
            b.iter(|| model.encode(&render(), false).unwrap().len())
        });
        g.bench_function(BenchmarkId::new("ids_reference", family), |b| {
            b.iter(|| model.reference_encode(&render(), false).unwrap().len())
        });
    }
    g.finish();
}

/// Cold counting throughput, 1 MB inputs: ours (bpe-openai with a single-token
/// fast path), bpe-openai alone, and tiktoken-rs.
/// tiktoken-rs is skipped where it panics (o200k on long whitespace runs).
fn counting(c: &mut Criterion) {
    let mut g = c.benchmark_group("count_1mb");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(4))
        .warm_up_time(Duration::from_secs(1));
    for (name, text) in inputs() {
        g.throughput(Throughput::Bytes(text.len() as u64));
        for encoding in Encoding::ALL {
            let ours = Tokenizer::exact(encoding);
            g.bench_with_input(
                BenchmarkId::new(format!("ours/{}", encoding.name()), name),
                &text,
                |b, t| b.iter(|| ours.count(black_box(t))),
            );
            // bpe-openai's own count: what ours was before its single-token
            // fast path.
            let plain = match encoding {
                Encoding::Cl100kBase => bpe_openai::cl100k_base(),
                Encoding::O200kBase => bpe_openai::o200k_base(),
            };
            g.bench_with_input(
                BenchmarkId::new(format!("bpe_openai/{}", encoding.name()), name),
                &text,
                |b, t| b.iter(|| plain.count(black_box(t.as_str()))),
            );
            let theirs = match encoding {
                Encoding::Cl100kBase => tiktoken_rs::cl100k_base_singleton(),
                Encoding::O200kBase => tiktoken_rs::o200k_base_singleton(),
            };
            if encoding == Encoding::O200kBase && name == "spaces" {
                continue; // tiktoken-rs panics here (regex backtrack limit).
            }
            g.bench_with_input(
                BenchmarkId::new(format!("tiktoken_rs/{}", encoding.name()), name),
                &text,
                |b, t| b.iter(|| theirs.encode_ordinary(black_box(t)).len()),
            );
        }
    }
    g.finish();
}

/// Warm cache lookups: hashing plus a count-cache get, per item count.
fn cache_lookup(c: &mut Criterion) {
    let mut g = c.benchmark_group("cache_lookup");
    let tok = Tokenizer::exact(Encoding::O200kBase);
    let cache = CountCache::new(CACHE_BYTES);
    for n in [10usize, 100, 1000] {
        let texts: Vec<String> = (0..n)
            .map(|i| workload::prose(&mut Rng::new(i as u64), 2000))
            .collect();
        for t in &texts {
            cache.count(&tok, t);
        }
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::from_parameter(n), &texts, |b, texts| {
            b.iter(|| texts.iter().map(|t| cache.count(&tok, t).0).sum::<u32>())
        });
    }
    g.finish();
}

/// The count table against moka (what it replaced), side by side: a hit on
/// a table holding 100,000 keys, and a miss that inserts into a full table
/// (an eviction each). Keys are precomputed: only the tables are measured.
fn count_table(c: &mut Criterion) {
    const HELD: u64 = 100_000;
    let mut g = c.benchmark_group("count_table");
    let key = |i: u64| {
        let mut k = [0u8; 32];
        k[..8].copy_from_slice(&i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_le_bytes());
        k
    };
    let keys: Vec<[u8; 32]> = (0..HELD).map(key).collect();
    let bytes = HELD * u64::from(CountCache::<u32>::ENTRY_BYTES);
    let clock: CountCache = CountCache::new(bytes);
    let moka: moka::sync::Cache<[u8; 32], u32, foldhash::fast::RandomState> = moka::sync::Cache::builder()
        .max_capacity(HELD)
        .build_with_hasher(foldhash::fast::RandomState::default());
    for (i, k) in keys.iter().enumerate() {
        clock.insert(*k, i as u32);
        moka.insert(*k, i as u32);
    }
    moka.run_pending_tasks();
    g.throughput(Throughput::Elements(1000));
    let hits = |get: &dyn Fn(&[u8; 32]) -> Option<u32>| {
        keys.iter()
            .step_by(100)
            .map(|k| get(k).unwrap_or(0))
            .fold(0u32, u32::wrapping_add)
    };
    g.bench_function("hit/clock", |b| b.iter(|| hits(&|k| clock.get(k))));
    g.bench_function("hit/moka", |b| b.iter(|| hits(&|k| moka.get(k))));
    let mut next = HELD;
    g.bench_function("insert_evicting/clock", |b| {
        b.iter(|| {
            for _ in 0..1000 {
                next += 1;
                clock.insert(key(next), 1);
            }
        })
    });
    g.bench_function("insert_evicting/moka", |b| {
        b.iter(|| {
            for _ in 0..1000 {
                next += 1;
                moka.insert(key(next), 1);
            }
        })
    });
    g.finish();
}

fn wire(req: &AssembleRequest) -> Vec<u8> {
    pb::AssembleRequest::from(req.clone()).encode_to_vec()
}

/// What the server does per request: decode, convert, assemble, encode.
fn server_side(asm: &Assembler, bytes: &[u8]) -> usize {
    let wire = pb::AssembleRequest::decode(bytes).unwrap();
    let req = AssembleRequest::try_from(wire).unwrap();
    let out = asm.assemble(req).unwrap();
    pb::AssembleResponse::from(out).encoded_len()
}

/// The count key of every part of the request, one per part.
fn hash_parts(tok: &Tokenizer, req: &AssembleRequest) -> u8 {
    let mut acc = 0u8;
    let mut h = |s: &str| acc ^= context_assembler::tokens::cache::key(tok, s.as_bytes())[0];
    req.static_segments.iter().for_each(|s| h(&s.content));
    req.blocks
        .iter()
        .flat_map(|b| &b.items)
        .for_each(|i| h(&i.content));
    h(&req.query);
    acc
}

fn assemble_by_tokens(c: &mut Criterion) {
    let mut g = c.benchmark_group("assemble_tokens");
    g.sample_size(20);
    for tokens in [1_000usize, 4_000, 8_000, 32_000] {
        let req = workload::request(Shape::new(tokens, 16), 42);
        let bytes = wire(&req);
        g.throughput(Throughput::Bytes(bytes.len() as u64));
        let warm = Assembler::new(context_assembler::config::default_catalog(), CACHE_BYTES);
        server_side(&warm, &bytes);
        g.bench_with_input(BenchmarkId::new("warm", tokens), &bytes, |b, bytes| {
            b.iter(|| server_side(&warm, black_box(bytes)))
        });
        // Baselines, side by side: every part's count key once (the floor a
        // warm request approaches) and the wire work alone (decode + encode).
        let o200k = Tokenizer::exact(Encoding::O200kBase);
        g.bench_with_input(BenchmarkId::new("hash_only", tokens), &req, |b, req| {
            b.iter(|| hash_parts(&o200k, black_box(req)))
        });
        let response = pb::AssembleResponse::from(warm.assemble(req.clone()).unwrap());
        g.bench_with_input(BenchmarkId::new("wire_only", tokens), &bytes, |b, bytes| {
            b.iter(|| {
                let w = pb::AssembleRequest::decode(black_box(bytes.as_slice())).unwrap();
                w.encoded_len() + response.encode_to_vec().len()
            })
        });
        // Partly warm: one evidence item (of 16) is new on every iteration, so
        // the cost above `warm` is the tokenization of the new bytes alone.
        let mut fresh = 0u64;
        g.bench_with_input(BenchmarkId::new("one_new_item", tokens), &req, |b, req| {
            b.iter_batched(
                || {
                    fresh += 1;
                    let mut r = req.clone();
                    r.blocks[1].items[3]
                        .content
                        .push_str(&format!(" revision {fresh}"));
                    wire(&r)
                },
                |bytes| server_side(&warm, black_box(&bytes)),
                criterion::BatchSize::LargeInput,
            )
        });
        g.bench_with_input(BenchmarkId::new("cold", tokens), &bytes, |b, bytes| {
            b.iter_batched(
                || Assembler::new(context_assembler::config::default_catalog(), CACHE_BYTES),
                |cold| server_side(&cold, black_box(bytes)),
                criterion::BatchSize::LargeInput,
            )
        });
    }
    g.finish();
}

/// What the prompt fingerprint adds to a warm request (issue 36: at most
/// 5% more), side by side: a warm request as `assemble_tokens/warm`; the
/// same request sending the previous answer's fingerprint (the divergence
/// report on top); the fingerprint's own work alone: an xxh3 of every
/// message, then `fingerprint` and `diverge` over those parts; and the
/// cache plan's (Anthropic's markers, the most a plan writes).
fn fingerprint_cost(c: &mut Criterion) {
    use context_assembler::prompt::PartKind;
    use context_assembler::prompt_cache::fingerprint::{Part, diverge, fingerprint};
    use context_assembler::prompt_cache::plan::{PlanMessage, PlanPart, PlanPrompt, plan};
    let mut g = c.benchmark_group("fingerprint");
    g.sample_size(30);
    for tokens in [4_000usize, 32_000] {
        let req = workload::request(Shape::new(tokens, 16), 42);
        let warm = Assembler::new(context_assembler::config::default_catalog(), CACHE_BYTES);
        let first = warm.assemble(req.clone()).unwrap();
        eprintln!(
            "fingerprint/{tokens}: {} bytes for {} messages",
            first.fingerprint.len(),
            first.messages.len()
        );
        let bytes = wire(&req);
        g.bench_with_input(BenchmarkId::new("warm", tokens), &bytes, |b, bytes| {
            b.iter(|| server_side(&warm, black_box(bytes)))
        });
        let with_previous = wire(&AssembleRequest {
            previous_fingerprint: first.fingerprint.clone(),
            ..req.clone()
        });
        g.bench_with_input(
            BenchmarkId::new("warm_with_previous", tokens),
            &with_previous,
            |b, bytes| b.iter(|| server_side(&warm, black_box(bytes))),
        );
        // Alternated call by call, so both see the same machine.
        if !std::env::args().any(|a| a == "--test") {
            let (mut plain, mut with) = (Vec::new(), Vec::new());
            for _ in 0..2_000 {
                let t = std::time::Instant::now();
                black_box(server_side(&warm, &bytes));
                plain.push(t.elapsed().as_secs_f64() * 1e6);
                let t = std::time::Instant::now();
                black_box(server_side(&warm, &with_previous));
                with.push(t.elapsed().as_secs_f64() * 1e6);
            }
            let median = |v: &mut Vec<f64>| {
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            };
            eprintln!(
                "fingerprint paired {tokens}: warm {:.1} µs, warm with a previous fingerprint {:.1} µs (medians of 2,000 pairs)",
                median(&mut plain),
                median(&mut with)
            );
        }
        // The cache plan of the same prompt for Anthropic (markers, each
        // with its JSON): the plan's own work, which both ways above do.
        let claude = context_assembler::config::default_catalog()
            .models
            .resolve("claude-3-5-sonnet")
            .unwrap()
            .cache
            .provider;
        let messages: Vec<PlanMessage> = first
            .messages
            .iter()
            .enumerate()
            .map(|(i, m)| PlanMessage {
                role: m.role,
                tokens: (m.content.len() / 4) as u32,
                part: if i < 2 {
                    PlanPart::System
                } else if i + 1 == first.messages.len() {
                    PlanPart::Query
                } else {
                    PlanPart::Turn
                },
                volatile: false,
            })
            .collect();
        g.bench_function(BenchmarkId::new("plan_only", tokens), |b| {
            b.iter(|| {
                let p = plan(
                    &claude,
                    &PlanPrompt {
                        tools: 0,
                        tools_tokens: 0,
                        messages: black_box(&messages),
                        ttl: Some("1h"),
                    },
                )
                .unwrap();
                p.markers.len()
            })
        });
        let previous = first.fingerprint.clone();
        g.bench_function(BenchmarkId::new("fingerprint_only", tokens), |b| {
            b.iter(|| {
                let parts: Vec<Part<'_>> = first
                    .messages
                    .iter()
                    .enumerate()
                    .map(|(i, m)| Part {
                        kind: PartKind::Turn,
                        id: "",
                        hash: xxhash_rust::xxh3::xxh3_64(black_box(m.content.as_bytes())),
                        tokens: 100,
                        message_index: i as u32,
                        volatile: false,
                    })
                    .collect();
                let fp = fingerprint(7, &parts);
                let d = diverge(&previous, 7, &parts).map(|d| d.token_offset);
                (fp.len(), d.ok())
            })
        });
    }
    g.finish();
}

fn assemble_by_items(c: &mut Criterion) {
    let mut g = c.benchmark_group("assemble_items");
    g.sample_size(20);
    for items in [10usize, 100, 1000] {
        // Over budget on purpose: 1000 items of ~60 tokens into an 8k budget.
        let mut req = workload::request(Shape::new(items * 60, items), 9);
        req.max_input_tokens = Some(8_000.max(items as u32 * 30));
        let asm = Assembler::new(context_assembler::config::default_catalog(), CACHE_BYTES);
        asm.assemble(req.clone()).unwrap();
        g.throughput(Throughput::Elements(items as u64));
        // The request is cloned in setup: a server owns the decoded request.
        g.bench_with_input(BenchmarkId::new("warm_allocate", items), &req, |b, req| {
            b.iter_batched(
                || req.clone(),
                |r| asm.assemble(black_box(r)).unwrap().usage.total_tokens,
                criterion::BatchSize::LargeInput,
            )
        });
    }
    g.finish();
}

/// A conversation of `n` messages: user requests, assistant calls with
/// code-like inputs, tool results of prose or code, answers.
fn conversation(n: usize, seed: u64) -> Vec<Msg> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|i| {
            let id = format!("call{}", i / 4);
            let (role, content) = match i % 4 {
                0 => (Role::User, vec![Content::Text(workload::prose(&mut rng, 200))]),
                1 => (
                    Role::Assistant,
                    vec![Content::ToolUse {
                        id,
                        name: "read_file".to_owned(),
                        input: format!(r#"{{"path": "src/m{i}.rs"}}"#),
                    }],
                ),
                2 => (
                    Role::Tool,
                    vec![Content::ToolResult {
                        tool_use_id: id,
                        output: workload::code(&mut rng, 2_000),
                        is_error: false,
                    }],
                ),
                _ => (
                    Role::Assistant,
                    vec![Content::Text(workload::prose(&mut rng, 400))],
                ),
            };
            Msg {
                id: format!("m{i}"),
                role,
                content,
            }
        })
        .collect()
}

/// Compact on conversations of 50/200/1000 messages (about 0.7k tokens
/// each 4 messages): warm (every block counted before), and cold.
fn compaction(c: &mut Criterion) {
    let mut g = c.benchmark_group("compact");
    g.sample_size(20);
    for n in [50usize, 200, 1000] {
        let req = CompactRequest {
            model: "gpt-5".to_owned(),
            messages: conversation(n, 5),
            trigger_tokens: Some(0),
            target_tokens: Some(u32::MAX),
            ..CompactRequest::default()
        };
        g.throughput(Throughput::Elements(n as u64));
        let warm = Compactor::new(Arc::new(Assembler::new(
            context_assembler::config::default_catalog(),
            CACHE_BYTES,
        )));
        warm.compact(req.clone(), &Cancel::new()).unwrap();
        g.bench_with_input(BenchmarkId::new("warm", n), &req, |b, req| {
            b.iter_batched(
                || req.clone(),
                |r| warm.compact(black_box(r), &Cancel::new()).unwrap().tokens_after,
                criterion::BatchSize::LargeInput,
            )
        });
        g.bench_with_input(BenchmarkId::new("cold", n), &req, |b, req| {
            b.iter_batched(
                || {
                    let asm = Assembler::new(context_assembler::config::default_catalog(), CACHE_BYTES);
                    (Compactor::new(Arc::new(asm)), req.clone())
                },
                |(cold, r)| cold.compact(black_box(r), &Cancel::new()).unwrap().tokens_after,
                criterion::BatchSize::LargeInput,
            )
        });
    }
    g.finish();
}

criterion_group!(
    benches,
    counting,
    counting_model_folders,
    rendered_count_model_folders,
    cache_lookup,
    count_table,
    assemble_by_tokens,
    fingerprint_cost,
    assemble_by_items,
    compaction
);
criterion_main!(benches);
