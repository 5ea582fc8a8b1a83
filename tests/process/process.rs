//! The real binary as a child process: SIGTERM drains in-flight calls of
//! every kind (held by the test, released after the drain began) and exits 0,
//! or abandons them at the drain deadline; earlier: SIGTERM drains requests and
//! exits 0; SIGHUP reloads models and policies, refuses a bad file and keeps
//! serving throughout.

use std::io::Write as _;

use crate::common::{self, ChildServer, heavy_request};
use prost::Message as _;
use std::time::{Duration, Instant};

use context_assembler::grpc::pb::{self, assembler_client::AssemblerClient};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

/// The sidecar with JSON logs at `info` and no memory store, plus `extra`.
fn spawn(extra: &[&str]) -> ChildServer {
    let mut args = vec!["--log-format", "json", "--memory-store", "off"];
    args.extend_from_slice(extra);
    ChildServer::spawn(&args, &[("RUST_LOG", "info")])
}

#[tokio::test]
async fn sigterm_drains_in_flight_requests_and_exits_zero() {
    let sidecar = spawn(&["--drain-secs", "30"]);
    let channel = sidecar.serving_channel().await;
    // A health Watch stream stays open, as a gateway's health checking keeps
    // one: the drain must not wait for it.
    let mut watch = HealthClient::new(channel.clone())
        .watch(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        watch.message().await.unwrap().unwrap().status,
        ServingStatus::Serving as i32
    );
    // Six requests in flight, held by the test: each has sent half its
    // message, so the server has them all before the signal, whatever the
    // machine's speed, and none can finish before it.
    let messages: Vec<Vec<u8>> = (0..6u64)
        .map(|seed| heavy_request(seed, 40, 200).encode_to_vec())
        .collect();
    let mut held = Vec::new();
    for m in &messages {
        held.push(
            common::HeldCall::start(
                sidecar.grpc,
                "/context_assembler.v1.Assembler/Assemble",
                m,
                m.len() / 2,
            )
            .await,
        );
    }
    let declared: usize = messages.iter().map(Vec::len).sum();
    sidecar
        .wait_for(
            "assembler_upload_budget_held_bytes",
            &[],
            declared as f64,
            "the held requests never reached the server",
        )
        .await;
    let signalled = terminate(&sidecar).await;
    // The drain has begun; they stay held well past the moment a drain that
    // counted only work in progress would end (a wait, not a verdict: a
    // correct drain waits the whole grace period for them).
    tokio::time::sleep(Duration::from_secs(1)).await;
    // The drain waits for them: released now, each is answered.
    for call in &mut held {
        call.release().await;
    }
    for call in held {
        let (code, body) = call.answer().await.expect("no answer during the drain");
        assert_eq!(code, 0, "an in-flight request failed during the drain");
        let response = pb::AssembleResponse::decode(&body[5..]).unwrap();
        assert!(response.usage.unwrap().total_tokens > 0);
    }
    let grpc = sidecar.grpc;
    assert_eq!(sidecar.exit_code(Duration::from_secs(30)).await, Some(0));
    // Once the requests were answered, the open Watch did not hold the exit
    // for the 30 s grace period.
    assert!(
        signalled.elapsed() < Duration::from_secs(20),
        "exit took {:?}",
        signalled.elapsed()
    );
    assert!(
        tokio::net::TcpStream::connect(grpc).await.is_err(),
        "still accepting after exit"
    );
}

