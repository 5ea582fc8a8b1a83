//! What every Compact answer must hold, checked from the request and the
//! answer alone: counts equal a from-scratch recount, no tool call is
//! separated from its result, the recent messages stay verbatim, and the
//! outcome agrees with the thresholds.

use context_assembler::compact::CompactError;
use context_assembler::compact::compactor::recount;
use context_assembler::compact::conversation::{self, is_pinned_message};
use context_assembler::compact::summary::Summary;
use context_assembler::compact::{
    CompactOutcome, CompactRequest, Compaction, Compactor, Content, MarkerKey, Msg,
};
use context_assembler::tokens::Tokenizer;
use context_assembler::vocab::codes::{
    COMPACTION_BREAKER_OPEN as BREAKER_OPEN, COMPACTION_OVER_TARGET as OVER_TARGET,
};
use context_assembler::vocab::{Cancel, Role};

use crate::compact_input::CompactInput;
use crate::paths;

/// Runs every round of `input` through one compactor (fresh breakers, the
/// shared assembler's count caches) and checks each answer.
pub fn run(input: &CompactInput) {
    let asm = crate::assembler();
    let compactor = Compactor::new(asm.clone());
    let catalog = asm.catalog();
    let mut convo: Vec<Msg> = Vec::new();
    for round in &input.rounds {
        convo.extend(round.appended.iter().cloned());
        let req = CompactRequest {
            request_id: "fuzz".to_owned(),
            model: input.model.clone(),
            session_id: input.session.clone(),
            messages: convo.clone(),
            trigger_tokens: round.trigger,
            target_tokens: round.target,
            preserve_recent: round.preserve,
            pinned: round.pinned.clone(),
            context_length_exceeded: round.emergency,
            cache_salt: String::new(),
        };
        let spec = catalog.models.resolve(&req.model).cloned();
        let invalid =
            !conversation::validate(&req).is_empty() || req.target_tokens == Some(0) || spec.is_none();
        let result = compactor.compact(req.clone(), &Cancel::new());
        crate::note(|| match &result {
            Ok(out) => format!(
                "{} messages -> {}: {} ({} -> {} tokens)",
                req.messages.len(),
                out.messages.len(),
                out.outcome.as_str(),
                out.tokens_before,
                out.tokens_after
            ),
            Err(e) => format!("refused: {e}"),
        });
        match result {
            Ok(out) => {
                assert!(!invalid, "an invalid request was compacted");
                let spec = spec.expect("valid model");
                check(&req, &spec.tokenizer, spec.reads_thinking(), &out);
                convo = out.messages;
            }
            Err(e @ CompactError::InvalidArgument(_)) => {
                assert!(invalid, "a valid request was refused: {e:?}");
                for v in paths::compact_violations(&e) {
                    paths::check_compact_path(&v.field, &req);
                }
                // A gateway would fix the request; drop the bad messages.
                let bad: Vec<usize> = paths::compact_violations(&e)
                    .iter()
                    .filter_map(|v| message_index(&v.field))
                    .collect();
                convo = convo
                    .into_iter()
                    .enumerate()
                    .filter(|(i, _)| !bad.contains(i))
                    .map(|(_, m)| m)
                    .collect();
            }
            Err(e) => panic!("unexpected compaction error {e:?}"),
        }
    }
}

/// `i` of a `messages[i]...` path.
fn message_index(path: &str) -> Option<usize> {
    path.strip_prefix("messages[")?.split(']').next()?.parse().ok()
}

fn calls_in(msgs: &[Msg]) -> Vec<&str> {
    msgs.iter().flat_map(Msg::tool_uses).collect()
}

fn results_in(msgs: &[Msg]) -> Vec<&str> {
    msgs.iter().flat_map(Msg::tool_results).collect()
}

/// The key the shared assembler's compactors seal their markers with.
fn key() -> MarkerKey {
    crate::assembler().catalog().compaction.marker_key
}

/// Whether `m` is a continuation message this crate wrote (sealed with the
/// key: a message that only looks like one is ordinary text).
fn is_continuation(m: &Msg) -> bool {
    m.role == Role::User
        && matches!(m.content.as_slice(), [Content::Text(t)] if Summary::parse(t, &key()).is_some())
}

