//! Writes `examples/rag-32k.json`, the preview page's large example: the
//! synthetic retrieval chat of `workload::request` at about 36k tokens
//! offered for a 32k budget, plus an evidence item the principal may not
//! see (its content must never reach the page).
//! Usage: cargo run --example preview_example > examples/rag-32k.json
#![allow(clippy::unwrap_used, clippy::expect_used)]

use context_assembler::grpc::pb;
use context_assembler::prompt::{BlockKind, Item};
use context_assembler::workload::{Shape, request};

fn main() {
    let mut r = request(Shape::new(36_000, 40), 32);
    r.request_id = "rag-32k".to_owned();
    r.max_input_tokens = Some(32_000);
    if let Some(evidence) = r.blocks.iter_mut().find(|b| b.kind == BlockKind::Evidence) {
        evidence.items.insert(
            1,
            Item {
                id: "partner-discounts".to_owned(),
                content: "Internal: partner discount code ACME-PARTNER-7731 gives 40% off annual plans."
                    .to_owned(),
                score: 0.97,
                source: "internal/partners.md".to_owned(),
                required_scopes: vec!["finance".to_owned()],
                ..Item::default()
            },
        );
    }
    let wire = pb::AssembleRequest::from(r);
    println!("{}", serde_json::to_string_pretty(&wire).unwrap());
}