#[tokio::test]
async fn sighup_reloads_models_and_policies_and_refuses_a_bad_file() {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    let model = |name: &str| {
        format!(
            "[[models]]\nname = \"{name}\"\nencoding = \"o200k_base\"\ncontext_window = 8000\noutput_reserve = 1000\n"
        )
    };
    file.write_all(model("first-model").as_bytes()).unwrap();
    let path = file.path().to_str().unwrap().to_owned();
    let sidecar = spawn(&["--config", &path]);
    let channel = sidecar.serving_channel().await;
    let mut client = AssemblerClient::new(channel.clone());
    let names = |r: pb::ListModelsResponse| r.models.into_iter().map(|m| m.name).collect::<Vec<_>>();
    let listed = names(
        client
            .list_models(pb::ListModelsRequest {})
            .await
            .unwrap()
            .into_inner(),
    );
    assert_eq!(listed, ["first-model"]);

    // Requests keep flowing through every reload.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let traffic = {
        let stop = stop.clone();
        let mut client = client.clone();
        tokio::spawn(async move {
            let mut n = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let r = client
                    .count_tokens(pb::CountTokensRequest {
                        text: "steady traffic".into(),
                        tokenizer: Some(pb::count_tokens_request::Tokenizer::Encoding(
                            "o200k_base".to_owned(),
                        )),
                    })
                    .await;
                assert!(r.is_ok(), "a request failed during a reload: {r:?}");
                n += 1;
            }
            n
        })
    };

    std::fs::write(
        &path,
        format!(
            "{}{}[policies.strict]\ncontext_role = \"system\"\n",
            model("first-model"),
            model("second-model")
        ),
    )
    .unwrap();
    sidecar.signal("-HUP");
    sidecar
        .wait_for(
            "assembler_config_reloads_total",
            &[("result", "applied")],
            1.0,
            "reload never applied",
        )
        .await;
    let listed = names(
        client
            .list_models(pb::ListModelsRequest {})
            .await
            .unwrap()
            .into_inner(),
    );
    assert_eq!(listed, ["first-model", "second-model"]);
    let mut req = heavy_request(1, 2, 100);
    req.model = "second-model".to_owned();
    req.policy = "strict".to_owned();
    let resp = client.assemble(req).await.unwrap().into_inner();
    let context = &resp.messages[resp.messages.len() - 2];
    assert_eq!(
        context.role,
        pb::Role::System as i32,
        "the reloaded policy applies"
    );

    // A bad file is refused; the running configuration stays.
    std::fs::write(&path, "[[models]]\nname = \"broken\"\nencoding = \"p50k\"\n").unwrap();
    sidecar.signal("-HUP");
    sidecar
        .wait_for(
            "assembler_config_reloads_total",
            &[("result", "refused")],
            1.0,
            "bad reload never refused",
        )
        .await;
    let listed = names(
        client
            .list_models(pb::ListModelsRequest {})
            .await
            .unwrap()
            .into_inner(),
    );
    assert_eq!(listed, ["first-model", "second-model"]);

    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let served = traffic.await.unwrap();
    assert!(served > 0);
    sidecar.signal("-TERM");
    assert_eq!(sidecar.exit_code(Duration::from_secs(20)).await, Some(0));
}

/// A text message of a conversation to compact.
fn said(id: &str, role: pb::Role, text: &str) -> pb::ConversationMessage {
    pb::ConversationMessage {
        id: id.to_owned(),
        role: role.into(),
        content: vec![pb::ContentBlock {
            block: Some(pb::content_block::Block::Text(text.to_owned())),
        }],
    }
}

/// Starts one held call of each kind (Assemble, AssembleBatch,
/// AssembleStream, Compact, Retain) and waits until the server holds all
/// of them.
async fn hold_every_kind(sidecar: &ChildServer) -> Vec<(&'static str, common::HeldCall)> {
    let svc = "/context_assembler.v1.Assembler/";
    let compact = pb::CompactRequest {
        request_id: "c".to_owned(),
        model: "gpt-4o".to_owned(),
        messages: (0..12)
            .map(|i| {
                let role = if i % 2 == 0 {
                    pb::Role::User
                } else {
                    pb::Role::Assistant
                };
                said(&format!("m{i}"), role, &format!("Message {i}: ").repeat(40))
            })
            .collect(),
        trigger_tokens: Some(0),
        preserve_recent: Some(2),
        ..Default::default()
    };
    let retain = pb::RetainRequest {
        idempotency_key: "drain/1".to_owned(),
        subject: "tenant/drain".to_owned(),
        request_id: "r".to_owned(),
        turn: 1,
        model_output: "<observation><type>decision</type><text>Drains wait.</text></observation>".to_owned(),
        ..Default::default()
    };
    let batch = pb::AssembleBatchRequest {
        requests: (2..5).map(|seed| heavy_request(seed, 20, 200)).collect(),
    };
    let calls: Vec<(&'static str, Vec<u8>)> = vec![
        ("Assemble", heavy_request(1, 40, 200).encode_to_vec()),
        ("AssembleBatch", batch.encode_to_vec()),
        ("AssembleStream", heavy_request(5, 40, 200).encode_to_vec()),
        ("Compact", compact.encode_to_vec()),
        ("Retain", retain.encode_to_vec()),
    ];
    let declared: usize = calls
        .iter()
        .filter(|(rpc, _)| *rpc != "AssembleStream")
        .map(|(_, m)| m.len())
        .sum();
    let mut held = Vec::new();
    for (rpc, m) in &calls {
        let path = format!("{svc}{rpc}");
        // A stream's message is all sent (the stream stays open); a unary
        // call's only half.
        let sent = if *rpc == "AssembleStream" {
            m.len()
        } else {
            m.len() / 2
        };
        held.push((*rpc, common::HeldCall::start(sidecar.grpc, &path, m, sent).await));
    }
    sidecar
        .wait_for(
            "assembler_upload_budget_held_bytes",
            &[],
            declared as f64,
            "the held calls never reached the server",
        )
        .await;
    sidecar
        .wait_for(
            "assembler_requests_total",
            &[("rpc", "AssembleStream")],
            1.0,
            "the stream's message was never answered",
        )
        .await;
    held
}

