use std::collections::HashSet;

use super::*;
use crate::assemble::{Assembler, DEFAULT_CACHE_BYTES};
use crate::tokens::{Encoding, Tokenizer};

/// Every text of a request but its system prompt.
fn new_texts(r: &AssembleRequest) -> HashSet<&str> {
    r.blocks
        .iter()
        .flat_map(|b| b.items.iter().map(|i| i.content.as_str()))
        .chain(std::iter::once(r.query.as_str()))
        .collect()
}

#[test]
fn deterministic_and_all_new_but_the_system_prompt_in_every_request() {
    let shape = Fresh {
        requests: 5,
        budget: 4_000,
        seed: 7,
    };
    let a = shape.requests();
    assert_eq!(a, shape.requests());
    assert_eq!(a.len(), 5);
    for pair in a.windows(2) {
        let (before, now) = (&pair[0], &pair[1]);
        assert_eq!(now.static_segments, before.static_segments);
        assert!(
            new_texts(now).is_disjoint(&new_texts(before)),
            "{} repeats a text of {}",
            now.request_id,
            before.request_id
        );
    }
    let r = &a[0];
    assert_eq!(r.blocks[0].items.len(), shape.documents());
    assert_eq!(r.blocks[1].items.len(), shape.turns());
    assert_eq!(r.blocks[1].items[0].role, Some(Role::User));
    let other = Fresh { seed: 8, ..shape }.requests();
    assert!(new_texts(&other[0]).is_disjoint(&new_texts(r)));
}

/// The requests offer 1.1-1.3x their budget in content tokens on average
/// (counted with the request's tokenizer; each 1.05-1.3x), and over the
/// requests at least 75% is kept. One request may keep less (down to 60%
/// at 32k): when its turns do not fit whole beside the documents, the
/// conversation window cuts them a step at a time. At 4k a tenth of the
/// budget goes to the documents' wrappers and the messages' framing.
#[test]
fn offers_a_little_over_the_budget_and_most_of_it_is_kept() {
    let tok = Tokenizer::exact(Encoding::O200kBase);
    let asm = Assembler::new(crate::config::default_catalog(), DEFAULT_CACHE_BYTES);
    for budget in Fresh::BUDGETS {
        let shape = Fresh {
            requests: 20,
            budget,
            seed: 7,
        };
        let (mut offered, mut kept, mut ratios) = (0, 0, 0.0);
        for r in shape.requests() {
            let offer = Offer::of(&r, |t| tok.count(t));
            let ratio = offer.total() as f64 / f64::from(budget);
            assert!(
                (1.05..=1.3).contains(&ratio),
                "{budget}: offers {ratio:.3}x the budget"
            );
            ratios += ratio;
            let answer = asm.assemble(r).unwrap();
            assert!(answer.usage.total_tokens <= budget);
            let (_, k) = offer.measure(
                answer
                    .decisions
                    .iter()
                    .flat_map(|d| d.kept_item_ids.iter().map(String::as_str)),
                0,
            );
            let share = k as f64 / offer.total() as f64;
            assert!(share >= 0.55, "{budget}: keeps {share:.3} of what it offers");
            offered += offer.total();
            kept += k;
        }
        let mean = ratios / shape.requests as f64;
        assert!(
            (1.1..=1.3).contains(&mean),
            "{budget}: offers {mean:.3}x the budget on average"
        );
        let share = kept as f64 / offered as f64;
        assert!(share >= 0.75, "{budget}: keeps {share:.3} of what is offered");
    }
}

#[test]
fn an_offer_counts_kept_items_whole_and_the_rest_always() {
    let req = AssembleRequest {
        static_segments: vec![Segment {
            id: "s".to_owned(),
            kind: SegmentKind::System,
            content: "ab".to_owned(),
        }],
        blocks: vec![Block::new(
            "e",
            BlockKind::Evidence,
            ["x", "yyy"]
                .map(|c| Item {
                    id: format!("i{}", c.len()),
                    content: c.to_owned(),
                    ..Item::default()
                })
                .to_vec(),
        )],
        query: "q".to_owned(),
        ..AssembleRequest::default()
    };
    let offer = Offer::of(&req, |t| t.len() as u32);
    assert_eq!(offer.total(), 7);
    assert_eq!(offer.measure([], 0), (7, 3));
    assert_eq!(offer.measure(["i3", "unknown"], 0), (7, 6));
    // A prefix of 10 before each of the four texts.
    assert_eq!(offer.measure(["i3"], 10), (47, 36));
}
