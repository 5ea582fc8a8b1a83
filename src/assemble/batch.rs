//! Batches: many requests assembled together, then grouped by what a
//! provider or engine prompt cache can share and ordered for dispatch
//! ([`crate::prompt_cache::batch`]).
//!
//! - Each distinct static prefix (tools and segments) is found by its
//!   bytes (a map: linear in the batch), hashed once per batch and counted
//!   once (the prefix cache and single flight do the rest).
//! - Groups partition the successful results by (model entry, tokenizer,
//!   `cache_salt`, prefix hash); the first member is the warm-up: send it
//!   first, the rest once it has primed the provider's cache.
//! - The dispatch order keeps each group contiguous and walks the groups
//!   depth-first over the tree of their static segments (children in order
//!   of first appearance), so requests sharing longer prefixes are adjacent.

use std::collections::HashMap;

use super::assembler::Assembler;
use super::error::AssembleError;
use super::policy::Catalog;
use super::stages::{Attempt, Options};
use crate::prompt::{AssembleRequest, Assembly};
use crate::prompt_cache::batch::{Group, Member, group};
use crate::prompt_cache::prefix::PrefixKey;
use crate::vocab::{Cancel, Meter, saturating_u32};

/// The outcome of a batch.
#[derive(Debug)]
pub struct BatchOutcome {
    /// One result per request, in request order.
    pub results: Vec<Result<Assembly, AssembleError>>,
    /// Groups of the successful results.
    pub groups: Vec<Group>,
    /// Dispatch order: indexes of the successful results.
    pub order: Vec<usize>,
}

/// Assembles every request under one `catalog` (the one in force when the
/// batch was admitted); one failing never fails the others.
pub fn assemble_batch(
    asm: &Assembler,
    catalog: &Catalog,
    requests: Vec<AssembleRequest>,
    cancel: &Cancel,
) -> BatchOutcome {
    let Some((class, classes)) = prefix_classes(&requests, cancel) else {
        return cancelled(requests.len());
    };
    let paths = segment_paths(&requests);
    let salts: Vec<String> = requests.iter().map(|r| r.cache_salt.clone()).collect();
    let results = run_each(asm, catalog, requests, &class, classes, cancel);
    let (groups, order) = group_results(&results, &salts, &paths);
    BatchOutcome {
        results,
        groups,
        order,
    }
}

/// Each request's class of static parts (tools and segments), by their
/// bytes, numbered in order of first appearance, and how many classes
/// there are; `None` once `cancel` is set.
fn prefix_classes(requests: &[AssembleRequest], cancel: &Cancel) -> Option<(Vec<usize>, usize)> {
    // The first request of each class hashes its static parts, the others
    // reuse that hash. A map, not a scan of the classes so far: distinct
    // prefixes made that quadratic.
    let mut meter = Meter::new(cancel);
    let mut reps: HashMap<(&[String], Vec<&str>), usize> = HashMap::new();
    let mut class: Vec<usize> = Vec::with_capacity(requests.len());
    for r in requests {
        let bytes: usize = r.tools.iter().map(String::len).sum::<usize>()
            + r.static_segments.iter().map(|s| s.content.len()).sum::<usize>();
        meter.tick(1 + bytes as u64).ok()?;
        let key = (
            r.tools.as_slice(),
            r.static_segments.iter().map(|s| s.content.as_str()).collect(),
        );
        let next = reps.len();
        class.push(*reps.entry(key).or_insert(next));
    }
    Some((class, reps.len()))
}

/// Each request's path in the dispatch tree: its static segments, interned
/// in order of first appearance.
fn segment_paths(requests: &[AssembleRequest]) -> Vec<Vec<u32>> {
    let mut ids: HashMap<&str, u32> = HashMap::new();
    requests
        .iter()
        .map(|r| {
            r.static_segments
                .iter()
                .map(|s| {
                    let next = saturating_u32(ids.len());
                    *ids.entry(s.content.as_str()).or_insert(next)
                })
                .collect()
        })
        .collect()
}

/// Runs each request in order, `class[i]` being request `i`'s of `classes`
/// classes of static parts: the first run of a class keys its prefix, the
/// others are handed that key.
fn run_each(
    asm: &Assembler,
    catalog: &Catalog,
    requests: Vec<AssembleRequest>,
    class: &[usize],
    classes: usize,
    cancel: &Cancel,
) -> Vec<Result<Assembly, AssembleError>> {
    let mut keys: Vec<Option<PrefixKey>> = vec![None; classes];
    requests
        .into_iter()
        .zip(class)
        .map(|(r, &c)| {
            let options = Options {
                prefix: keys[c].as_ref(),
                ..Options::new(cancel)
            };
            match asm.run(catalog, r, options) {
                Attempt::Done(result, key) => {
                    if keys[c].is_none() {
                        keys[c] = key;
                    }
                    result
                }
                // Only a warm try misses.
                Attempt::Cold(..) => Err(AssembleError::Cancelled),
            }
        })
        .collect()
}

