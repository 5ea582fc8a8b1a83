//! Profiling driver for issue 53: the fresh workload (`workload::fresh`)
//! assembled cold in process, each text made new by a nonce as
//! `transport_floor fresh` sends it, so a profiler can attribute what a
//! cold request costs beyond the transport and one count of what it keeps.
//!
//! Each round measures, side by side on this thread (CPU time, cells in
//! rotating order):
//! - as served: decode the request's bytes, an inline try (as a busy
//!   server makes one where it decoded the request, counting at most
//!   `INLINE_COUNT_BYTES`; a quiet one counts all of it there), the full
//!   run of what the try hands back with the keys it made, encode the
//!   answer: what the server does between the transport's buffers, but for
//!   the hand-off to its blocking pool;
//! - one full run: the same without the try;
//! - counting, once, the texts the assembly kept;
//! - counting, once, every text the request offers (its static segments,
//!   items and query): beside the cell before, what counting the items its
//!   answer does not list as kept costs, were they counted once.
//!
//! It prints their medians and ranges, and a digest of the prompts
//! assembled from the workload with fixed nonces: a change that keeps
//! every answer keeps that digest.
//!
//! Usage: profile_fresh [BUDGET] [ROUNDS] [PASSES_PER_ROUND] [CELL]
//! (defaults 4000, 5, 1; a pass is the workload's 200 requests; CELL, 0-3,
//! runs that cell alone).
#![allow(clippy::unwrap_used, clippy::expect_used)]

/// The sidecar's allocator, so the profile is the server's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "support/kept.rs"]
mod kept;
#[path = "support/process.rs"]
#[allow(dead_code)]
mod support;

use context_assembler::assemble::flow::{INLINE_COUNT_BYTES, WARM_TRY_BYTES};
use context_assembler::assemble::{Assembler, Attempt, DEFAULT_CACHE_BYTES, Options};
use context_assembler::grpc::pb;
use context_assembler::prompt::AssembleRequest;
use context_assembler::tokens::digest::hashed_bytes;
use context_assembler::tokens::{Encoding, RequestKeys, Tokenizer};
use context_assembler::vocab::Cancel;
use context_assembler::workload::fresh::Fresh;
use context_assembler::workload::replay::Replay;
use prost::Message as _;
use support::{median, thread_cpu};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, d: usize| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let budget = u32::try_from(num(0, 4_000)).unwrap();
    let rounds = num(1, 5);
    let passes = num(2, 1);
    // A fourth argument runs that cell alone (0, 1 or 2), for a profiler.
    let only = args.get(3).and_then(|s| s.parse::<usize>().ok());
    let shape = Fresh {
        requests: Fresh::REQUESTS,
        budget,
        seed: Replay::default().seed,
    };
    let domain = shape.requests();
    let asm = Assembler::new(context_assembler::config::default_catalog(), DEFAULT_CACHE_BYTES);
    println!("prompt digest: {}", digest(&domain));
    let text: usize = (domain.iter())
        .map(|r| {
            let items = r.blocks.iter().flat_map(|b| &b.items).map(|i| i.content.len());
            r.static_segments.iter().map(|s| s.content.len()).sum::<usize>()
                + r.query.len()
                + items.sum::<usize>()
        })
        .sum();
    // Bytes hashed per request, as served and by one full run, against the
    // text each request brings (made cold by a nonce: new to the cache).
    for try_inline in [true, false] {
        let cold = Assembler::new(context_assembler::config::default_catalog(), DEFAULT_CACHE_BYTES);
        let bytes: Vec<Vec<u8>> = (domain.iter().enumerate())
            .map(|(n, r)| pb::AssembleRequest::from(with_nonce(r, n)).encode_to_vec())
            .collect();
        let before = hashed_bytes();
        served(&cold, &bytes, try_inline);
        let hashed = (hashed_bytes() - before) as f64 / domain.len() as f64;
        println!(
            "hashed per request ({}): {hashed:.0} bytes, {:.2}x its text",
            if try_inline { "as served" } else { "one full run" },
            hashed / (text as f64 / domain.len() as f64)
        );
    }
    let o200k = Tokenizer::exact(Encoding::O200kBase);
    let mut nonce = 10_000_000usize;
    let cells = [
        "as served (inline try, then the full run)",
        "one full run",
        "count once what it keeps",
        "count once everything it offers",
    ];
    let mut results: Vec<Vec<f64>> = vec![Vec::new(); cells.len()];
    for round in 0..rounds {
        let mut order: Vec<usize> = (0..cells.len()).collect();
        order.rotate_left(round % cells.len());
        for c in order.into_iter().filter(|&c| only.is_none_or(|o| o == c)) {
            let mut seconds = 0.0;
            for _ in 0..passes {
                let bytes: Vec<Vec<u8>> = domain
                    .iter()
                    .map(|r| {
                        nonce += 1;
                        pb::AssembleRequest::from(with_nonce(r, nonce)).encode_to_vec()
                    })
                    .collect();
                seconds += if c >= 2 {
                    count_once(&asm, &o200k, &bytes, c == 3)
                } else {
                    served(&asm, &bytes, c == 0).0
                };
            }
            let us = seconds * 1e6 / (passes * domain.len()) as f64;
            eprintln!("round {round} {}: {us:.1} us per request", cells[c]);
            results[c].push(us);
        }
    }
    for (c, name) in cells.iter().enumerate().filter(|(c, _)| !results[*c].is_empty()) {
        let v = &results[c];
        let lo = v.iter().copied().fold(f64::MAX, f64::min);
        let hi = v.iter().copied().fold(0.0, f64::max);
        println!("{name}: {:.1} us ({lo:.1}-{hi:.1})", median(v.clone()));
    }
}

