//! Recall latency of the memory store: what an Assemble with `recall` pays
//! before it assembles (the store's query, ranking, the choice of distinct
//! memories and the MEMORY items), through the library, without gRPC.
//!
//! Fills a SQLite or PostgreSQL store with N generated memories (a seeded
//! generator: observations of the five built-in types, 15-40 words each from
//! a Zipf-distributed vocabulary, some facts and files, ~10% requiring a
//! scope, stored over the past 90 days), through `MemoryStore::retain` with
//! retention off, and prints the insert throughput. Then runs Q recalls
//! through `Memories::recall` against random subjects with 3-8 word queries,
//! sequentially and from 8 concurrent tasks, and prints percentiles, a
//! throughput and a one-line JSON summary (`summary {...}`).
//!
//! ```text
//! cargo run --release --example recall_bench -- --backend sqlite --memories 10000
//! cargo run --release --example recall_bench -- --backend postgres --memories 1000000 --reuse
//! ```
//!
//! `--reuse` keeps a store that already holds exactly N memories (a rerun
//! only measures recalls); otherwise the store is emptied and filled again.
//! `benches/recall.sh` runs the matrix of docs/benchmarks/history.md
//! ("Recall latency (memory store)").
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::{Parser, ValueEnum};
use context_assembler::memory::model::{BUILTIN_TYPES, MemoryBody, NewMemory, Observation};
use context_assembler::memory::store::{Backend, MemoryStore, RetainBatch, Retention};
use context_assembler::memory::{Memories, MemorySettings, RecallSpec, keeper};
use context_assembler::prompt::AssembleRequest;
use sqlx::Connection;

/// Seed of the stored memories (the same N memories every run).
const DATA_SEED: u64 = 0x5eed_da7a;
/// Seed of the recalls (the same queries every run, whatever was stored).
const QUERY_SEED: u64 = 0x5eed_0e1e;
/// Words in the vocabulary.
const VOCABULARY: usize = 5000;
/// Zipf exponent of word frequencies (1.0: the classic law).
const ZIPF_EXPONENT: f64 = 1.0;
/// The scope ~10% of memories require.
const SCOPE: &str = "team:restricted";
/// Share of memories that require [`SCOPE`].
const SCOPED_SHARE: f64 = 0.10;
/// Share of principals that hold [`SCOPE`].
const PRINCIPAL_SCOPED_SHARE: f64 = 0.30;
/// How far back memories were stored.
const SPAN_MS: i64 = 90 * 86_400_000;
/// Concurrent tasks of the second measurement.
const TASKS: usize = 8;
/// Recalls whose answers are checked against what was stored.
const CHECKED: usize = 200;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Which {
    Sqlite,
    Postgres,
}

/// Recall latency of the memory store.
#[derive(Debug, Parser)]
struct Args {
    /// Which store.
    #[arg(long, value_enum, default_value = "sqlite")]
    backend: Which,
    /// SQLite database file (default: in a temporary directory, removed at the end).
    #[arg(long)]
    path: Option<PathBuf>,
    /// PostgreSQL URL (its memory tables are dropped and recreated unless --reuse finds N memories).
    #[arg(long, env = "CONTEXT_ASSEMBLER_TEST_POSTGRES_URL")]
    url: Option<String>,
    /// PostgreSQL pool size (the service's default is 8).
    #[arg(long, default_value_t = 8)]
    pool: u32,
    /// Memories stored in all.
    #[arg(long, default_value_t = 10_000)]
    memories: u64,
    /// Subjects they belong to (default: N/1000 rounded up, ~1000 each).
    #[arg(long)]
    subjects: Option<u64>,
    /// Memories per RetainBatch (one subject each). Each batch has one
    /// timestamp, so smaller batches spread a subject's memories over more
    /// distinct times.
    #[arg(long, default_value_t = 100)]
    batch: u64,
    /// Recalls measured (each of sequential and concurrent).
    #[arg(long, default_value_t = 2000)]
    queries: usize,
    /// Memories per recall.
    #[arg(long, default_value_t = 20)]
    limit: u32,
    /// Recalls run first and not measured (warms caches and connections).
    #[arg(long, default_value_t = 200)]
    warmup: usize,
    /// Keep the store if it already holds exactly N memories.
    #[arg(long)]
    reuse: bool,
}