/// Sends SIGTERM and waits until the drain has begun (its log line); the
/// instant returned is taken before the signal, so no time spent sending it
/// is left out of what follows.
async fn terminate(sidecar: &ChildServer) -> Instant {
    let signalled = Instant::now();
    sidecar.signal("-TERM");
    while !sidecar.logs().iter().any(|l| l.contains("draining")) {
        assert!(
            signalled.elapsed() < Duration::from_secs(20),
            "the drain never began"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    signalled
}

#[tokio::test]
async fn sigterm_drains_every_kind_of_call_in_flight() {
    let (sidecar, _store) = spawn_with_store("30");
    sidecar.serving_channel().await;
    let mut held = hold_every_kind(&sidecar).await;
    terminate(&sidecar).await;
    // Past the moment a drain that did not wait for them would have ended.
    tokio::time::sleep(Duration::from_secs(1)).await;
    for (_, call) in &mut held {
        call.release().await;
    }
    for (rpc, call) in held {
        let (code, body) = call
            .answer()
            .await
            .unwrap_or_else(|| panic!("{rpc}: no answer during the drain"));
        if rpc == "AssembleStream" {
            // The stream answered what it had received, then ended with
            // UNAVAILABLE: the client reopens it on another instance.
            assert_eq!(code, tonic::Code::Unavailable as i32, "{rpc}");
            let answer = pb::AssembleStreamResponse::decode(&body[5..]).unwrap();
            assert!(matches!(
                answer.result.and_then(|r| r.result),
                Some(pb::assemble_result::Result::Response(_))
            ));
        } else {
            assert_eq!(code, 0, "{rpc} failed during the drain");
            assert!(body.len() > 5, "{rpc}: an empty answer");
        }
    }
    assert_eq!(sidecar.exit_code(Duration::from_secs(30)).await, Some(0));
}

#[tokio::test]
async fn calls_held_past_the_drain_deadline_are_abandoned_and_the_process_exits() {
    let (sidecar, _store) = spawn_with_store("2");
    sidecar.serving_channel().await;
    let held = hold_every_kind(&sidecar).await;
    let signalled = terminate(&sidecar).await;
    // Never released: the drain deadline (2 s) runs out, and the process
    // exits soon after (a bound on hanging, generous for a loaded machine).
    assert_eq!(sidecar.exit_code(Duration::from_secs(30)).await, Some(0));
    let took = signalled.elapsed();
    assert!(
        took >= Duration::from_secs(2),
        "exited after {took:?}, before the deadline"
    );
    assert!(
        took < Duration::from_secs(12),
        "exited {took:?} after the signal, the deadline is 2 s"
    );
    // Every held call ends UNAVAILABLE: the unary ones when the deadline
    // ran out (their work abandoned, no response message), the stream
    // after answering the message it had.
    for (rpc, call) in held {
        let answer = call.answer().await.map(|(code, body)| (code, body.is_empty()));
        let expected = (tonic::Code::Unavailable as i32, rpc != "AssembleStream");
        assert_eq!(answer, Some(expected), "{rpc}: (grpc-status, no message)");
    }
}

/// The sidecar with JSON logs at `info`, a SQLite store in a temporary
/// directory (kept while the returned guard lives) and a drain of
/// `drain_secs`.
fn spawn_with_store(drain_secs: &str) -> (ChildServer, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("memory.db");
    let args = [
        "--log-format",
        "json",
        "--drain-secs",
        drain_secs,
        "--memory-sqlite-path",
        db.to_str().unwrap(),
    ];
    (ChildServer::spawn(&args, &[("RUST_LOG", "info")]), dir)
}

/// One configuration of every reloadable setting but `[auth]` (its own
/// test in `process::auth`): `v` selects the values.
fn reloadable(v: u32) -> String {
    let (preserve, family, margin, low) = if v == 1 {
        (2, "alpha", 10, 100)
    } else {
        (5, "beta", 25, 50)
    };
    format!(
        "[compaction]\npreserve_recent = {preserve}\n\
         [cache]\nfamilies = [\"{family}\"]\n\
         [[models]]\nname = \"est\"\nencoding = \"o200k_base\"\nestimate_margin_percent = {margin}\n\
         context_window = 8000\noutput_reserve = 1000\n\
         [policies.windowed]\nwindow_low_percent = {low}\n"
    )
}

/// A session long enough to be cut at a 1,000-token budget.
fn long_session(family: &str) -> pb::AssembleRequest {
    let turns = (0..24)
        .map(|i| pb::Item {
            id: format!("t{i}"),
            role: if i % 2 == 0 {
                pb::Role::User
            } else {
                pb::Role::Assistant
            }
            .into(),
            content: format!("Turn {i} says a few plain words about the task at hand. ").repeat(4),
            ..Default::default()
        })
        .collect();
    pb::AssembleRequest {
        request_id: "reload".to_owned(),
        model: "est".to_owned(),
        max_input_tokens: Some(1_000),
        blocks: vec![pb::Block {
            name: "conversation".to_owned(),
            kind: pb::BlockKind::RecentTurns.into(),
            items: turns,
            ..Default::default()
        }],
        query: "And now?".to_owned(),
        policy: "windowed".to_owned(),
        prefix_family: family.to_owned(),
        ..Default::default()
    }
}

#[tokio::test]
async fn sighup_reloads_compaction_families_margins_and_policy_windows() {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(reloadable(1).as_bytes()).unwrap();
    let path = file.path().to_str().unwrap().to_owned();
    let sidecar = spawn(&["--config", &path]);
    let mut client = AssemblerClient::new(sidecar.serving_channel().await);
    let compact = || pb::CompactRequest {
        request_id: "c".to_owned(),
        model: "est".to_owned(),
        messages: (0..12)
            .map(|i| {
                let role = if i % 2 == 0 {
                    pb::Role::User
                } else {
                    pb::Role::Assistant
                };
                said(&format!("m{i}"), role, &format!("Message {i}: ").repeat(40))
            })
            .collect(),
        trigger_tokens: Some(0),
        ..Default::default()
    };
    // What each setting decides, read from the answers and the metrics page.
    let observe = |client: &mut AssemblerClient<tonic::transport::Channel>, family: &'static str| {
        let mut client = client.clone();
        async move {
            let kept = client
                .compact(compact())
                .await
                .unwrap()
                .into_inner()
                .messages
                .len();
            let out = client.assemble(long_session(family)).await.unwrap().into_inner();
            let unused = out.decisions[0].tokens_window_unused;
            (kept, out.usage.unwrap().tokenizer, unused)
        }
    };
    let (kept_1, tokenizer_1, unused_1) = observe(&mut client, "beta").await;
    assert_eq!(tokenizer_1, "estimate(o200k_base,+10%)");
    assert_eq!(unused_1, 0, "equal marks: no window");
    let page = sidecar.metrics_page().await;
    assert!(
        common::metric(
            &page,
            "assembler_prefix_hash_changes_total",
            &[("family", "alpha")]
        )
        .is_some()
    );
    assert!(
        common::metric(
            &page,
            "assembler_prefix_hash_changes_total",
            &[("family", "beta")]
        )
        .is_none()
    );

    std::fs::write(&path, reloadable(2)).unwrap();
    sidecar.signal("-HUP");
    sidecar
        .wait_for(
            "assembler_config_reloads_total",
            &[("result", "applied")],
            1.0,
            "the reload was not applied",
        )
        .await;
    let (kept_2, tokenizer_2, unused_2) = observe(&mut client, "beta").await;
    assert_eq!(tokenizer_2, "estimate(o200k_base,+25%)", "the margin");
    assert_eq!(
        kept_2,
        kept_1 + 3,
        "preserve_recent 2 -> 5 keeps three more messages"
    );
    assert!(
        unused_2 > 0,
        "a window of 50-100% leaves room unused in this session"
    );
    let page = sidecar.metrics_page().await;
    assert!(
        common::metric(
            &page,
            "assembler_prefix_hash_changes_total",
            &[("family", "beta")]
        )
        .is_some(),
        "the new family is a label now"
    );
}

#[tokio::test]
async fn requests_waiting_on_recall_across_a_reload_keep_the_catalog_they_were_admitted_under() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("memory.db");
    // A recall timeout longer than the stall: the recalls wait until the
    // test lets the store go.
    let config = |v| format!("{}[memory]\nrecall_timeout_ms = 30000\n", reloadable(v));
    let path = dir.path().join("config.toml");
    std::fs::write(&path, config(1)).unwrap();
    let args = [
        "--log-format",
        "json",
        "--config",
        path.to_str().unwrap(),
        "--memory-sqlite-path",
        db.to_str().unwrap(),
    ];
    let sidecar = ChildServer::spawn(&args, &[("RUST_LOG", "info")]);
    let mut client = AssemblerClient::new(sidecar.serving_channel().await);
    client
        .retain(pb::RetainRequest {
            idempotency_key: "k".to_owned(),
            subject: "s".to_owned(),
            request_id: "r".to_owned(),
            turn: 1,
            model_output: "<observation><type>decision</type><text>Plain words.</text></observation>"
                .to_owned(),
            ..Default::default()
        })
        .await
        .unwrap();
    let recalling = || pb::AssembleRequest {
        recall: Some(pb::Recall {
            subject: "s".to_owned(),
            ..Default::default()
        }),
        ..long_session("beta")
    };
    let tokenizer = |r: &pb::AssembleResponse| r.usage.as_ref().unwrap().tokenizer.clone();
    let unused = |r: &pb::AssembleResponse| r.decisions.iter().map(|d| d.tokens_window_unused).sum::<u32>();

    // An Assemble and a batch (one member recalling, one not) admitted
    // under the first catalog, held in their recalls by a stalled store.
    let stall = common::SqliteStall::hold(&db);
    let one = tokio::spawn({
        let mut c = client.clone();
        let r = recalling();
        async move { c.assemble(r).await }
    });
    let batch = tokio::spawn({
        let mut c = client.clone();
        let requests = vec![recalling(), long_session("beta")];
        async move { c.assemble_batch(pb::AssembleBatchRequest { requests }).await }
    });
    sidecar
        .wait_for(
            "assembler_memory_recalls_in_flight",
            &[],
            2.0,
            "the recalls never waited on the stalled store",
        )
        .await;

    std::fs::write(&path, config(2)).unwrap();
    sidecar.signal("-HUP");
    sidecar
        .wait_for(
            "assembler_config_reloads_total",
            &[("result", "applied")],
            1.0,
            "the reload was not applied",
        )
        .await;
    // Admitted after the reload: the new margin and window.
    let after = client.assemble(long_session("beta")).await.unwrap().into_inner();
    assert_eq!(tokenizer(&after), "estimate(o200k_base,+25%)");
    assert!(unused(&after) > 0);

    drop(stall);
    let one = one.await.unwrap().unwrap().into_inner();
    assert_eq!(
        (tokenizer(&one), unused(&one)),
        ("estimate(o200k_base,+10%)".to_owned(), 0),
        "an Assemble admitted before the reload is assembled under the catalog it was admitted under"
    );
    let batch = batch.await.unwrap().unwrap().into_inner();
    assert_eq!(batch.results.len(), 2);
    for r in batch.results {
        let Some(pb::assemble_result::Result::Response(r)) = r.result else {
            panic!("a batch member failed: {r:?}");
        };
        assert_eq!(
            (tokenizer(&r), unused(&r)),
            ("estimate(o200k_base,+10%)".to_owned(), 0),
            "every member of a batch admitted before the reload is assembled under its catalog"
        );
    }
    assert_eq!(
        sidecar.metric("assembler_memory_recalls_in_flight", &[]).await,
        0.0,
        "every recall left the gauge"
    );
}