/// Checks one answer against its request.
pub fn check(req: &CompactRequest, tok: &Tokenizer, reads_thinking: bool, out: &Compaction) {
    let input = &req.messages;
    assert_eq!(
        out.tokens_before,
        recount(tok, reads_thinking, input),
        "tokens_before is not the recount"
    );
    assert_eq!(
        out.tokens_after,
        recount(tok, reads_thinking, &out.messages),
        "tokens_after is not the recount"
    );
    assert_eq!(out.exact, tok.is_exact());
    if let Some(t) = req.trigger_tokens {
        assert_eq!(out.trigger_tokens, t);
    }
    if let Some(t) = req.target_tokens {
        assert_eq!(out.target_tokens, t);
    }
    if let Some(p) = req.preserve_recent {
        assert_eq!(out.preserve_recent, p);
    }
    let (trigger, target) = (out.trigger_tokens, out.target_tokens);
    let warned = |code: &str| out.warnings.iter().any(|w| w.code == code);

    // The outcome agrees with the thresholds and says when the target is missed.
    match out.outcome {
        CompactOutcome::BelowTrigger => {
            assert!(!req.context_length_exceeded);
            assert!(
                out.tokens_before < trigger,
                "below trigger at {} >= {trigger}",
                out.tokens_before
            );
        }
        CompactOutcome::NothingToCompact => {
            if req.context_length_exceeded {
                // Not even one turn could go (a single turn after the
                // leading system messages): nothing was trimmed.
                assert!(out.trim_steps.is_empty());
            } else {
                assert!(out.tokens_before >= trigger);
            }
        }
        CompactOutcome::Compacted => {
            assert!(
                out.tokens_after <= target,
                "compacted to {} over target {target}",
                out.tokens_after
            );
        }
        CompactOutcome::CompactedOverTarget => {
            assert!(out.tokens_after > target);
            assert!(warned(OVER_TARGET), "over the target without a warning");
        }
        CompactOutcome::BreakerTrimmed => {
            assert!(!req.context_length_exceeded);
            assert!(warned(BREAKER_OPEN), "breaker trim without a warning");
            assert!(
                out.tokens_after <= target || warned(OVER_TARGET),
                "trimmed over target silently"
            );
        }
        CompactOutcome::EmergencyTrimmed => {
            assert!(req.context_length_exceeded);
            assert!(
                !out.trim_steps.is_empty(),
                "an emergency trim trims at least once"
            );
            assert!(
                out.tokens_after <= target || warned(OVER_TARGET),
                "trimmed over target silently"
            );
        }
    }
    if req.context_length_exceeded {
        assert!(matches!(
            out.outcome,
            CompactOutcome::EmergencyTrimmed | CompactOutcome::NothingToCompact
        ));
    }
    assert_eq!(out.outcome.compacted(), out.provenance.is_some());
    assert_eq!(out.outcome.compacted(), out.summary_index.is_some());

    let changed = out.outcome.compacted() || !out.trim_steps.is_empty();
    if !changed {
        assert_eq!(&out.messages, input, "unchanged outcome changed the messages");
        assert_eq!(out.tokens_after, out.tokens_before);
        return;
    }
    assert!(out.tokens_after <= out.tokens_before || out.outcome.compacted());

    // Pair safety: a kept result has its call before it; a kept call that
    // the input answers later keeps that result. (A result before its call
    // is an orphan, not an answer: call ids are unique, results need not be.)
    for (j, m) in out.messages.iter().enumerate() {
        let before = calls_in(&out.messages[..j]);
        for id in m.tool_results() {
            assert!(before.contains(&id), "result {id} without its call");
        }
    }
    let answered_later = |id: &str| {
        let call = input.iter().position(|m| m.tool_uses().any(|c| c == id));
        call.is_some_and(|i| input[i + 1..].iter().any(|m| m.tool_results().any(|r| r == id)))
    };
    let output_results = results_in(&out.messages);
    for id in calls_in(&out.messages) {
        if answered_later(id) {
            assert!(output_results.contains(&id), "call {id} without its result");
        }
    }
    let first = out.messages.iter().find(|m| m.role != Role::System);
    assert!(
        !first.is_some_and(Msg::has_tool_result),
        "output starts with a tool result"
    );

    if out.outcome.compacted() {
        // One summary; after it and the pinned items, the input's messages
        // from the end of what it covers, verbatim.
        assert_eq!(out.messages.iter().filter(|m| is_continuation(m)).count(), 1);
        let p = out.provenance.clone().unwrap_or_default();
        let end = p.end as usize;
        assert!(p.start < p.end && end <= input.len(), "provenance {p:?}");
        let tail = input.len() - end;
        assert!(out.messages.len() >= tail);
        assert_eq!(
            &out.messages[out.messages.len() - tail..],
            &input[end..],
            "recent messages not verbatim"
        );
        let at = out.summary_index.unwrap_or_default() as usize;
        assert!(
            is_continuation(&out.messages[at]),
            "summary_index is not the summary"
        );
        let between = &out.messages[at + 1..out.messages.len() - tail];
        assert!(
            between.iter().all(|m| is_pinned_message(m, &key())),
            "something besides pinned items after the summary"
        );
        if !req.pinned.is_empty() {
            assert_eq!(between.len(), req.pinned.len(), "pinned items not restored");
        }
        // The messages before the summary are the input's leading system messages.
        assert_eq!(&out.messages[..at], &input[..at]);
        assert!(out.messages[..at].iter().all(|m| m.role == Role::System));
    } else {
        // Contiguous steps, each recounted; the rest of the input verbatim.
        let steps = &out.trim_steps;
        assert!(
            steps.windows(2).all(|w| w[0].end == w[1].start),
            "trim steps not contiguous"
        );
        let (start, end) = (steps[0].start as usize, steps[steps.len() - 1].end as usize);
        assert!(start < end && end <= input.len());
        for s in steps {
            let mut partial = input[..start].to_vec();
            partial.extend_from_slice(&input[s.end as usize..]);
            assert_eq!(s.tokens_after, recount(tok, reads_thinking, &partial), "trim step count");
        }
        assert_eq!(steps[steps.len() - 1].tokens_after, out.tokens_after);
        let mut expected = input[..start].to_vec();
        expected.extend_from_slice(&input[end..]);
        assert_eq!(&out.messages, &expected, "trim changed more than its steps");
    }
}
