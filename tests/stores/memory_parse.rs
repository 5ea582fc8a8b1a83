//! Model output whose fields hold code and markup, through a real server:
//! every field Retain parses comes back from ListMemories byte for byte
//! (issue 16). The generator is the parser's unit tests' own.

#[path = "../../src/memory/parse/tests/code_fields.rs"]
mod code_fields;

use std::sync::atomic::{AtomicU32, Ordering};

use crate::common::TestServer;
use code_fields::code_observation;
use context_assembler::grpc::pb;
use context_assembler::memory::Observation;
use context_assembler::memory::model::BUILTIN_TYPES;
use context_assembler::memory::parse::strip_private;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// One server for every case: each case retains under a subject of its own.
#[test]
fn code_in_fields_survives_retain_and_list_memories() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let server = rt.block_on(TestServer::start());
    let client = server.client();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let case = AtomicU32::new(0);
    let mut runner = TestRunner::new(Config {
        cases: 64,
        // Included by path, the generator has no source file to persist to.
        failure_persistence: None,
        ..Config::default()
    });
    let observations = prop::collection::vec(code_observation(), 1..4);
    runner
        .run(&observations, |observations| {
            let subject = format!("tenant-{nanos:x}/code-{}", case.fetch_add(1, Ordering::Relaxed));
            let output: String = observations
                .iter()
                .map(|(block, _)| format!("{block}\n"))
                .collect();
            let mut client = client.clone();
            let retained = rt
                .block_on(client.retain(pb::RetainRequest {
                    idempotency_key: subject.clone(),
                    subject: subject.clone(),
                    request_id: "r-1".to_owned(),
                    turn: 1,
                    model_output: output,
                    ..Default::default()
                }))
                .unwrap()
                .into_inner();
            prop_assert_eq!(&retained.problems, &vec![]);
            prop_assert_eq!(retained.memory_ids.len(), observations.len());
            let mut page = rt
                .block_on(client.list_memories(pb::ListMemoriesRequest {
                    subject: subject.clone(),
                    ..Default::default()
                }))
                .unwrap()
                .into_inner();
            // In the order Retain answered their ids (the list is newest first).
            let position = |id: &str| retained.memory_ids.iter().position(|r| r == id);
            prop_assert!(page.memories.iter().all(|m| position(&m.id).is_some()));
            page.memories.sort_by_key(|m| position(&m.id));
            let got: Vec<Observation> = page
                .memories
                .into_iter()
                .map(|m| match m.content {
                    Some(pb::stored_memory::Content::Observation(o)) => Observation::from(o),
                    other => panic!("not an observation: {other:?}"),
                })
                .collect();
            let want: Vec<Observation> = observations.into_iter().map(|(_, o)| o).collect();
            prop_assert_eq!(got, want);
            Ok(())
        })
        .unwrap();
    rt.block_on(server.stop());
}