/// A model counted with its own folder (`tokenizer_dir`, relative to the
/// config file): ListModels names its tokenizer and template, CountTokens
/// and Assemble count what the template renders, and a reload with a
/// broken folder is refused while the running table keeps serving.
#[tokio::test]
async fn a_model_folder_counts_renders_and_survives_a_bad_reload() {
    use crate::common::hf_fixture::{CHATML, write_folder};
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("chatml");
    write_folder(&folder, Some(CHATML));
    let config = dir.path().join("sidecar.toml");
    std::fs::write(
        &config,
        "[[models]]\nname = \"open-model\"\ntokenizer_dir = \"chatml\"\ncontext_window = 8000\noutput_reserve = 1000\n",
    )
    .unwrap();
    let sidecar = spawn(&["--config", config.to_str().unwrap()]);
    let mut client = AssemblerClient::new(sidecar.serving_channel().await);
    let listed = client
        .list_models(pb::ListModelsRequest {})
        .await
        .unwrap()
        .into_inner()
        .models;
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (
            listed[0].tokenizer.as_str(),
            listed[0].exact,
            listed[0].chat_template,
            listed[0].encoding.as_str()
        ),
        ("hf:chatml", true, true, "")
    );

    let count = |text: &str| pb::CountTokensRequest {
        text: text.to_owned().into(),
        tokenizer: Some(pb::count_tokens_request::Tokenizer::Model(
            "open-model".to_owned(),
        )),
    };
    // "hello", " world", then the special token's text is one token.
    let counted = client
        .count_tokens(count("hello world<|im_end|>"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (counted.tokens, counted.tokenizer.as_str(), counted.exact),
        (3, "hf:chatml", true)
    );

    let reference = context_assembler::tokens::hf::HfModel::load(&folder).unwrap();
    let req = pb::AssembleRequest {
        request_id: "open-1".to_owned(),
        model: "open-model".to_owned(),
        static_segments: vec![pb::Segment {
            id: "sys".to_owned(),
            content: "Be brief.\n".to_owned(),
            ..Default::default()
        }],
        query: "\n\nhello world".to_owned(),
        ..Default::default()
    };
    let resp = client.assemble(req.clone()).await.unwrap().into_inner();
    let mut rendered = String::new();
    for m in &resp.messages {
        let role = pb::Role::try_from(m.role)
            .unwrap()
            .as_str_name()
            .trim_start_matches("ROLE_")
            .to_lowercase();
        rendered.push_str(&format!("<|im_start|>{role}\n{}<|im_end|>\n", m.content));
    }
    rendered.push_str("<|im_start|>assistant\n");
    let usage = resp.usage.unwrap();
    assert_eq!(usage.total_tokens, reference.count(&rendered));
    assert_eq!(usage.tokenizer, "hf:chatml");

    // A broken folder is refused on reload; the loaded one keeps counting.
    std::fs::write(
        folder.join("tokenizer.json"),
        "{\"model\": {\"type\": \"WordPiece\"}}",
    )
    .unwrap();
    sidecar.signal("-HUP");
    sidecar
        .wait_for(
            "assembler_config_reloads_total",
            &[("result", "refused")],
            1.0,
            "a broken folder was not refused",
        )
        .await;
    let counted = client
        .count_tokens(count("hello world<|im_end|>"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(counted.tokens, 3);
    let again = client.assemble(req).await.unwrap().into_inner();
    assert_eq!(again.usage.unwrap().total_tokens, usage.total_tokens);
    assert!(
        sidecar
            .logs()
            .iter()
            .any(|l| l.contains("models[0].tokenizer_dir")),
        "the refused reload names the key"
    );
}
