//! The driver's checks on answers, and its ticket and window bookkeeping.

use super::*;

fn response(id: &str, total: u32) -> pb::AssembleResponse {
    pb::AssembleResponse {
        request_id: id.to_owned(),
        usage: Some(pb::Usage {
            budget: 100,
            total_tokens: total,
            ..pb::Usage::default()
        }),
        messages: vec![pb::Message::default()],
        ..pb::AssembleResponse::default()
    }
}

fn request(id: &str, budget: Option<u32>) -> pb::AssembleRequest {
    pb::AssembleRequest {
        request_id: id.to_owned(),
        max_input_tokens: budget,
        ..pb::AssembleRequest::default()
    }
}

#[test]
fn every_answer_is_checked() {
    let sent = request("a", Some(50));
    let (_tx, rx) = watch::channel(false);
    let d = Driver::new(plan(), vec![sent.clone()].into(), rx);
    assert_eq!(check(&response("a", 50), &sent), Outcome::Ok);
    assert_eq!(
        check(&response("a", 51), &sent),
        Outcome::Malformed("over budget")
    );
    assert_eq!(
        check(&response("b", 1), &sent),
        Outcome::Malformed("request_id mismatch")
    );
    let mut no_usage = response("a", 1);
    no_usage.usage = None;
    assert_eq!(check(&no_usage, &sent), Outcome::Malformed("missing usage"));
    // Without an explicit budget the server's is the bound.
    assert_eq!(
        check(&response("a", 101), &request("a", None)),
        Outcome::Malformed("over budget")
    );

    let error = |code: i32| pb::AssembleResult {
        result: Some(pb::assemble_result::Result::Error(pb::RequestError {
            code,
            ..pb::RequestError::default()
        })),
    };
    assert_eq!(
        d.result(&error(8), 0),
        Outcome::Status(Code::ResourceExhausted, String::new())
    );
    assert_eq!(d.result(&error(0), 0), Outcome::Malformed("error with code OK"));
    assert_eq!(
        d.result(&pb::AssembleResult { result: None }, 0),
        Outcome::Malformed("empty result")
    );

    let answer = pb::AssembleStreamResponse {
        index: 3,
        request_id: "a".to_owned(),
        result: Some(pb::AssembleResult {
            result: Some(pb::assemble_result::Result::Response(response("a", 10))),
        }),
    };
    assert_eq!(d.stream_answer(3, &answer, 0), Outcome::Ok);
    assert_eq!(
        d.stream_answer(2, &answer, 0),
        Outcome::Malformed("stream index out of order")
    );
}

fn driver(plan: Plan) -> Driver {
    let (_tx, rx) = watch::channel(false);
    let workload: Arc<[pb::AssembleRequest]> = vec![
        request("x", Some(10)),
        pb::AssembleRequest {
            query: "q".to_owned(),
            static_segments: vec![pb::Segment {
                content: "s".to_owned(),
                ..pb::Segment::default()
            }],
            ..request("y", Some(10))
        },
    ]
    .into();
    Driver::new(plan, workload, rx)
}

fn plan() -> Plan {
    Plan {
        rpc: Rpc::Batch,
        concurrency: 1,
        rate: 0.0,
        batch_size: 4,
        duration: None,
        requests: Some(10),
        deadline: Duration::from_secs(1),
        cold: false,
        sample_answers: 0,
        sessions: 0,
    }
}

#[test]
fn tickets_stop_at_the_request_count_and_the_last_batch_is_short() {
    let d = driver(plan());
    let claimed: Vec<(u64, u64)> = std::iter::from_fn(|| d.claim(4).map(|t| (t.first, t.count))).collect();
    assert_eq!(claimed, vec![(0, 4), (4, 4), (8, 2)]);
}

#[test]
fn open_loop_tickets_are_due_on_schedule_and_stop_at_the_duration() {
    let d = driver(Plan {
        rate: 100.0,
        requests: None,
        duration: Some(Duration::from_secs(1)),
        ..plan()
    });
    assert_eq!(
        d.due(50).map(|at| at - d.started),
        Some(Duration::from_millis(500))
    );
    let n = std::iter::from_fn(|| d.claim(1)).count();
    assert_eq!(n, 100);
}

#[test]
fn cold_requests_are_unique_and_keep_their_ids() {
    let d = driver(Plan { cold: true, ..plan() });
    let (a, b) = (d.request(1), d.request(3));
    assert_eq!((a.request_id.as_str(), b.request_id.as_str()), ("y", "y"));
    assert_ne!(a.query, b.query);
    assert_ne!(a.static_segments[0].content, b.static_segments[0].content);
    assert!(a.query.ends_with(" q"));
    let warm = driver(plan());
    assert_eq!(warm.request(1), warm.request(3));
}

