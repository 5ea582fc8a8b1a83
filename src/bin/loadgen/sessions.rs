//! The session workload's own figures: how much of each prompt is a
//! byte-identical prefix of the session's previous prompt (what a provider
//! prompt cache bills at a fraction), and the budget used once the
//! conversation no longer fits whole (a turn dropped or summarized, or old
//! tool results cleared and thinking dropped).
//!
//! The prompt text compared is the one `workload::sessions::common_prefix`
//! compares: each message's role, its thinking (text and signature) and its
//! content, in order, the query excluded; thinking passed back is part of
//! what a provider caches.
//!
//! Answers of every [`SAMPLE_EVERY`]th session of the first pass are kept
//! (their prompt text, the query excluded) and measured after the run, so
//! the client spends nothing on them while it drives the load. The window
//! is a function of the request alone, so these figures do not depend on
//! the order the answers arrived in.

use std::collections::BTreeMap;

use context_assembler::config::default_catalog;
use context_assembler::grpc::pb;
use context_assembler::tokens::{Encoding, Tokenizer};

/// One session in this many is measured.
pub const SAMPLE_EVERY: usize = 7;
/// The most answers kept for the figures (a 32k prompt is about 128 KB).
pub const MAX_ANSWERS: usize = 600;

/// A measured answer: its place in its session and what it kept.
#[derive(Debug, Clone)]
pub struct SessionAnswer {
    /// The session.
    pub session: usize,
    /// The request's position in its session, from 0.
    pub position: usize,
    /// The prompt without its last message (the query): each message's
    /// role, its thinking's text and signature, and its content,
    /// NUL-separated.
    pub text: String,
    /// Tokens of the whole prompt.
    pub total: u32,
    /// The budget.
    pub budget: u32,
    /// Whether the conversation did not fit whole: some turn was left out
    /// (dropped or summarized), or lightened (tool results cleared,
    /// thinking dropped).
    pub cut: bool,
}

impl SessionAnswer {
    /// What the figures need of `resp`, the answer to `sent` (request
    /// `position` of `session`).
    pub fn new(
        session: usize,
        position: usize,
        sent: &pb::AssembleRequest,
        resp: &pb::AssembleResponse,
    ) -> Self {
        let body = &resp.messages[..resp.messages.len().saturating_sub(1)];
        let mut text = String::new();
        for m in body {
            let role = pb::Role::try_from(m.role).unwrap_or(pb::Role::Unspecified);
            text.push_str(role.as_str_name());
            text.push('\0');
            for t in &m.thinking {
                text.push_str(&t.text);
                text.push('\0');
                text.push_str(&t.signature);
                text.push('\0');
            }
            text.push_str(&m.content);
            text.push('\0');
        }
        let offered: usize = sent.blocks.iter().map(|b| b.items.len()).sum();
        let kept: usize = resp.decisions.iter().map(|d| d.kept_item_ids.len()).sum();
        let lightened = resp.decisions.iter().any(|d| d.tokens_cleared > 0);
        let usage = resp.usage.clone().unwrap_or_default();
        SessionAnswer {
            session,
            position,
            text,
            total: usage.total_tokens,
            budget: usage.budget,
            cut: kept < offered || lightened,
        }
    }
}

/// The figures over the measured answers.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionFigures {
    /// Sessions measured.
    pub sessions: usize,
    /// Requests compared with their session's previous one.
    pub compared: usize,
    /// The furthest position (from 0) of a compared request in its session:
    /// a run too short to reach the requests that outgrow the budget shows
    /// here.
    pub furthest: usize,
    /// Prompt tokens (query excluded) that are a byte-identical prefix of
    /// the previous prompt, over all compared requests.
    pub share: f64,
    /// The 10th percentile of that share per request.
    pub share_p10: f64,
    /// Its median per request.
    pub share_median: f64,
    /// Requests whose conversation did not fit whole.
    pub cut: usize,
    /// Total tokens over budget of those, mean (`None` if none was cut).
    pub utilization: Option<f64>,
    /// Its 10th percentile.
    pub utilization_p10: Option<f64>,
}