/// SplitMix64: small, seeded, good enough for test data.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [lo, hi].
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

/// Generated words, most common first, and their cumulative Zipf weights.
struct Vocabulary {
    words: Vec<String>,
    cdf: Vec<f64>,
}

impl Vocabulary {
    fn new(rng: &mut Rng) -> Self {
        const ONSETS: [&str; 20] = [
            "b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "st", "tr",
            "gl",
        ];
        const VOWELS: [&str; 6] = ["a", "e", "i", "o", "u", "ai"];
        let mut seen = std::collections::HashSet::new();
        let mut words = Vec::with_capacity(VOCABULARY);
        while words.len() < VOCABULARY {
            let syllables = rng.range(2, 4);
            let mut w = String::new();
            for _ in 0..syllables {
                w.push_str(ONSETS[rng.range(0, ONSETS.len() as u64 - 1) as usize]);
                w.push_str(VOWELS[rng.range(0, VOWELS.len() as u64 - 1) as usize]);
            }
            if rng.unit() < 0.4 {
                w.push(['n', 'r', 's', 't', 'x'][rng.range(0, 4) as usize]);
            }
            if seen.insert(w.clone()) {
                words.push(w);
            }
        }
        let mut total = 0.0;
        let cdf = (1..=VOCABULARY)
            .map(|rank| {
                total += (rank as f64).powf(-ZIPF_EXPONENT);
                total
            })
            .collect::<Vec<_>>();
        let cdf = cdf.iter().map(|c| c / total).collect();
        Vocabulary { words, cdf }
    }

    /// A word by Zipf frequency.
    fn zipf(&self, rng: &mut Rng) -> &str {
        let u = rng.unit();
        let i = self.cdf.partition_point(|&c| c < u).min(self.words.len() - 1);
        &self.words[i]
    }

    /// A word drawn uniformly (mostly a rare one).
    fn uniform(&self, rng: &mut Rng) -> &str {
        &self.words[rng.range(0, self.words.len() as u64 - 1) as usize]
    }

    fn sentence(&self, rng: &mut Rng, lo: u64, hi: u64) -> String {
        let n = rng.range(lo, hi);
        let mut s = String::new();
        for i in 0..n {
            if i > 0 {
                s.push(' ');
            }
            s.push_str(self.zipf(rng));
        }
        s
    }
}

fn subject(j: u64) -> String {
    format!("tenant-{j:06}/project")
}

