use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::memory::rank::rank;
use crate::memory::store::Candidate;
use crate::prompt::{Block, BlockKind, Item, Principal};

const DAY: i64 = 86_400_000;
const NOW: i64 = 1000 * DAY;
const WEEK: Duration = Duration::from_secs(7 * 86_400);

fn candidate(seq: i64, title: &str, body: &str, age_days: i64, relevance: f64) -> Candidate {
    Candidate {
        id: MemoryId::stored(format!("{seq:032x}")),
        seq,
        memory_type: "decision".into(),
        title: title.into(),
        body: body.into(),
        created_at_ms: NOW - age_days * DAY,
        relevance,
    }
}

fn id(seq: i64) -> MemoryId {
    MemoryId::stored(format!("{seq:032x}"))
}

/// Ranked as a recall ranks them, then chosen for `request`.
fn choose(candidates: Vec<Candidate>, max: usize, request: &AssembleRequest) -> Chosen {
    Recalled {
        ranked: rank(candidates, NOW, WEEK, usize::MAX),
        max,
    }
    .choose(request)
}

fn seqs(chosen: &Chosen) -> Vec<i64> {
    chosen.memories.iter().map(|r| r.candidate.seq).collect()
}

fn item(id: &str, content: &str) -> Item {
    Item {
        id: id.into(),
        content: content.into(),
        ..Item::default()
    }
}

fn request(blocks: Vec<Block>) -> AssembleRequest {
    AssembleRequest {
        blocks,
        ..AssembleRequest::default()
    }
}

/// A recalled memory's item content, as the prompt gets it.
fn content(c: &Candidate) -> String {
    let ranked = Ranked {
        candidate: c.clone(),
        score: 0.0,
    };
    crate::memory::keeper::items(&[ranked]).remove(0).content
}

#[test]
fn normalizing_trims_collapses_whitespace_and_keeps_case() {
    assert_eq!(
        normalized("  Use\tEd25519\r\n\n   keys.  \n"),
        "Use Ed25519 keys."
    );
    // Unicode White_Space: no-break, em and ideographic spaces, a line
    // separator.
    assert_eq!(
        normalized("a\u{a0}b\u{2003}\u{2003}c\u{3000}d\u{2028}e"),
        "a b c d e"
    );
    assert_eq!(normalized(" \n\t "), "");
    assert_eq!(normalized("Set PATH"), "Set PATH");
    assert_ne!(normalized("Set PATH"), normalized("set path"));
    // Pieces read as if joined by whitespace: a title and its body are
    // the item's content, normalized.
    let mut out = String::new();
    assert!(normalize_into(&mut out, &["Title ", "\n body  text"], usize::MAX));
    assert_eq!(out, normalized("Title \n\n body  text"));
    assert_eq!(out, "Title body text");
    assert!(normalize_into(&mut out, &["", " x "], usize::MAX));
    assert_eq!(out, "x");
    // The limit is on the normalized form: whitespace does not count, and
    // reading stops at the first character past it.
    assert!(normalize_into(&mut out, &["  ab   cd  "], 5));
    assert_eq!(out, "ab cd");
    assert!(!normalize_into(&mut out, &["ab cde"], 5));
    assert!(!normalize_into(&mut out, &["ab\u{e9}"], 3), "é is two bytes");
}

/// The one definition of a memory's text: what its item shows, whichever
/// way the title is shown.
#[test]
fn a_memory_is_compared_by_its_item_s_content() {
    for c in [
        candidate(1, "Rotate keys", "Keys rotate weekly.", 0, 0.0),
        candidate(2, "Keys rotate", "Keys rotate weekly.", 0, 0.0),
        candidate(3, "", "Keys rotate weekly.", 0, 0.0),
    ] {
        let mut out = String::new();
        normalize_into(&mut out, &shown(&c), usize::MAX);
        assert_eq!(out, normalized(&content(&c)), "{c:?}");
    }
}