/// The groups of the successful results and their dispatch order, request
/// `i` having cache salt `salts[i]` and dispatch path `paths[i]`.
fn group_results(
    results: &[Result<Assembly, AssembleError>],
    salts: &[String],
    paths: &[Vec<u32>],
) -> (Vec<Group>, Vec<usize>) {
    let members: Vec<Option<Member<'_>>> = results
        .iter()
        .enumerate()
        .map(|(i, r)| {
            r.as_ref().ok().map(|a| Member {
                model: &a.model,
                tokenizer: &a.usage.tokenizer,
                cache_salt: &salts[i],
                prefix_hash: &a.cache.prefix_hash,
                prefix_tokens: a.cache.prefix_tokens,
                path: &paths[i],
            })
        })
        .collect();
    group(&members)
}

/// The outcome of a batch cancelled before any request was assembled.
fn cancelled(requests: usize) -> BatchOutcome {
    BatchOutcome {
        results: (0..requests).map(|_| Err(AssembleError::Cancelled)).collect(),
        groups: Vec::new(),
        order: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::prompt::request::{Segment, SegmentKind};

    fn request(statics: &[usize], model: &str, salt: &str, q: usize) -> AssembleRequest {
        const TEXTS: [&str; 3] = ["You are careful. ", "Be brief. ", "Cite sources. "];
        AssembleRequest {
            model: model.to_owned(),
            cache_salt: salt.to_owned(),
            static_segments: statics
                .iter()
                .map(|&i| Segment {
                    id: format!("s{i}"),
                    kind: SegmentKind::System,
                    content: TEXTS[i].to_owned(),
                })
                .collect(),
            query: format!("question {q}"),
            ..AssembleRequest::default()
        }
    }

    /// A cancelled batch groups nothing and assembles nothing: every
    /// request is answered Cancelled at once.
    #[test]
    fn a_cancelled_batch_hands_every_request_back() {
        let asm = Assembler::new(crate::config::default_catalog(), 1 << 20);
        let cancel = Cancel::new();
        cancel.cancel();
        let reqs: Vec<AssembleRequest> = (0..100).map(|q| request(&[q % 3], "gpt-4o", "", q)).collect();
        let out = assemble_batch(&asm, &asm.catalog(), reqs, &cancel);
        assert_eq!(out.results.len(), 100);
        assert!(
            out.results
                .iter()
                .all(|r| matches!(r, Err(AssembleError::Cancelled)))
        );
        assert!(out.groups.is_empty() && out.order.is_empty());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Groups partition the successes by (model, tokenizer, salt, hash);
        /// the order is a permutation of the successes that keeps each group
        /// contiguous, warm-up first, and never puts a group before one whose
        /// segments are a prefix of its own.
        #[test]
        fn groups_and_order_follow_the_rules(specs in prop::collection::vec(
            (prop::collection::vec(0usize..3, 0..3), prop::sample::select(vec!["gpt-4o", "gpt-4", "nope"]),
             prop::sample::select(vec!["", "t1"]), 0usize..3), 0..12)) {
            let asm = Assembler::new(crate::config::default_catalog(), 1 << 20);
            let reqs: Vec<AssembleRequest> = specs.iter().map(|(s, m, salt, q)| request(s, m, salt, *q)).collect();
            let out = assemble_batch(&asm, &asm.catalog(), reqs.clone(), &Cancel::new());
            prop_assert_eq!(out.results.len(), reqs.len());
            let ok: Vec<usize> = (0..reqs.len()).filter(|&i| out.results[i].is_ok()).collect();
            let mut members: Vec<usize> = out.groups.iter().flat_map(|g| g.members.clone()).collect();
            members.sort_unstable();
            prop_assert_eq!(&members, &ok);
            let mut sorted = out.order.clone();
            sorted.sort_unstable();
            prop_assert_eq!(&sorted, &ok);
            let mut at = 0;
            for g in &out.groups {
                prop_assert_eq!(g.warmup, g.members[0]);
                prop_assert_eq!(out.order[at], g.warmup);
                let mut span: Vec<usize> = out.order[at..at + g.members.len()].to_vec();
                span.sort_unstable();
                prop_assert_eq!(&span, &g.members);
                at += g.members.len();
                for &m in &g.members {
                    let a = out.results[m].as_ref().unwrap();
                    prop_assert_eq!(&a.model, &g.model);
                    prop_assert_eq!(&a.cache.prefix_hash, &g.prefix_hash);
                    prop_assert_eq!(&reqs[m].cache_salt, &g.cache_salt);
                }
                prop_assert_eq!(g.tokens_saved, u64::from(g.shared_prefix_tokens) * (g.members.len() as u64 - 1));
            }
            // A group whose segments are a strict prefix of another's comes first.
            let path = |g: &Group| specs[g.warmup].0.clone();
            for (i, gi) in out.groups.iter().enumerate() {
                for gj in &out.groups[..i] {
                    let (pi, pj) = (path(gi), path(gj));
                    prop_assert!(!(pi.len() < pj.len() && pj.starts_with(&pi)), "{:?} after {:?}", pi, pj);
                }
            }
        }
    }
}