fn observation(v: &Vocabulary, rng: &mut Rng) -> MemoryBody {
    let kind = BUILTIN_TYPES[rng.range(0, BUILTIN_TYPES.len() as u64 - 1) as usize].to_owned();
    let title = v.sentence(rng, 3, 7);
    let mut text = v.sentence(rng, 15, 40);
    text.push('.');
    let facts = (0..rng.range(0, 3)).map(|_| v.sentence(rng, 4, 9)).collect();
    let file = |rng: &mut Rng| format!("src/{}/{}.rs", v.zipf(rng), v.uniform(rng));
    let files_read = (0..rng.range(0, 2)).map(|_| file(rng)).collect();
    let files_modified = (0..rng.range(0, 2)).map(|_| file(rng)).collect();
    MemoryBody::Observation(Observation {
        kind,
        title,
        text,
        facts,
        files_read,
        files_modified,
    })
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

/// Stored memories, via plain SQL (the store has no count).
async fn count(args: &Args, path: &std::path::Path) -> u64 {
    let n: i64 = match args.backend {
        Which::Sqlite => {
            if !path.exists() {
                return 0;
            }
            let options = sqlx::sqlite::SqliteConnectOptions::new().filename(path);
            let mut c = sqlx::SqliteConnection::connect_with(&options).await.unwrap();
            sqlx::query_scalar("SELECT count(*) FROM memories")
                .fetch_one(&mut c)
                .await
                .unwrap_or(0)
        }
        Which::Postgres => {
            let mut c = sqlx::PgConnection::connect(args.url.as_deref().unwrap())
                .await
                .unwrap();
            sqlx::query_scalar("SELECT count(*) FROM memories")
                .fetch_one(&mut c)
                .await
                .unwrap_or(0)
        }
    };
    n as u64
}

/// Empties the store before filling it.
async fn wipe(args: &Args, path: &std::path::Path) {
    match args.backend {
        Which::Sqlite => {
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
            }
        }
        Which::Postgres => {
            let mut c = sqlx::PgConnection::connect(args.url.as_deref().unwrap())
                .await
                .unwrap();
            // Dropped with the migrations' record: the next open creates
            // the schema this build knows.
            sqlx::query("DROP TABLE IF EXISTS memories, retain_keys, _sqlx_migrations CASCADE")
                .execute(&mut c)
                .await
                .unwrap();
        }
    }
}

/// Bytes on disk: the SQLite file and its WAL, or PostgreSQL's tables with
/// their indexes and TOAST.
async fn size(args: &Args, path: &std::path::Path) -> u64 {
    match args.backend {
        Which::Sqlite => ["", "-wal"]
            .iter()
            .filter_map(|s| std::fs::metadata(format!("{}{s}", path.display())).ok())
            .map(|m| m.len())
            .sum(),
        Which::Postgres => {
            let mut c = sqlx::PgConnection::connect(args.url.as_deref().unwrap())
                .await
                .unwrap();
            let n: i64 = sqlx::query_scalar(
                "SELECT pg_total_relation_size('memories') + pg_total_relation_size('retain_keys')",
            )
            .fetch_one(&mut c)
            .await
            .unwrap();
            n as u64
        }
    }
}

/// Fills the store: each subject's memories in batches, the batches of all
/// subjects interleaved in time order over the past 90 days.
async fn populate(store: &MemoryStore, args: &Args, subjects: u64, now: i64) -> (u64, Duration, Record) {
    let mut record = Record::default();
    let mut rng = Rng(DATA_SEED);
    let vocabulary = Vocabulary::new(&mut rng);
    // (subject, memories) of every batch, in the order they are written.
    let mut per_subject: Vec<Vec<u64>> = Vec::with_capacity(subjects as usize);
    for j in 0..subjects {
        let mut left = args.memories / subjects + u64::from(j < args.memories % subjects);
        let mut chunks = Vec::new();
        while left > 0 {
            let n = left.min(args.batch);
            chunks.push(n);
            left -= n;
        }
        per_subject.push(chunks);
    }
    let rounds = per_subject.iter().map(Vec::len).max().unwrap_or(0);
    let mut batches = Vec::new();
    for k in 0..rounds {
        for (j, chunks) in per_subject.iter().enumerate() {
            if let Some(&n) = chunks.get(k) {
                batches.push((j as u64, n));
            }
        }
    }
    let started = Instant::now();
    let mut stored = 0;
    let mut last_report = Instant::now();
    for (b, &(j, n)) in batches.iter().enumerate() {
        let at = now - SPAN_MS + (SPAN_MS as f64 * b as f64 / batches.len() as f64) as i64;
        let subject = subject(j);
        let memories = (0..n)
            .map(|i| NewMemory {
                subject: subject.clone(),
                content: observation(&vocabulary, &mut rng),
                required_scopes: if rng.unit() < SCOPED_SHARE {
                    vec![SCOPE.to_owned()]
                } else {
                    Vec::new()
                },
                request_id: format!("req-{b}-{i}"),
                turn: i as u32,
            })
            .collect();
        let batch = RetainBatch {
            key: format!("bench-{b}"),
            subject,
            memories,
            now_ms: at,
            retention: Retention {
                max_per_subject: 0,
                max_age: None,
                max_total_bytes: 0,
            },
        };
        let scoped: Vec<bool> = batch
            .memories
            .iter()
            .map(|m| !m.required_scopes.is_empty())
            .collect();
        let retained = store.retain(&batch).await.unwrap();
        assert!(
            !retained.replayed,
            "batch {b} was a replay: the store was not empty"
        );
        assert_eq!(retained.ids.len(), scoped.len(), "batch {b}: ids of every memory");
        for (id, scoped) in retained.ids.into_iter().zip(scoped) {
            let counts = record.visible.entry(batch.subject.clone()).or_default();
            counts.0 += 1;
            counts.1 += u64::from(!scoped);
            record.of.insert(id, (batch.subject.clone(), scoped));
        }
        stored += n;
        if last_report.elapsed() > Duration::from_secs(15) {
            let rate = stored as f64 / started.elapsed().as_secs_f64();
            eprintln!("  {stored} / {} stored ({rate:.0}/s)", args.memories);
            last_report = Instant::now();
        }
    }
    (stored, started.elapsed(), record)
}