/// The same fact retained twice (another layout, stored later) is
/// recalled once: the better ranked, and the other is reported as its
/// repeat; its place goes to the next memory.
#[test]
fn the_same_fact_retained_twice_is_recalled_once() {
    let chosen = choose(
        vec![
            candidate(1, "", "Tokens are signed with Ed25519 keys.", 3, 2.0),
            candidate(2, "", "  Tokens are signed\nwith   Ed25519 keys.\n", 1, 1.0),
            candidate(3, "", "Logs ship over TLS.", 2, 0.0),
        ],
        2,
        &request(Vec::new()),
    );
    assert_eq!(seqs(&chosen), [1, 3]);
    assert_eq!(
        chosen.duplicates,
        [Duplicate {
            id: id(2),
            of: Original::Memory(id(1)),
        }]
    );
}

/// Two alike memories tied on score: the ranking's tie order decides which
/// is kept (the newer, then the later stored), never the store's order.
#[test]
fn which_of_two_alike_memories_is_kept_does_not_depend_on_the_store_s_order() {
    let candidates = vec![
        candidate(5, "", "Deploys are blue-green.", 2, 1.0),
        candidate(8, "", "Deploys are  blue-green.", 2, 1.0),
        candidate(7, "", "Deploys are blue-green. ", 2, 1.0),
        candidate(4, "", "Flags are cached an hour.", 2, 1.0),
    ];
    let expected = choose(candidates.clone(), 10, &request(Vec::new()));
    assert_eq!(seqs(&expected), [8, 4]);
    let repeats: Vec<&MemoryId> = expected.duplicates.iter().map(|d| &d.id).collect();
    assert_eq!(repeats, [&id(7), &id(5)]);
    for turn in 0..candidates.len() {
        let mut shuffled = candidates.clone();
        shuffled.rotate_left(turn);
        assert_eq!(choose(shuffled.clone(), 10, &request(Vec::new())), expected);
        shuffled.reverse();
        assert_eq!(choose(shuffled, 10, &request(Vec::new())), expected);
    }
}

/// A memory whose text an item of the request already holds, in any block
/// (here an EVIDENCE block, not the MEMORY block recall fills), is not
/// recalled; an item the principal may not see (filtered from the prompt)
/// does not count.
#[test]
fn a_memory_equal_to_an_item_of_another_block_is_not_recalled() {
    let repeated = candidate(1, "Replication lag", "Alerted at 30 seconds.", 1, 1.0);
    let hidden = candidate(2, "", "Payroll runs at 02:00.", 1, 1.0);
    let mut secret = item("payroll", "Payroll runs at 02:00.");
    secret.required_scopes = vec!["payroll".into()];
    let mut req = request(vec![
        Block::new(
            "profile",
            BlockKind::Memory,
            vec![item("pref", "Prefers short answers.")],
        ),
        Block::new(
            "docs",
            BlockKind::Evidence,
            vec![
                item("d0", "Unrelated."),
                item("d1", "Replication lag\n  alerted at 30 seconds."),
                item("d2", " Replication lag\nAlerted at 30 seconds. "),
                secret,
            ],
        ),
    ]);
    let chosen = choose(vec![repeated.clone(), hidden.clone()], 10, &req);
    assert_eq!(seqs(&chosen), [2]);
    assert_eq!(
        chosen.duplicates,
        [Duplicate {
            id: id(1),
            of: Original::Item {
                block: 1,
                block_name: "docs".into(),
                id: "d2".into(),
            },
        }]
    );
    // With the scope, the payroll item is in the prompt: not recalled.
    req.principal = Principal {
        id: "p".into(),
        scopes: vec!["payroll".into()],
    };
    let chosen = choose(vec![repeated, hidden], 10, &req);
    assert!(chosen.memories.is_empty(), "{chosen:?}");
    assert_eq!(chosen.duplicates.len(), 2);
}

/// Different facts are all kept, best first, up to `max`: a difference of
/// case or of a single character is a different text.
#[test]
fn different_facts_are_kept() {
    let candidates = vec![
        candidate(1, "", "Set PATH before the build.", 1, 3.0),
        candidate(2, "", "set path before the build.", 1, 2.0),
        candidate(3, "", "Set PATH before the build!", 1, 1.0),
        candidate(4, "Set PATH", "before the build.", 1, 0.0),
    ];
    let req = request(vec![Block::new(
        "docs",
        BlockKind::Evidence,
        vec![item("d", "Set PATH before the build")],
    )]);
    let chosen = choose(candidates.clone(), 10, &req);
    assert_eq!(seqs(&chosen), [1, 2, 3]);
    // The fourth's title and body are the first's text, on two lines.
    assert_eq!(chosen.duplicates.len(), 1);
    assert_eq!(chosen.duplicates[0].of, Original::Memory(id(1)));
    let two = choose(candidates, 2, &req);
    assert_eq!(seqs(&two), [1, 2]);
    assert!(two.duplicates.is_empty(), "ranked past the last chosen");
}

