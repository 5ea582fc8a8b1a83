use proptest::prelude::*;
use prost::Message as _;

use super::*;
use crate::workload::replay::Replay;
use crate::workload::{self, Rng};

fn encode(m: &impl prost::Message) -> Vec<u8> {
    m.encode_to_vec()
}

#[test]
fn every_message_of_the_proto_has_its_struct_size() {
    let set = prost_types::FileDescriptorSet::decode(pb::FILE_DESCRIPTOR_SET).unwrap();
    let known: Vec<&str> = STRUCT_SIZES.iter().map(|&(n, _)| n).collect();
    for file in &set.file {
        for m in &file.message_type {
            let name = format!("{}.{}", file.package(), m.name());
            assert!(
                known.contains(&name.as_str()),
                "{name} is missing from STRUCT_SIZES"
            );
            assert!(m.nested_type.is_empty(), "{name}: nested types are not measured");
        }
    }
}

/// A request of one block of `items`, for `model`.
fn one_block(model: &str, items: Vec<pb::Item>) -> pb::AssembleRequest {
    pb::AssembleRequest {
        model: model.into(),
        blocks: vec![pb::Block {
            items,
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// The replay workload's requests on the wire: two families, `users`
/// users, `turns` turns, prompts of about `tokens` tokens.
fn replay_requests(users: usize, turns: usize, tokens: usize) -> Vec<pb::AssembleRequest> {
    let replay = Replay {
        families: 2,
        users,
        turns,
        prompt_tokens: tokens,
        ..Replay::default()
    };
    replay
        .requests()
        .into_iter()
        .map(|r| pb::AssembleRequest::from(r.request))
        .collect()
}

#[test]
fn counts_equal_the_decoded_counts() {
    let requests = replay_requests(3, 4, 2_000);
    for r in &requests {
        let m = Schema::get().measure(Root::Assemble, &encode(r));
        assert_eq!(m.blocks, r.blocks.len() as u64);
        assert_eq!(
            m.items,
            r.blocks.iter().map(|b| b.items.len() as u64).sum::<u64>()
        );
        assert_eq!(m.requests, 0);
    }
    let batch = pb::AssembleBatchRequest { requests };
    let m = Schema::get().measure(Root::AssembleBatch, &encode(&batch));
    assert_eq!(m.requests, batch.requests.len() as u64);
    // Items of the batch's members are not root counts.
    assert_eq!((m.blocks, m.items), (0, 0));
}

#[test]
fn ordinary_requests_weigh_far_below_the_bound() {
    // The replay workload at every size the benches use, and a batch of it.
    let mut worst = 0.0f64;
    for tokens in [1_000, 4_000, 8_000, 32_000] {
        let wire = replay_requests(2, 6, tokens);
        for r in &wire {
            let bytes = encode(r);
            let m = Schema::get().measure(Root::Assemble, &bytes);
            worst = worst.max(m.decoded_bytes as f64 / bytes.len() as f64);
        }
        let batch = encode(&pb::AssembleBatchRequest { requests: wire });
        let m = Schema::get().measure(Root::AssembleBatch, &batch);
        worst = worst.max(m.decoded_bytes as f64 / batch.len() as f64);
    }
    for items in [10, 100, 1_000] {
        let r = pb::AssembleRequest::from(workload::request(workload::Shape::new(8_000, items), 3));
        let bytes = encode(&r);
        let m = Schema::get().measure(Root::Assemble, &bytes);
        worst = worst.max(m.decoded_bytes as f64 / bytes.len() as f64);
    }
    assert!(
        worst * 2.0 <= DECODE_AMPLIFICATION as f64,
        "an ordinary request weighs {worst:.1} bytes decoded per wire byte"
    );
}

#[test]
fn a_request_at_the_item_limit_fits_however_small_its_items() {
    for max_items in [1u32, 100, 10_000] {
        let items = (0..max_items)
            .map(|i| pb::Item {
                id: format!("{}", i % 10),
                ..Default::default()
            })
            .collect();
        let r = one_block("m", items);
        let bytes = encode(&r);
        let m = Schema::get().measure(Root::Assemble, &bytes);
        assert!(m.decoded_bytes <= Measure::allowed(bytes.len() as u64, Measure::allowance(max_items)));
    }
}

#[test]
fn empty_sub_messages_weigh_their_structs() {
    let requests = vec![pb::AssembleRequest::default(); 1_000];
    let bytes = encode(&pb::AssembleBatchRequest { requests });
    assert_eq!(bytes.len(), 2_000);
    let m = Schema::get().measure(Root::AssembleBatch, &bytes);
    assert_eq!(m.requests, 1_000);
    let per = 2 * size_of::<pb::AssembleRequest>() as u64;
    assert!(m.decoded_bytes >= 1_000 * per);
    assert!(m.decoded_bytes > Measure::allowed(bytes.len() as u64, 0));

    let items = vec![pb::Item::default(); 5_000];
    let r = one_block("", items);
    let m = Schema::get().measure(Root::Assemble, &encode(&r));
    assert_eq!((m.blocks, m.items), (1, 5_000));
    assert!(m.decoded_bytes >= 5_000 * 2 * size_of::<pb::Item>() as u64);
}

/// Bytes of `tag` for field `number` of wire type `wire`.
fn tag(number: u64, wire: u64, out: &mut Vec<u8>) {
    let mut v = (number << 3) | wire;
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[test]
fn a_group_or_an_unknown_field_does_not_hide_what_follows() {
    let mut bytes = Vec::new();
    // An unknown group holding a nested group and a string, then 100 blocks.
    tag(99, 3, &mut bytes);
    tag(98, 3, &mut bytes);
    tag(98, 4, &mut bytes);
    tag(5, 2, &mut bytes);
    bytes.extend([2, b'h', b'i']);
    tag(99, 4, &mut bytes);
    tag(77, 2, &mut bytes);
    bytes.extend([1, 0]);
    for _ in 0..100 {
        tag(6, 2, &mut bytes);
        bytes.push(0);
    }
    // prost agrees that this is a valid request with 100 blocks.
    assert_eq!(
        pb::AssembleRequest::decode(bytes.as_slice())
            .unwrap()
            .blocks
            .len(),
        100
    );
    let m = Schema::get().measure(Root::Assemble, &bytes);
    assert_eq!(m.blocks, 100);
    assert_eq!(m.scanned_bytes, bytes.len() as u64);
}

#[test]
fn a_malformed_tail_is_measured_up_to_its_fault() {
    let items = vec![pb::Item::default(); 1_000];
    let r = one_block("", items);
    let mut bytes = encode(&r);
    let whole = bytes.len();
    bytes.extend([0xff, 0xff]);
    let m = Schema::get().measure(Root::Assemble, &bytes);
    assert_eq!((m.blocks, m.items), (1, 1_000));
    assert_eq!(m.scanned_bytes, whole as u64);
    assert!(pb::AssembleRequest::decode(bytes.as_slice()).is_err());
}

#[test]
fn nesting_deeper_than_prost_allows_stops_the_walk() {
    // Items inside blocks, and garbage nested 200 deep in an Item's place.
    let mut inner = Vec::new();
    for _ in 0..200 {
        let mut outer = Vec::new();
        tag(7, 2, &mut outer);
        outer.push(u8::try_from(inner.len().min(127)).unwrap());
        outer.extend(&inner[..inner.len().min(127)]);
        inner = outer;
    }
    let m = Schema::get().measure(Root::Assemble, &inner);
    assert!(m.scanned_bytes <= inner.len() as u64);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any bytes: the scan ends, never reads past the message, and whenever
    /// prost decodes them, the counts are the decoded counts.
    #[test]
    fn arbitrary_bytes_are_measured_safely(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let m = Schema::get().measure(Root::Assemble, &bytes);
        prop_assert!(m.scanned_bytes <= bytes.len() as u64);
        if let Ok(r) = pb::AssembleRequest::decode(bytes.as_slice()) {
            prop_assert_eq!(m.blocks, r.blocks.len() as u64);
            prop_assert_eq!(m.items, r.blocks.iter().map(|b| b.items.len() as u64).sum::<u64>());
        }
    }

    /// Generated requests of random shape: counts exact, cost above the
    /// structs and strings they hold.
    #[test]
    fn generated_requests_are_counted_exactly(seed in any::<u64>(), blocks in 0usize..6, items in 0usize..40) {
        let mut rng = Rng::new(seed);
        let r = pb::AssembleRequest {
            model: "gpt-4o".into(),
            blocks: (0..blocks)
                .map(|b| pb::Block {
                    name: format!("b{b}"),
                    items: (0..rng.below(items + 1))
                        .map(|i| pb::Item {
                            id: format!("i{i}"),
                            content: workload::prose(&mut rng, 40),
                            required_scopes: vec!["s".into(); rng.below(3)],
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        let bytes = encode(&r);
        let m = Schema::get().measure(Root::Assemble, &bytes);
        prop_assert_eq!(m.blocks, r.blocks.len() as u64);
        let n: usize = r.blocks.iter().map(|b| b.items.len()).sum();
        prop_assert_eq!(m.items, n as u64);
        let strings: usize = r.blocks.iter().flat_map(|b| &b.items).map(|i| i.content.len() + i.id.len()).sum();
        prop_assert!(m.decoded_bytes >= (n * size_of::<pb::Item>() + strings) as u64);
    }
}