/// The encoding the figures count with: that of the workload's model (the
/// model of its first request), its base encoding when the sidecar
/// estimates (Claude: cl100k_base); o200k_base for a model the default
/// catalog does not know. The shares are ratios of counts of one text, so
/// any close encoding gives nearly the same figures.
pub fn encoding(workload: &[pb::AssembleRequest]) -> Encoding {
    workload
        .first()
        .and_then(|r| default_catalog().models.resolve(&r.model)?.tokenizer.encoding())
        .unwrap_or(Encoding::O200kBase)
}

fn percentile(mut v: Vec<f64>, p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// The figures, counting with `encoding` (the workload's model's); `None`
/// without a request that has its predecessor.
pub fn figures(answers: &[SessionAnswer], encoding: Encoding) -> Option<SessionFigures> {
    let tok = Tokenizer::exact(encoding);
    let mut by_session: BTreeMap<usize, BTreeMap<usize, &SessionAnswer>> = BTreeMap::new();
    for a in answers {
        by_session.entry(a.session).or_default().insert(a.position, a);
    }
    let (mut common_tokens, mut all_tokens) = (0u64, 0u64);
    let mut shares = Vec::new();
    let mut furthest = 0;
    for requests in by_session.values() {
        for (position, now) in requests {
            let Some(previous) = position.checked_sub(1).and_then(|p| requests.get(&p)) else {
                continue;
            };
            furthest = furthest.max(*position);
            let mut at = previous
                .text
                .bytes()
                .zip(now.text.bytes())
                .take_while(|(a, b)| a == b)
                .count();
            while !now.text.is_char_boundary(at) {
                at -= 1;
            }
            let common = u64::from(tok.count(&now.text[..at]));
            let all = u64::from(tok.count(&now.text));
            common_tokens += common;
            all_tokens += all;
            shares.push(common as f64 / all.max(1) as f64);
        }
    }
    if shares.is_empty() {
        return None;
    }
    let utils: Vec<f64> = answers
        .iter()
        .filter(|a| a.cut)
        .map(|a| f64::from(a.total) / f64::from(a.budget.max(1)))
        .collect();
    Some(SessionFigures {
        sessions: by_session.len(),
        compared: shares.len(),
        furthest,
        share: common_tokens as f64 / all_tokens.max(1) as f64,
        share_p10: percentile(shares.clone(), 0.1),
        share_median: percentile(shares, 0.5),
        cut: utils.len(),
        utilization: (!utils.is_empty()).then(|| utils.iter().sum::<f64>() / utils.len() as f64),
        utilization_p10: (!utils.is_empty()).then(|| percentile(utils, 0.1)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(session: usize, position: usize, text: &str) -> SessionAnswer {
        SessionAnswer {
            session,
            position,
            text: text.to_owned(),
            total: 80,
            budget: 100,
            cut: position > 0,
        }
    }

    #[test]
    fn shares_compare_each_request_with_its_sessions_previous_one() {
        let answers = [
            answer(0, 0, "alpha beta"),
            answer(0, 1, "alpha beta gamma"),
            // Another session's text is never compared with session 0's.
            answer(7, 1, "alpha beta gamma"),
            answer(7, 2, "zeta"),
        ];
        let f = figures(&answers, Encoding::O200kBase).unwrap();
        assert_eq!((f.sessions, f.compared, f.cut), (2, 2, 3));
        // "alpha beta" of "alpha beta gamma", then nothing of "zeta".
        let n = |t: &str| f64::from(Tokenizer::exact(Encoding::O200kBase).count(t));
        let expected = n("alpha beta") / (n("alpha beta gamma") + n("zeta"));
        assert!((f.share - expected).abs() < 1e-9, "{f:?}");
        assert_eq!(f.share_p10, 0.0);
        assert!((f.utilization.unwrap() - 0.8).abs() < 1e-9);
        let uncut: Vec<SessionAnswer> = answers[..2]
            .iter()
            .map(|a| SessionAnswer {
                cut: false,
                ..a.clone()
            })
            .collect();
        assert_eq!(figures(&uncut, Encoding::O200kBase).unwrap().utilization, None);
        assert_eq!(figures(&answers[..1], Encoding::O200kBase), None);
        assert_eq!(f.furthest, 2);
    }

    /// An answer of two turns, `r0-call` with its thinking and `r0-result`,
    /// then the query; `kept` of them kept, `cleared` tokens lightened.
    fn agent_answer(
        thinking: &str,
        kept: &[&str],
        cleared: u32,
    ) -> (pb::AssembleRequest, pb::AssembleResponse) {
        let item = |id: &str| pb::Item {
            id: id.to_owned(),
            ..pb::Item::default()
        };
        let sent = pb::AssembleRequest {
            blocks: vec![pb::Block {
                items: vec![item("r0-call"), item("r0-result")],
                ..pb::Block::default()
            }],
            ..pb::AssembleRequest::default()
        };
        let message = |role: pb::Role, content: &str| pb::Message {
            role: role as i32,
            content: content.to_owned(),
            ..pb::Message::default()
        };
        let resp = pb::AssembleResponse {
            messages: vec![
                pb::Message {
                    thinking: vec![pb::Thinking {
                        text: thinking.to_owned(),
                        signature: "sig".to_owned(),
                        redacted: false,
                    }],
                    ..message(pb::Role::Assistant, "call")
                },
                message(pb::Role::Tool, "result"),
                message(pb::Role::User, "the query"),
            ],
            decisions: vec![pb::BlockDecision {
                kept_item_ids: kept.iter().map(|&k| k.to_owned()).collect(),
                tokens_cleared: cleared,
                ..pb::BlockDecision::default()
            }],
            usage: Some(pb::Usage {
                total_tokens: 90,
                budget: 100,
                ..pb::Usage::default()
            }),
            ..pb::AssembleResponse::default()
        };
        (sent, resp)
    }

    #[test]
    fn thinking_is_compared_before_content_and_lightening_counts_as_not_fitting() {
        let whole = ["r0-call", "r0-result"];
        let (sent, resp) = agent_answer("plan", &whole, 0);
        let a = SessionAnswer::new(0, 0, &sent, &resp);
        assert_eq!(
            a.text, "ROLE_ASSISTANT\0plan\0sig\0call\0ROLE_TOOL\0result\0",
            "role, thinking text and signature, content; the query left out"
        );
        assert!(!a.cut, "every turn kept whole");
        let (sent, resp) = agent_answer("plan", &whole, 40);
        assert!(SessionAnswer::new(0, 0, &sent, &resp).cut, "tool results cleared");
        let (sent, resp) = agent_answer("plan", &whole[1..], 0);
        assert!(SessionAnswer::new(0, 0, &sent, &resp).cut, "a turn left out");

        // Same contents, other thinking: the prefix ends inside the thinking.
        let (sent, resp) = agent_answer("replan", &whole, 0);
        let b = SessionAnswer::new(0, 1, &sent, &resp);
        let f = figures(&[a, b], Encoding::O200kBase).unwrap();
        assert!(f.share < 0.5, "{f:?}");
    }

    #[test]
    fn figures_count_with_the_workloads_model() {
        let of = |model: &str| {
            encoding(&[pb::AssembleRequest {
                model: model.to_owned(),
                ..pb::AssembleRequest::default()
            }])
        };
        assert_eq!(of("gpt-4o"), Encoding::O200kBase);
        assert_eq!(of("claude-sonnet-4-5"), Encoding::Cl100kBase);
        assert_eq!(of("no-such-model"), Encoding::O200kBase);
        assert_eq!(encoding(&[]), Encoding::O200kBase);
    }
}
