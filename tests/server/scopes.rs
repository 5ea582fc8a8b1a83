//! Who sees which Assemble item: an item is shown only to a principal that
//! holds *all* of its `required_scopes`. Every subset of required scopes is
//! tried against every subset of held scopes (orders shuffled, unrelated
//! scopes mixed in), through Assemble, AssembleBatch (principals mixed in one
//! batch) and AssembleStream (principals alternating on one stream), and
//! each answer is checked item by item.
//!
//! Recall too: two subjects each store a memory per subset of required
//! scopes, and a batch and a stream mixing subjects and principals must
//! recall, for each request, exactly its subject's memories that its
//! principal may see.
//!
//! The oracle is written apart from the production check: scopes are bits of
//! a mask, and an item is visible when `required & !held == 0`. A filter that
//! hides every scoped item, or that checks any-of instead of all-of, fails.

use crate::common::TestServer;
use context_assembler::grpc::pb;

/// The scopes the matrix draws from; a mask's bit `i` is `SCOPES[i]`.
const SCOPES: [&str; 3] = ["billing", "hr", "legal"];
/// Every subset of [`SCOPES`].
const MASKS: std::ops::Range<u8> = 0..(1 << SCOPES.len());

/// The oracle: visible when every required bit is held.
fn visible(required: u8, held: u8) -> bool {
    required & !held == 0
}

/// The scope names of `mask`, in an order that depends on `turn` (each
/// rotation of the names), so no check may rely on order.
fn names(mask: u8, turn: usize) -> Vec<String> {
    let mut v: Vec<String> = (0..SCOPES.len())
        .filter(|&i| mask & (1 << i) != 0)
        .map(|i| SCOPES[i].to_owned())
        .collect();
    if !v.is_empty() {
        let by = turn % v.len();
        v.rotate_left(by);
    }
    v
}

/// A word that stands in an item's content only, so its presence in the
/// prompt says the item was rendered.
fn marker(required: u8, variant: usize) -> String {
    format!("marker{required}x{variant}q")
}

fn item_id(required: u8, variant: usize) -> String {
    format!("needs-{required}-{variant}")
}

/// Two items per subset of required scopes (their scope lists in different
/// orders); a principal holding `held` (plus a scope that guards nothing).
fn request(held: u8, turn: usize) -> pb::AssembleRequest {
    let items = MASKS
        .flat_map(|required| {
            (0..2).map(move |variant| pb::Item {
                id: item_id(required, variant),
                content: format!(
                    "Evidence {} says {}.",
                    item_id(required, variant),
                    marker(required, variant)
                ),
                score: 1.0,
                required_scopes: names(required, variant + usize::from(required)),
                ..Default::default()
            })
        })
        .collect();
    let mut scopes = names(held, turn);
    scopes.insert(turn % (scopes.len() + 1), "unrelated".to_owned());
    pb::AssembleRequest {
        request_id: format!("held-{held}-{turn}"),
        model: "gpt-4o".to_owned(),
        blocks: vec![pb::Block {
            name: "kb".to_owned(),
            kind: pb::BlockKind::Evidence.into(),
            items,
            ..Default::default()
        }],
        query: "Which documents apply?".to_owned(),
        principal: Some(pb::Principal {
            id: format!("principal-{held}"),
            scopes,
        }),
        ..Default::default()
    }
}

/// Checks one answer to [`request`]`(held, _)` item by item: the decisions
/// list each item as kept or filtered as the oracle says, and the prompt
/// holds exactly the visible items' words.
fn check(resp: &pb::AssembleResponse, held: u8) {
    let d = resp
        .decisions
        .iter()
        .find(|d| d.name == "kb")
        .expect("a decision for the block");
    let text: String = resp.messages.iter().map(|m| m.content.as_str()).collect();
    let mut shown = 0;
    for required in MASKS {
        for variant in 0..2 {
            let id = item_id(required, variant);
            let want = visible(required, held);
            let kept = d.kept_item_ids.contains(&id);
            let filtered = d.filtered_item_ids.contains(&id);
            assert_eq!(
                (kept, filtered),
                (want, !want),
                "held {held:03b}, item requires {required:03b}: kept {kept}, filtered {filtered}"
            );
            assert_eq!(
                text.contains(&marker(required, variant)),
                want,
                "held {held:03b}, item requires {required:03b}: rendered is not what the oracle says"
            );
            shown += usize::from(want);
        }
    }
    // All-of, not any-of: a principal sees 2 x 2^|held| items.
    assert_eq!(shown, 2 << held.count_ones(), "held {held:03b}");
    assert!(
        d.dropped_item_ids.is_empty(),
        "the budget is large: nothing is dropped"
    );
}