#[test]
fn cold_sessions_share_a_nonce_within_a_pass() {
    let (_tx, rx) = watch::channel(false);
    let thinking = |text: &str, redacted| pb::Thinking {
        text: text.to_owned(),
        signature: "sig".to_owned(),
        redacted,
    };
    let turn = pb::AssembleRequest {
        query: "q".to_owned(),
        blocks: vec![pb::Block {
            items: vec![pb::Item {
                content: "call".to_owned(),
                thinking: vec![thinking("plan", false), thinking("opaque", true)],
                ..pb::Item::default()
            }],
            ..pb::Block::default()
        }],
        ..request("t", Some(10))
    };
    // Two sessions of two requests: tickets 0 and 2 are session 0's.
    let d = Driver::new(
        Plan {
            cold: true,
            sessions: 2,
            ..plan()
        },
        vec![turn; 4].into(),
        rx,
    );
    assert_eq!(d.session_of(2), Some((0, 1)));
    assert_eq!(d.session_of(5), Some((1, 0)));
    let query = |t| d.request(t).query;
    assert_eq!(query(0), query(2), "one session, one pass");
    assert_ne!(query(0), query(1), "two sessions");
    assert_ne!(query(0), query(4), "the next pass brings new sessions");
    // Thinking is counted on its own: cold, its text is new too; a
    // redacted block and every signature pass unchanged.
    let item = |t| d.request(t).blocks[0].items[0].clone();
    let (first, next) = (item(0), item(4));
    assert!(first.thinking[0].text.ends_with(" plan"));
    assert_ne!(first.thinking[0].text, next.thinking[0].text);
    assert_eq!(
        first.thinking[0].text.strip_suffix("plan"),
        first.content.strip_suffix("call")
    );
    assert_eq!(first.thinking[1], thinking("opaque", true));
    assert_eq!(first.thinking[0].signature, "sig");
}

#[test]
fn sampled_answers_are_ok_ones_every_seventh_up_to_the_limit() {
    let (_tx, rx) = watch::channel(false);
    let sent = request("a", Some(50));
    let d = Driver::new(
        Plan {
            sample_answers: 2,
            ..plan()
        },
        vec![sent].into(),
        rx,
    );
    for ticket in 0..30 {
        d.checked(&response("a", 10), ticket);
    }
    d.checked(&response("a", 99), 28);
    let answers = d.answers();
    assert_eq!(answers.len(), 2);
    assert_eq!(answers[0]["totalTokens"], 10);
    assert_eq!(answers[0]["requestId"], "a");
    assert_eq!(answers[0]["rpc"], "AssembleBatch");
}

/// A batch of four: results 0, 2 and 3 share a prefix, 1 failed.
fn grouped() -> (pb::AssembleBatchResponse, Vec<String>) {
    let ok = |hash: &str| pb::AssembleResult {
        result: Some(pb::assemble_result::Result::Response(pb::AssembleResponse {
            model: "m".to_owned(),
            usage: Some(pb::Usage {
                tokenizer: "t".to_owned(),
                ..pb::Usage::default()
            }),
            cache: Some(pb::CacheInfo {
                prefix_hash: hash.to_owned(),
                prefix_tokens: 5,
                ..pb::CacheInfo::default()
            }),
            ..pb::AssembleResponse::default()
        })),
    };
    let failed = pb::AssembleResult {
        result: Some(pb::assemble_result::Result::Error(pb::RequestError {
            code: 3,
            ..pb::RequestError::default()
        })),
    };
    let group = |hash: &str, members: Vec<u32>| pb::BatchGroup {
        model: "m".to_owned(),
        tokenizer: "t".to_owned(),
        cache_salt: String::new(),
        prefix_hash: hash.to_owned(),
        warmup: members[0],
        shared_prefix_tokens: 5,
        tokens_saved: 5 * (members.len() as u64 - 1),
        members,
    };
    let answer = pb::AssembleBatchResponse {
        results: vec![ok("h"), failed, ok("h"), ok("k")],
        groups: vec![group("k", vec![3]), group("h", vec![0, 2])],
        order: vec![3, 0, 2],
    };
    (answer, vec![String::new(); 4])
}

#[test]
fn batch_groups_and_order_are_checked() {
    let (good, salts) = grouped();
    assert_eq!(check_groups(&good, &salts), Ok(()));
    let broken = |change: fn(&mut pb::AssembleBatchResponse)| {
        let mut a = good.clone();
        change(&mut a);
        check_groups(&a, &salts).unwrap_err()
    };
    assert_eq!(
        broken(|a| a.order = vec![0, 3, 2]),
        "batch order not the groups' members in turn"
    );
    assert_eq!(
        broken(|a| a.groups[1].warmup = 2),
        "batch group warm-up not its first member"
    );
    assert_eq!(
        broken(|a| a.groups.remove(0).members.clear()),
        "batch OK result in no group"
    );
    assert_eq!(
        broken(|a| {
            a.groups[0].members = vec![1];
            a.groups[0].warmup = 1;
        }),
        "batch group member is not an OK result"
    );
    assert_eq!(
        broken(|a| {
            a.groups[0].members = vec![2];
            a.groups[0].warmup = 2;
        }),
        "batch group member with another key"
    );
    assert_eq!(
        broken(|a| a.groups[1].tokens_saved = 10),
        "batch group tokens_saved"
    );
    assert_eq!(
        broken(|a| {
            a.groups[0].prefix_hash = "h".to_owned();
            if let Some(pb::assemble_result::Result::Response(r)) = &mut a.results[3].result {
                r.cache.as_mut().unwrap().prefix_hash = "h".to_owned();
            }
        }),
        "two batch groups with one key"
    );
    // A member whose salt differs from its group's.
    let mut salted = salts.clone();
    salted[2] = "tenant".to_owned();
    assert_eq!(
        check_groups(&good, &salted),
        Err("batch group member with another key")
    );
}
