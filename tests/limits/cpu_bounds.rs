//! Issue 15's CPU bounds through a real server: the lists a client sizes are
//! bounded and refused by field, hostile shapes within the bounds are
//! answered, and the small bad inputs are answered as documented.

use crate::common::{self, TestServer, violations};
use crate::shapes;
use context_assembler::grpc::pb;
use context_assembler::prompt::{MAX_PRINCIPAL_SCOPES, MAX_SCOPES_PER_ITEM, MAX_TOOL_CALL_IDS_PER_MESSAGE};

#[tokio::test]
async fn lists_past_their_bounds_are_invalid_arguments_naming_the_field() {
    let server = TestServer::start().await;
    let mut client = server.client();

    let scopes = shapes::many_scopes(2, MAX_SCOPES_PER_ITEM + 1, MAX_PRINCIPAL_SCOPES + 1);
    let status = client.assemble(scopes).await.unwrap_err();
    assert_eq!(
        violations(&status),
        vec![
            "principal.scopes",
            "blocks[0].items[0].required_scopes",
            "blocks[0].items[1].required_scopes"
        ]
    );

    let calls = shapes::tool_calls_answered_from_the_end(1, MAX_TOOL_CALL_IDS_PER_MESSAGE + 1);
    let status = client.assemble(calls).await.unwrap_err();
    assert_eq!(violations(&status), vec!["blocks[0].items[1].tool_call_ids"]);

    // At the bounds exactly: answered.
    let scopes = shapes::many_scopes(2, MAX_SCOPES_PER_ITEM, MAX_PRINCIPAL_SCOPES);
    let out = client.assemble(scopes).await.unwrap().into_inner();
    assert_eq!(out.decisions[0].kept_item_ids, vec!["e0", "e1"]);
    let calls = shapes::tool_calls_answered_from_the_end(1, MAX_TOOL_CALL_IDS_PER_MESSAGE);
    let out = client.assemble(calls).await.unwrap().into_inner();
    assert!(
        out.warnings.iter().all(|w| !w.code.contains("TOOL")),
        "{:?}",
        out.warnings
    );
    server.stop().await;
}

#[tokio::test]
async fn a_blank_summary_is_truncated_to_its_sentence() {
    let server = TestServer::start().await;
    let out = server
        .client()
        .assemble(shapes::whitespace_summary(256 << 10))
        .await
        .unwrap()
        .into_inner();
    let d = &out.decisions[0];
    assert_eq!(
        d.outcome(),
        pb::Outcome::Dropped,
        "8 tokens hold no sentence: {d:?}"
    );
    server.stop().await;
}

#[tokio::test]
async fn an_empty_compact_form_is_not_a_compact_form() {
    let server = TestServer::start().await;
    let mut req = common::heavy_request(1, 1, 20_000);
    req.max_input_tokens = Some(200);
    req.blocks[0].items[0].compact_form = Some(String::new());
    let out = server.client().assemble(req).await.unwrap().into_inner();
    let d = &out.decisions[0];
    assert!(d.compacted_item_ids.is_empty(), "{d:?}");
    assert_eq!(d.dropped_item_ids, vec!["e0"]);
    assert!(out.messages.iter().all(|m| !m.content.contains("<document")));
    server.stop().await;
}
