//! A session's next request against the same request sent again (issue
//! 53), in process: chat sessions at a 4k budget for gpt-4o whose
//! conversation overflows it, each request the session's earlier turns plus
//! one new exchange, a 9,000-character system prompt, and 4 to 10 evidence
//! passages drawn by a Zipf-like popularity from a corpus of 200 (each
//! session's draws fixed per request). Each round starts a
//! new assembler (its vocabularies warmed on another text), sends every
//! session's requests in order (each one the session's next request: only
//! its newest exchange is new), then the same requests again. Reports the
//! thread CPU per request of both passes (mean and median over the
//! requests, medians over rounds), their ratio, and a digest of every
//! prompt assembled, so that a change can show its prompts byte-identical.
//!
//!   cargo run --release --example session_next [SESSIONS] [REQUESTS] [ROUNDS]
//!   PASSES=next cargo run --release --example session_next   # only the first pass, for a profiler
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

#[path = "support/process.rs"]
#[allow(dead_code)]
mod process;

use context_assembler::assemble::{Assembler, DEFAULT_CACHE_BYTES};
use context_assembler::config::default_catalog;
use context_assembler::prompt::AssembleRequest;
use context_assembler::workload::sessions::{Sessions, Turns, with_evidence};

fn arg(i: usize, default: usize) -> usize {
    std::env::args()
        .nth(i)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}

/// Thread CPU of each request, in µs, and the digest of its prompt folded
/// into `digest`.
fn pass(asm: &Assembler, sessions: &[Vec<AssembleRequest>], digest: &mut blake3::Hasher) -> Vec<f64> {
    let mut cpu = Vec::new();
    for session in sessions {
        for req in session {
            let req = req.clone();
            let started = process::thread_cpu();
            let out = asm.assemble(req).expect("assembles");
            cpu.push((process::thread_cpu() - started).as_secs_f64() * 1e6);
            for m in &out.messages {
                digest.update(m.role.as_str().as_bytes());
                digest.update(&[0]);
                digest.update(m.content.as_bytes());
                digest.update(&[0]);
            }
        }
    }
    cpu
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

fn main() {
    let shape = Sessions {
        sessions: arg(1, 12),
        requests: arg(2, 20),
        budget: 4_000,
        system_chars: 9_000,
        turns: Turns::Chat,
        policy: "",
        seed: 53,
    };
    let rounds = arg(3, 5);
    let only_next = std::env::var("PASSES").is_ok_and(|p| p == "next");
    let mut sessions = shape.requests();
    with_evidence(&mut sessions, 531);
    // Another session's first request, to warm the code and the vocabulary.
    let warm = Sessions {
        sessions: 1,
        requests: 1,
        seed: 1,
        ..shape
    }
    .requests()[0][0]
        .clone();
    println!(
        "{} chat sessions of {} requests, gpt-4o, budget {}, system prompt {} characters; {rounds} rounds",
        shape.sessions, shape.requests, shape.budget, shape.system_chars
    );
    let (mut next_mean, mut next_median, mut again_mean, mut again_median) = (vec![], vec![], vec![], vec![]);
    let mut digests = Vec::new();
    for _ in 0..rounds {
        let asm = Assembler::new(default_catalog(), DEFAULT_CACHE_BYTES);
        asm.warm();
        asm.assemble(warm.clone()).expect("assembles");
        let mut digest = blake3::Hasher::new();
        let next = pass(&asm, &sessions, &mut digest);
        digests.push(digest.finalize().to_hex().to_string());
        next_mean.push(mean(&next));
        next_median.push(process::median(next));
        if only_next {
            continue;
        }
        let again = pass(&asm, &sessions, &mut blake3::Hasher::new());
        again_mean.push(mean(&again));
        again_median.push(process::median(again));
    }
    let m = |v: Vec<f64>| process::median(v);
    let (nm, nd) = (m(next_mean), m(next_median));
    println!("the session's next request: mean {nm:.1} µs, median {nd:.1} µs");
    if !only_next {
        let (am, ad) = (m(again_mean), m(again_median));
        println!("the same request again:     mean {am:.1} µs, median {ad:.1} µs");
        println!("ratio: mean {:.2}x, median {:.2}x", nm / am, nd / ad);
    }
    digests.dedup();
    assert_eq!(digests.len(), 1, "every round assembles the same prompts");
    println!("prompts digest {}", digests[0]);
}