/// The work is linear: a digest per memory considered and one per item of
/// the request as long as a memory (normalized), whatever their number (no
/// text compared with another); other items, and above all one longer than
/// every memory, are never digested. Counted, not timed.
#[test]
fn the_work_is_a_digest_per_memory_and_per_item() {
    let long = "word ".repeat(100_000);
    for n in [10_i64, 80] {
        // Texts of 10 bytes ("memory 007"), two memories each.
        let candidates: Vec<Candidate> = (0..n)
            .map(|i| candidate(i, "", &format!("memory {:03}", i / 2), i % 5, 1.0))
            .collect();
        // Half of the items as long as a memory once normalized ("memorx
        // 006"), half shorter.
        let mut items: Vec<Item> = (0..n)
            .map(|i| {
                let content = if i % 2 == 0 {
                    format!("  memorx \n {i:03} ")
                } else {
                    format!("item {i}")
                };
                item(&format!("i{i}"), &content)
            })
            .collect();
        items.push(item("long", &long));
        let req = request(vec![Block::new("docs", BlockKind::Evidence, items)]);
        let recalled = Recalled {
            ranked: rank(candidates, NOW, WEEK, usize::MAX),
            max: usize::MAX,
        };
        let digests = DIGESTS.with(std::cell::Cell::get);
        let bytes = digest::hashed_bytes();
        let chosen = recalled.choose(&req);
        let digests = DIGESTS.with(std::cell::Cell::get) - digests;
        let bytes = digest::hashed_bytes() - bytes;
        assert_eq!(chosen.memories.len() as i64, n / 2);
        assert_eq!(digests as i64, n + n / 2, "n = {n}");
        assert_eq!(bytes, 10 * (n + n / 2) as u64, "n = {n}");
    }
}

/// The warning names ids (the memory left out, the memory or the item and
/// block it repeats), never the text, and points at what it repeats.
#[test]
fn the_warning_names_ids_never_text() {
    let text = "The payroll export runs at 02:00.";
    let req = request(vec![Block::new(
        "docs",
        BlockKind::Evidence,
        vec![item("d1", text)],
    )]);
    let chosen = choose(
        vec![
            candidate(1, "", text, 1, 1.0),
            candidate(2, "", "Keys rotate weekly.", 1, 1.0),
            candidate(3, "", "Keys rotate  weekly.", 2, 1.0),
        ],
        10,
        &req,
    );
    assert!(Chosen::default().warning(1).is_none());
    let warning = chosen.warning(1).unwrap();
    assert_eq!(warning.code, codes::MEMORY_DUPLICATE);
    assert_eq!(
        warning.message,
        format!(
            "recalled memories left out, their text already in the request: \
             {} (as item \"d1\" of block \"docs\"), {} (as memory {})",
            id(1),
            id(3),
            id(2)
        )
    );
    for word in ["payroll", "Keys", "rotate"] {
        assert!(!warning.message.contains(word), "{word}");
    }
    assert_eq!(
        warning.about,
        [
            WarningRef::Item {
                block: 0,
                id: "d1".into()
            },
            WarningRef::Item {
                block: 1,
                id: item_id(&id(2))
            },
        ]
    );
}

/// Texts from a few facts, each written in one of several layouts (case
/// kept: a case change is another fact).
fn text() -> impl Strategy<Value = String> {
    let facts = [
        "Keys rotate weekly.",
        "Deploys are blue-green.",
        "Logs ship over TLS.",
        "keys rotate weekly.",
    ];
    let layouts = ["{}", "  {}", "{}\n", "{} ", "\t{}\n\n"];
    (0..facts.len(), 0..layouts.len(), any::<bool>()).prop_map(move |(f, l, split)| {
        let fact = if split {
            facts[f].replacen(' ', " \n  ", 1)
        } else {
            facts[f].to_owned()
        };
        layouts[l].replace("{}", &fact)
    })
}