/// What the bench stored, kept apart from the store: each memory's subject
/// and whether it requires [`SCOPE`], and per subject how many memories
/// there are (all, and those needing no scope).
#[derive(Default)]
struct Record {
    of: std::collections::HashMap<context_assembler::memory::model::MemoryId, (String, bool)>,
    visible: std::collections::HashMap<String, (u64, u64)>,
}

/// Recalls of `work` checked against the record, not the store's code: each
/// returns only its subject's memories, none needing a scope the principal
/// lacks, none twice, and as many as it may (the limit, or every memory the
/// principal may see of the subject when fewer: recall tops up with recent
/// memories). Returns the problems found.
async fn check(
    memories: &Memories,
    work: &[(RecallSpec, Vec<String>)],
    record: &Record,
    limit: u32,
) -> Vec<String> {
    let mut problems = Vec::new();
    for (i, (spec, scopes)) in work.iter().enumerate() {
        let recalled = memories.recall(spec, scopes, now_ms()).await.unwrap();
        let ranked = recalled.choose(&AssembleRequest::default()).memories;
        let holds = scopes.iter().any(|s| s == SCOPE);
        let (all, unscoped) = record.visible.get(&spec.subject).copied().unwrap_or_default();
        let expected = u64::from(limit).min(if holds { all } else { unscoped });
        if ranked.len() as u64 != expected {
            problems.push(format!(
                "recall {i}: {} memories, expected {expected}",
                ranked.len()
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for r in &ranked {
            match record.of.get(&r.candidate.id) {
                None => problems.push(format!("recall {i}: a memory the bench never stored")),
                Some((subject, _)) if *subject != spec.subject => {
                    problems.push(format!(
                        "recall {i}: a memory of {subject} recalled for {}",
                        spec.subject
                    ));
                }
                Some((_, true)) if !holds => {
                    problems.push(format!("recall {i}: a memory needing {SCOPE} without it"))
                }
                Some(_) => {}
            }
            if !seen.insert(&r.candidate.id) {
                problems.push(format!("recall {i}: a memory recalled twice"));
            }
        }
    }
    problems
}

/// The recalls to run: a subject, a query of 3-8 words (common and rare
/// alike) and the principal's scopes.
fn recalls(n: usize, subjects: u64, limit: u32) -> Vec<(RecallSpec, Vec<String>)> {
    let mut rng = Rng(DATA_SEED);
    let vocabulary = Vocabulary::new(&mut rng);
    let mut rng = Rng(QUERY_SEED);
    (0..n)
        .map(|_| {
            let words = rng.range(3, 8);
            let query: Vec<&str> = (0..words)
                .map(|_| {
                    if rng.unit() < 0.5 {
                        vocabulary.zipf(&mut rng)
                    } else {
                        vocabulary.uniform(&mut rng)
                    }
                })
                .collect();
            let mut scopes = vec!["user".to_owned()];
            if rng.unit() < PRINCIPAL_SCOPED_SHARE {
                scopes.push(SCOPE.to_owned());
            }
            let spec = RecallSpec {
                subject: subject(rng.range(0, subjects - 1)),
                query: query.join(" "),
                max_memories: limit,
                types: Vec::new(),
            };
            (spec, scopes)
        })
        .collect()
}

/// One recall as the service does it before assembling: query, rank, the
/// distinct memories (a request without items) and the MEMORY items.
/// Returns its wall time and how many it recalled.
async fn recall_once(m: &Memories, spec: &RecallSpec, scopes: &[String]) -> (Duration, usize) {
    let started = Instant::now();
    let recalled = m.recall(spec, scopes, now_ms()).await.unwrap();
    let items = keeper::items(&recalled.choose(&AssembleRequest::default()).memories);
    (started.elapsed(), items.len())
}

#[derive(Debug)]
struct Stats {
    count: usize,
    p50: f64,
    p90: f64,
    p99: f64,
    max: f64,
    mean: f64,
    per_second: f64,
}

/// Percentiles in milliseconds of `times`, and recalls per second of `wall`.
fn stats(mut times: Vec<Duration>, wall: Duration) -> Stats {
    times.sort_unstable();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let at = |p: f64| ms(times[((times.len() as f64 - 1.0) * p).round() as usize]);
    Stats {
        count: times.len(),
        p50: at(0.50),
        p90: at(0.90),
        p99: at(0.99),
        max: ms(*times.last().unwrap()),
        mean: times.iter().map(|&d| ms(d)).sum::<f64>() / times.len() as f64,
        per_second: times.len() as f64 / wall.as_secs_f64(),
    }
}

fn print_stats(label: &str, s: &Stats) {
    println!(
        "{label:<13} n={} p50={:.3}ms p90={:.3}ms p99={:.3}ms max={:.3}ms mean={:.3}ms  {:.0} recalls/s",
        s.count, s.p50, s.p90, s.p99, s.max, s.mean, s.per_second
    );
}

fn json_stats(s: &Stats) -> serde_json::Value {
    let r = |x: f64| (x * 1000.0).round() / 1000.0;
    serde_json::json!({
        "n": s.count, "p50_ms": r(s.p50), "p90_ms": r(s.p90), "p99_ms": r(s.p99),
        "max_ms": r(s.max), "mean_ms": r(s.mean), "per_s": s.per_second.round(),
    })
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let args = Args::parse();
    assert!(
        args.memories > 0 && args.batch > 0 && args.queries > 0,
        "N, batch and Q must be positive"
    );
    let subjects = args
        .subjects
        .unwrap_or(args.memories.div_ceil(1000))
        .clamp(1, args.memories);
    let temp = tempfile::tempdir().unwrap();
    let path = args
        .path
        .clone()
        .unwrap_or_else(|| temp.path().join("memories.db"));
    let backend = match args.backend {
        Which::Sqlite => Backend::Sqlite { path: path.clone() },
        Which::Postgres => Backend::Postgres {
            url: args
                .url
                .clone()
                .expect("--url or CONTEXT_ASSEMBLER_TEST_POSTGRES_URL is required for postgres"),
            max_connections: args.pool,
            statement_timeout: context_assembler::memory::store::DEFAULT_STATEMENT_TIMEOUT,
        },
    };
    let name = match args.backend {
        Which::Sqlite => "sqlite",
        Which::Postgres => "postgres",
    };
    println!(
        "recall_bench: {name}, {} memories, {subjects} subjects, batches of {}, limit {}, {} queries",
        args.memories, args.batch, args.limit, args.queries
    );

    let existing = count(&args, &path).await;
    let reused = args.reuse && existing == args.memories;
    if !reused {
        if existing > 0 {
            println!("store holds {existing} memories: emptying it");
        }
        wipe(&args, &path).await;
    }
    let store = MemoryStore::open(&backend).await.unwrap().unwrap();
    let now = now_ms();
    let mut insert = None;
    let mut record = None;
    if reused {
        println!("reusing the store's {existing} memories");
    } else {
        let (stored, took, filled) = populate(&store, &args, subjects, now).await;
        record = Some(filled);
        let rate = stored as f64 / took.as_secs_f64();
        println!(
            "inserted {stored} memories in {:.1}s: {rate:.0} memories/s",
            took.as_secs_f64()
        );
        insert = Some(rate);
        if args.backend == Which::Postgres {
            // What autovacuum would do soon after a bulk load; the planner
            // needs the statistics.
            let mut c = sqlx::PgConnection::connect(args.url.as_deref().unwrap())
                .await
                .unwrap();
            sqlx::query("VACUUM ANALYZE memories")
                .execute(&mut c)
                .await
                .unwrap();
        }
    }
    let bytes = size(&args, &path).await;
    println!("database size: {:.1} MiB", bytes as f64 / (1u64 << 20) as f64);

    let memories = Arc::new(Memories::new(Some(store.clone()), MemorySettings::default()));
    let work = Arc::new(recalls(args.warmup + args.queries, subjects, args.limit));
    let mut recalled = 0usize;
    for (spec, scopes) in &work[..args.warmup] {
        recalled += recall_once(&memories, spec, scopes).await.1;
    }

    // (a) Sequential.
    let measured = &work[args.warmup..];
    let mut times = Vec::with_capacity(measured.len());
    let started = Instant::now();
    for (spec, scopes) in measured {
        let (took, n) = recall_once(&memories, spec, scopes).await;
        times.push(took);
        recalled += n;
    }
    let sequential = stats(times, started.elapsed());
    print_stats("sequential", &sequential);

    // (b) 8 tasks sharing the same recalls.
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let memories = Arc::clone(&memories);
            let work = Arc::clone(&work);
            let warmup = args.warmup;
            tokio::spawn(async move {
                let mut times = Vec::new();
                let mut recalled = 0;
                for (spec, scopes) in work[warmup..].iter().skip(t).step_by(TASKS) {
                    let (took, n) = recall_once(&memories, spec, scopes).await;
                    times.push(took);
                    recalled += n;
                }
                (times, recalled)
            })
        })
        .collect();
    let mut times = Vec::with_capacity(measured.len());
    for task in tasks {
        let (t, n) = task.await.unwrap();
        times.extend(t);
        recalled += n;
    }
    let concurrent = stats(times, started.elapsed());
    print_stats(&format!("{TASKS} tasks"), &concurrent);
    let runs = args.warmup + 2 * args.queries;
    println!("mean memories per recall: {:.1}", recalled as f64 / runs as f64);

    // (c) The answers, checked (not timed) on a sample, when this run
    // filled the store and so knows what is in it.
    if let Some(record) = &record {
        let sample = &work[args.warmup..][..args.queries.min(CHECKED)];
        let problems = check(&memories, sample, record, args.limit).await;
        if !problems.is_empty() {
            eprintln!(
                "recall_bench: {} wrong answers of {} checked:",
                problems.len(),
                sample.len()
            );
            for p in problems.iter().take(20) {
                eprintln!("  {p}");
            }
            std::process::exit(1);
        }
        println!(
            "checked {} recalls: subjects, scopes and counts as stored",
            sample.len()
        );
    }

    let summary = serde_json::json!({
        "backend": name,
        "memories": args.memories,
        "subjects": subjects,
        "limit": args.limit,
        "reused": reused,
        "insert_per_s": insert.map(f64::round),
        "db_bytes": bytes,
        "sequential": json_stats(&sequential),
        "concurrent": json_stats(&concurrent),
        "tasks": TASKS,
    });
    println!("summary {summary}");
    store.close().await;
}