/// Decodes, assembles and encodes each of `requests` (encoded), as the
/// server does: with `try_inline`, first an inline try of
/// [`INLINE_COUNT_BYTES`] of a request of at most [`WARM_TRY_BYTES`], then
/// a full run of what it hands back. Returns
/// this thread's CPU seconds and the encoded answers.
fn served(asm: &Assembler, requests: &[Vec<u8>], try_inline: bool) -> (f64, Vec<Vec<u8>>) {
    let catalog = asm.catalog();
    let mut answers = Vec::with_capacity(requests.len());
    let started = thread_cpu();
    for b in requests {
        let req = AssembleRequest::try_from(pb::AssembleRequest::decode(b.as_slice()).unwrap()).unwrap();
        let cancel = Cancel::new();
        let keys = RequestKeys::new();
        // The server tries inline only what is small on the wire.
        let (req, key) = if try_inline && b.len() <= WARM_TRY_BYTES {
            let tried = Cancel::new();
            let options = Options {
                inline: Some(INLINE_COUNT_BYTES),
                keys: Some(&keys),
                ..Options::new(&tried)
            };
            match asm.run(&catalog, req, options) {
                Attempt::Cold(req, key) => (req, key),
                Attempt::Done(done, _) => {
                    answers.push(pb::AssembleResponse::from(done.unwrap()).encode_to_vec());
                    continue;
                }
            }
        } else {
            (req, None)
        };
        let options = Options {
            prefix: key.as_ref(),
            keys: Some(&keys),
            ..Options::new(&cancel)
        };
        let out = asm.run(&catalog, req, options).done().unwrap();
        answers.push(pb::AssembleResponse::from(out).encode_to_vec());
    }
    ((thread_cpu() - started).as_secs_f64(), answers)
}

/// Counting once, in process, what the assembly of each of `requests`
/// kept (assembled first, not timed), or with `offered` every text it
/// offers (not assembled): this thread's CPU seconds.
fn count_once(asm: &Assembler, o200k: &Tokenizer, requests: &[Vec<u8>], offered: bool) -> f64 {
    let texts: Vec<Vec<String>> = if offered {
        requests.iter().map(|b| offered_texts(b)).collect()
    } else {
        let (_, answers) = served(asm, requests, false);
        (requests.iter().zip(&answers))
            .map(|(b, k)| kept_texts(b, k))
            .collect()
    };
    let started = thread_cpu();
    for t in &texts {
        let n: u32 = t.iter().map(|t| o200k.count(std::hint::black_box(t))).sum();
        std::hint::black_box(n);
    }
    (thread_cpu() - started).as_secs_f64()
}

/// `r` with `n` as a nonce before every text, as `transport_floor` sends it.
fn with_nonce(r: &AssembleRequest, n: usize) -> AssembleRequest {
    let mut r = r.clone();
    let nonce = format!("n{n} ");
    for s in &mut r.static_segments {
        s.content.insert_str(0, &nonce);
    }
    for item in r.blocks.iter_mut().flat_map(|b| b.items.iter_mut()) {
        item.content.insert_str(0, &nonce);
    }
    r.query.insert_str(0, &nonce);
    r
}

/// The texts of request `req` (encoded) that its answer `out` (encoded)
/// kept.
fn kept_texts(req: &[u8], out: &[u8]) -> Vec<String> {
    let r = AssembleRequest::try_from(pb::AssembleRequest::decode(req).unwrap()).unwrap();
    let out = pb::AssembleResponse::decode(out).unwrap();
    kept::kept_texts(&r, out.decisions.iter().map(|d| d.kept_item_ids.as_slice()))
}

/// Every text of the request `req` (encoded): its static segments, items
/// and query.
fn offered_texts(req: &[u8]) -> Vec<String> {
    let r = AssembleRequest::try_from(pb::AssembleRequest::decode(req).unwrap()).unwrap();
    (r.static_segments.into_iter().map(|s| s.content))
        .chain(r.blocks.into_iter().flat_map(|b| b.items).map(|i| i.content))
        .chain([r.query])
        .collect()
}

/// A digest of every answer to `requests` with fixed nonces, as served
/// by a fresh assembler (so each is cold): the encoded answers whole.
fn digest(requests: &[AssembleRequest]) -> String {
    let cold = Assembler::new(context_assembler::config::default_catalog(), DEFAULT_CACHE_BYTES);
    let bytes: Vec<Vec<u8>> = (requests.iter().enumerate())
        .map(|(n, r)| pb::AssembleRequest::from(with_nonce(r, n)).encode_to_vec())
        .collect();
    let mut h = blake3::Hasher::new();
    for answer in served(&cold, &bytes, true).1 {
        h.update(&(answer.len() as u64).to_le_bytes());
        h.update(&answer);
    }
    h.finalize().to_hex()[..16].to_string()
}