proptest! {
    /// For any candidates (texts repeated in other layouts, scores tied
    /// often) and any request: no two memories chosen say the same, none
    /// says what a visible item says, each is the best-ranked of its text,
    /// as many are chosen as distinct texts allow, every reported repeat is
    /// one, and the store's order of the candidates changes nothing.
    #[test]
    fn chosen_memories_are_distinct_best_and_independent_of_the_store_s_order(
        (raw, order) in prop::collection::vec(
            (text(), prop::option::of(text()), 0i64..3, 0u8..3),
            0..24,
        )
        .prop_flat_map(|raw| {
            let n = raw.len();
            (Just(raw), Just((0..n).collect::<Vec<usize>>()).prop_shuffle())
        }),
        items in prop::collection::vec((text(), any::<bool>()), 0..4),
        max in 0usize..10,
    ) {
        let candidates: Vec<Candidate> = raw
            .iter()
            .enumerate()
            .map(|(i, (body, title, age, rel))| {
                let title = title.as_deref().unwrap_or("");
                candidate(i as i64, title, body, *age, f64::from(*rel))
            })
            .collect();
        let items: Vec<Item> = items
            .iter()
            .enumerate()
            .map(|(i, (content, hidden))| {
                let mut it = item(&format!("i{i}"), content);
                if *hidden {
                    it.required_scopes = vec!["secret".into()];
                }
                it
            })
            .collect();
        let visible: Vec<String> = items
            .iter()
            .filter(|i| i.required_scopes.is_empty())
            .map(|i| normalized(&i.content))
            .collect();
        let req = request(vec![Block::new("docs", BlockKind::Evidence, items)]);
        let chosen = choose(candidates.clone(), max, &req);

        let ranking: Vec<(i64, String)> = rank(candidates.clone(), NOW, WEEK, usize::MAX)
            .iter()
            .map(|r| (r.candidate.seq, normalized(&content(&r.candidate))))
            .collect();
        let text_of = |seq: i64| ranking.iter().find(|(s, _)| *s == seq).map(|(_, t)| t.clone());
        let texts: Vec<String> = chosen.memories.iter().map(|r| normalized(&content(&r.candidate))).collect();
        for (i, t) in texts.iter().enumerate() {
            prop_assert!(!texts[..i].contains(t), "{t:?} twice");
            prop_assert!(!visible.contains(t), "{t:?} is an item's");
        }
        // Each chosen is the first of its text in the ranking.
        for r in &chosen.memories {
            let t = text_of(r.candidate.seq);
            let first = ranking.iter().find(|(_, x)| Some(x) == t.as_ref()).map(|(s, _)| *s);
            prop_assert_eq!(first, Some(r.candidate.seq));
        }
        let mut distinct: Vec<&String> = ranking.iter().map(|(_, t)| t).filter(|t| !visible.contains(t)).collect();
        distinct.sort();
        distinct.dedup();
        prop_assert_eq!(chosen.memories.len(), distinct.len().min(max));
        for d in &chosen.duplicates {
            let seq = ranking.iter().find(|(s, _)| id(*s) == d.id).map(|(s, _)| *s);
            let t = seq.and_then(text_of);
            match &d.of {
                Original::Memory(kept) => {
                    let kept = chosen.memories.iter().find(|r| &r.candidate.id == kept);
                    prop_assert!(kept.is_some(), "the repeated memory is chosen");
                    prop_assert_eq!(kept.and_then(|r| text_of(r.candidate.seq)), t);
                }
                Original::Item { id, .. } => {
                    let found = req.blocks[0].items.iter().find(|i| &i.id == id);
                    prop_assert_eq!(found.map(|i| normalized(&i.content)), t);
                }
            }
        }

        // Any order of the same candidates: the same choice.
        let shuffled: Vec<Candidate> = order.iter().map(|&i| candidates[i].clone()).collect();
        prop_assert_eq!(choose(shuffled, max, &req), chosen);
    }
}