fn response(r: Option<&pb::AssembleResult>) -> &pb::AssembleResponse {
    match r.and_then(|r| r.result.as_ref()) {
        Some(pb::assemble_result::Result::Response(resp)) => resp,
        other => panic!("not a response: {other:?}"),
    }
}

#[test]
fn the_oracle_is_all_of() {
    // Any-of would show `billing+hr` to a principal holding `billing`.
    assert!(!visible(0b011, 0b001));
    assert!(visible(0b011, 0b111));
    assert!(visible(0, 0));
    assert!(!visible(0b100, 0b011));
}

#[tokio::test]
async fn every_subset_of_required_scopes_against_every_subset_held() {
    let server = TestServer::start().await;
    let mut client = server.client();
    for held in MASKS {
        for turn in 0..2 {
            let resp = client.assemble(request(held, turn)).await.unwrap().into_inner();
            check(&resp, held);
        }
    }
    server.stop().await;
}

#[tokio::test]
async fn a_batch_mixing_principals_filters_each_request_under_its_own() {
    let server = TestServer::start().await;
    // Every principal, in an order that is neither ascending nor grouped.
    let order: Vec<u8> = MASKS.map(|m| (m * 5 + 3) % 8).collect();
    let batch = pb::AssembleBatchRequest {
        requests: order.iter().enumerate().map(|(i, &h)| request(h, i)).collect(),
    };
    let out = server.client().assemble_batch(batch).await.unwrap().into_inner();
    assert_eq!(out.results.len(), order.len());
    for (i, &held) in order.iter().enumerate() {
        check(response(out.results.get(i)), held);
    }
    server.stop().await;
}

#[tokio::test]
async fn a_stream_alternating_principals_filters_each_message_under_its_own() {
    let server = TestServer::start().await;
    // Alternates a principal holding little with one holding more.
    let order: Vec<u8> = MASKS.flat_map(|m| [m, 7 - m]).collect();
    let requests: Vec<pb::AssembleRequest> = order.iter().enumerate().map(|(i, &h)| request(h, i)).collect();
    let mut answers = server.stream(requests).await;
    let mut n = 0;
    while let Some(a) = answers.message().await.unwrap() {
        let i = usize::try_from(a.index).unwrap();
        check(response(a.result.as_ref()), order[i]);
        n += 1;
    }
    assert_eq!(n, order.len());
    server.stop().await;
}

// ---------------------------------------------------------------------------
// Recall: each request of a batch or stream recalls under its own principal
// and subject.
// ---------------------------------------------------------------------------

/// Two subjects; each stores one memory per subset of required scopes.
const SUBJECTS: [&str; 2] = ["tenant-a/alice", "tenant-b/bob"];

/// The marker of subject `s`'s memory that requires `required`.
fn memory_marker(s: usize, required: u8) -> String {
    format!("memo{s}r{required}z")
}

/// Stores every subject's memories; returns each memory's id by (subject,
/// required mask).
async fn store_memories(
    client: &mut pb::assembler_client::AssemblerClient<tonic::transport::Channel>,
) -> std::collections::HashMap<String, (usize, u8)> {
    let mut ids = std::collections::HashMap::new();
    for (s, subject) in SUBJECTS.iter().enumerate() {
        for required in MASKS {
            let out = client
                .retain(pb::RetainRequest {
                    idempotency_key: format!("{subject}/{required}"),
                    subject: (*subject).to_owned(),
                    required_scopes: names(required, s),
                    request_id: "store".to_owned(),
                    turn: 1,
                    model_output: format!(
                        "<observation><type>decision</type><text>Decision {}.</text></observation>",
                        memory_marker(s, required)
                    ),
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            assert_eq!(out.memory_ids.len(), 1, "{out:?}");
            ids.insert(out.memory_ids[0].clone(), (s, required));
        }
    }
    ids
}

/// A request recalling subject `s`'s memories as a principal holding `held`.
fn recall_request(s: usize, held: u8, turn: usize) -> pb::AssembleRequest {
    pb::AssembleRequest {
        request_id: format!("recall-{s}-{held}-{turn}"),
        model: "gpt-4o".to_owned(),
        query: "Which decisions apply?".to_owned(),
        principal: Some(pb::Principal {
            id: format!("principal-{s}-{held}"),
            scopes: names(held, turn),
        }),
        recall: Some(pb::Recall {
            subject: SUBJECTS[s].to_owned(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Checks one answer to [`recall_request`]`(s, held, _)`: it recalled exactly
/// subject `s`'s memories whose every required scope is held (the oracle),
/// kept them all, and the prompt holds exactly their markers.
fn check_recall(
    resp: &pb::AssembleResponse,
    ids: &std::collections::HashMap<String, (usize, u8)>,
    s: usize,
    held: u8,
) {
    let report = resp.recall.as_ref().expect("a recall report");
    let mut got: Vec<(usize, u8)> = report.recalled_ids.iter().map(|id| ids[id]).collect();
    got.sort_unstable();
    let want: Vec<(usize, u8)> = MASKS.filter(|&r| visible(r, held)).map(|r| (s, r)).collect();
    assert_eq!(got, want, "subject {s}, held {held:03b}: recalled");
    assert_eq!(
        report.kept_ids.len(),
        want.len(),
        "subject {s}, held {held:03b}: kept"
    );
    let text: String = resp.messages.iter().map(|m| m.content.as_str()).collect();
    for &(other, required) in ids.values() {
        assert_eq!(
            text.contains(&memory_marker(other, required)),
            other == s && visible(required, held),
            "subject {s}, held {held:03b}: memory of subject {other} requiring {required:03b}"
        );
    }
}

#[tokio::test]
async fn recall_in_a_batch_follows_each_requests_principal_and_subject() {
    let server = TestServer::start().await;
    let mut client = server.client();
    let ids = store_memories(&mut client).await;
    // Every (subject, principal), interleaved so neighbours differ in both.
    let order: Vec<(usize, u8)> = MASKS.flat_map(|m| [(0, (m * 5 + 3) % 8), (1, 7 - m)]).collect();
    let batch = pb::AssembleBatchRequest {
        requests: order
            .iter()
            .enumerate()
            .map(|(i, &(s, h))| recall_request(s, h, i))
            .collect(),
    };
    let out = client.assemble_batch(batch).await.unwrap().into_inner();
    assert_eq!(out.results.len(), order.len());
    for (i, &(s, held)) in order.iter().enumerate() {
        check_recall(response(out.results.get(i)), &ids, s, held);
    }
    server.stop().await;
}

#[tokio::test]
async fn recall_on_a_stream_follows_each_messages_principal_and_subject() {
    let server = TestServer::start().await;
    let ids = store_memories(&mut server.client()).await;
    let order: Vec<(usize, u8)> = MASKS.flat_map(|m| [(1, m), (0, 7 - m), (1, 7 - m)]).collect();
    let requests = order
        .iter()
        .enumerate()
        .map(|(i, &(s, h))| recall_request(s, h, i))
        .collect();
    let mut answers = server.stream(requests).await;
    let mut n = 0;
    while let Some(a) = answers.message().await.unwrap() {
        let (s, held) = order[usize::try_from(a.index).unwrap()];
        check_recall(response(a.result.as_ref()), &ids, s, held);
        n += 1;
    }
    assert_eq!(n, order.len());
    server.stop().await;
}
