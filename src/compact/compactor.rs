//! The compactor: measures a conversation with the model's tokenizer and,
//! past the trigger, replaces its older part with a deterministic summary
//! (merging an earlier one), re-injects the pinned items and keeps the recent
//! messages verbatim. A session whose compactions keep failing is trimmed
//! instead (circuit breaker), and a conversation the provider refused as too
//! long is trimmed two turns at a time (emergency trim).
//!
//! Token counts use the *compaction formula*, exact under the model's
//! tokenizer and recountable from the output alone:
//!
//! ```text
//! tokens = 3 + Σ over messages (3 + tokens(role) + Σ over blocks tokens(block))
//! ```
//!
//! where a text block counts its text, a tool use its name plus its input,
//! and a tool result its output (ids are metadata, as in Assemble).

use std::sync::Arc;
use std::time::Instant;

use tracing::debug;

use super::CompactionSettings;
use super::breaker::{Breakers, Circuit, SessionKey};
use super::conversation::{CompactRequest, Content, Msg, is_pinned_message, pinned_message};
use super::cut::Boundaries;
use super::error::CompactError;
use super::marker::MarkerKey;
use super::outcome::{CompactOutcome, Compaction, Provenance, TrimStep};
use super::summary::Summary;
use crate::telemetry::metrics;
use crate::tokens::models::UNKNOWN_MODEL;
use crate::tokens::{ModelSpec, Tokenizer};
use crate::vocab::codes::{
    COMPACTION_BREAKER_OPEN as BREAKER_OPEN, COMPACTION_OVER_TARGET as OVER_TARGET, ORPHAN_TOOL_RESULT,
    UNANSWERED_TOOL_CALL,
};
use crate::vocab::{Cancel, FieldViolation, Meter, Role, Warning, saturating_u32};

/// Turns an emergency or breaker trim drops per step.
pub const TURNS_PER_TRIM_STEP: usize = 2;

/// What the compactor counts with, as it is now: the model table and the
/// compaction defaults (both change on reload) and a count cache shared with
/// Assemble (a conversation re-sent each turn is tokenized once). The server
/// hands it the assembler, which keeps all three; compaction knows nothing
/// else of it.
pub trait Counting: Send + Sync + std::fmt::Debug {
    /// The model `name` resolves to in the table, with the compaction
    /// defaults, as configured now.
    fn model(&self, name: &str) -> Option<(Arc<ModelSpec>, CompactionSettings)>;
    /// The count of `text` by `tokenizer` through the shared cache, and
    /// whether it was a hit.
    fn count_cached(&self, tokenizer: &Tokenizer, text: &str) -> (u32, bool);
}

/// Compacts conversations. Cheap to share: clone it (the breakers are shared).
#[derive(Debug, Clone)]
pub struct Compactor {
    counting: Arc<dyn Counting>,
    breakers: Breakers,
}

/// A validated request's resolved parameters.
struct Resolved {
    model: String,
    tokenizer: Tokenizer,
    /// Whether thinking is counted (the model's provider reads it).
    reads_thinking: bool,
    settings: CompactionSettings,
    trigger: u32,
    target: u32,
    preserve: u32,
}

/// The conversation's parts, found once.
struct Layout {
    /// Leading system messages: always kept, never summarized.
    head: usize,
    /// Index of an earlier continuation message, and its summary.
    earlier: Option<(usize, Summary)>,
    /// Where the messages that may be summarized or trimmed start (after
    /// the head, an earlier summary and the pinned items restored with it).
    body: usize,
}

impl Compactor {
    /// A compactor resolving models and defaults, and counting, through
    /// `counting`.
    pub fn new(counting: Arc<dyn Counting>) -> Self {
        Compactor {
            counting,
            breakers: Breakers::default(),
        }
    }

    /// Compacts one conversation (CPU-bound: call it off the reactor).
    /// Stops early with [`CompactError::Cancelled`] once `cancel` is set.
    pub fn compact(&self, req: CompactRequest, cancel: &Cancel) -> Result<Compaction, CompactError> {
        self.compact_at(req, cancel, Instant::now())
    }

    /// [`Compactor::compact`] at a given time (the breaker's clock).
    pub fn compact_at(
        &self,
        req: CompactRequest,
        cancel: &Cancel,
        now: Instant,
    ) -> Result<Compaction, CompactError> {
        let r = self.resolve(&req)?;
        let mut lookups = Lookups::default();
        let mut costs = Vec::with_capacity(req.messages.len());
        let mut meter = Meter::new(cancel);
        for (i, m) in req.messages.iter().enumerate() {
            costs.push(self.cost(&r, m, i == 0, &mut lookups, &mut meter)?);
        }
        metrics::cache_lookups(
            metrics::SEGMENT_CACHE_LOOKUPS_TOTAL,
            lookups.hits,
            lookups.made - lookups.hits,
        );
        let before = total(&r.tokenizer, &costs);
        let layout = Layout::of(&req.messages, &r.settings.marker_key);
        let bounds = Boundaries::of(&req.messages, layout.body);
        let mut out = Compaction {
            request_id: req.request_id.clone(),
            model: r.model.clone(),
            messages: Vec::new(),
            outcome: CompactOutcome::BelowTrigger,
            reason: String::new(),
            tokens_before: before,
            tokens_after: before,
            trigger_tokens: r.trigger,
            target_tokens: r.target,
            preserve_recent: r.preserve,
            tokenizer: r.tokenizer.to_string(),
            // Under a chat template the frames are estimates.
            exact: r.tokenizer.sums_exactly(),
            provenance: None,
            summary_index: None,
            trim_steps: Vec::new(),
            breaker: self.breakers.state(session(&req), &r.settings, now),
            warnings: pairing_warnings(&req.messages, &bounds),
        };

        if req.context_length_exceeded {
            self.trim(req, &costs, &layout, &bounds, &r, &mut out, true);
        } else if before < r.trigger {
            out.reason = format!("{before} tokens are below the trigger of {}", r.trigger);
            out.messages = req.messages;
        } else if self.breakers.gate(session(&req), &r.settings, now) == Circuit::Open {
            out.warnings.push(Warning {
                code: BREAKER_OPEN,
                message: format!(
                    "{} consecutive compactions of this session ended over the target: trimming the \
                     oldest turns instead until the breaker closes (a success, or {} s)",
                    out.breaker.consecutive_failures,
                    r.settings.breaker_cooldown.as_secs()
                ),
                about: Vec::new(),
            });
            self.trim(req, &costs, &layout, &bounds, &r, &mut out, false);
        } else {
            self.summarize(req, &costs, layout, &bounds, &r, &mut out, now, cancel)?;
        }
        if cancel.is_cancelled() {
            return Err(CompactError::Cancelled);
        }
        metrics::compaction(
            metrics::COMPACTION_SOURCE_COMPACT,
            out.outcome.as_str(),
            out.tokens_before.saturating_sub(out.tokens_after),
        );
        debug!(
            outcome = out.outcome.as_str(),
            messages_before = costs.len(),
            messages_after = out.messages.len(),
            tokens_before = out.tokens_before,
            tokens_after = out.tokens_after,
            "compact"
        );
        Ok(out)
    }

    fn resolve(&self, req: &CompactRequest) -> Result<Resolved, CompactError> {
        let mut v = super::conversation::validate(req);
        let spec = self.counting.model(&req.model);
        if spec.is_none() {
            v.push(FieldViolation::new("model", UNKNOWN_MODEL));
        }
        if req.target_tokens == Some(0) {
            v.push(FieldViolation::new("target_tokens", "must be positive when set"));
        }
        let (spec, settings) = match spec {
            Some(s) if v.is_empty() => s,
            _ => return Err(CompactError::InvalidArgument(v)),
        };
        let budget = spec.context_window.saturating_sub(spec.output_reserve);
        Ok(Resolved {
            model: spec.name.clone(),
            tokenizer: spec.tokenizer.clone(),
            reads_thinking: spec.reads_thinking(),
            trigger: req
                .trigger_tokens
                .unwrap_or_else(|| CompactionSettings::share(budget, settings.trigger_percent)),
            target: req
                .target_tokens
                .unwrap_or_else(|| CompactionSettings::share(budget, settings.target_percent)),
            preserve: req.preserve_recent.unwrap_or(settings.preserve_recent),
            settings,
        })
    }

    /// Tokens of one message (opening the conversation when `first`) under
    /// the compaction formula ([`message_tokens`]), counting through the
    /// shared count cache. Ticks `meter` per block (a message may hold very
    /// many), and stops once it is cancelled.
    fn cost(
        &self,
        r: &Resolved,
        m: &Msg,
        first: bool,
        lookups: &mut Lookups,
        meter: &mut Meter<'_>,
    ) -> Result<u32, CompactError> {
        let mut stopped = None;
        let tok = &r.tokenizer;
        let n = message_tokens(tok, r.reads_thinking, m, first, |text| {
            if stopped.is_some() {
                return 0;
            }
            if let Err(e) = meter.tick(1 + text.len() as u64) {
                stopped = Some(e);
                return 0;
            }
            let (count, hit) = self.counting.count_cached(tok, text);
            lookups.made += 1;
            lookups.hits += u64::from(hit);
            count
        });
        match stopped {
            Some(e) => Err(e.into()),
            None => Ok(n),
        }
    }

    /// Replaces `messages[body..cut]` with a summary (merged into an earlier
    /// one) followed by the pinned items, and records the breaker.
    #[allow(clippy::too_many_arguments)]
    fn summarize(
        &self,
        req: CompactRequest,
        costs: &[u32],
        layout: Layout,
        bounds: &Boundaries,
        r: &Resolved,
        out: &mut Compaction,
        now: Instant,
        cancel: &Cancel,
    ) -> Result<(), CompactError> {
        let Some(cut) = bounds.compaction_cut(r.preserve as usize) else {
            out.outcome = CompactOutcome::NothingToCompact;
            out.reason = format!(
                "{} tokens reach the trigger of {}, but no clean cut keeps the {} most recent messages \
                 and summarizes anything",
                out.tokens_before, r.trigger, r.preserve
            );
            out.messages = req.messages;
            return Ok(());
        };
        let Layout { head, earlier, body } = layout;
        let (earlier_index, earlier_summary) = earlier.unzip();
        let summary = Summary::of_until(&req.messages[body..cut], earlier_summary, cancel)?;
        let continuation = Msg {
            id: String::new(),
            role: Role::User,
            content: vec![Content::Text(summary.continuation(&r.settings.marker_key))],
        };
        let restored_from = earlier_index.map_or(body, |i| i + 1);
        let pinned = pinned_after_summary(&req, restored_from..body, &r.settings.marker_key);
        let added = self.inserted_tokens(r, head, &continuation, &pinned, cancel)?;
        let after = r
            .tokenizer
            .priming_tokens()
            .saturating_add(costs[..head].iter().copied().fold(0, u32::saturating_add))
            .saturating_add(added)
            .saturating_add(costs[cut..].iter().copied().fold(0, u32::saturating_add));

        out.provenance = Some(Provenance {
            message_ids: ids(&req.messages[body..cut]),
            start: index(body),
            end: index(cut),
            merged_summary_index: earlier_index.map(index),
        });
        out.summary_index = Some(index(head));
        out.tokens_after = after;
        let success = after <= r.target;
        out.breaker = self.breakers.record(session(&req), success, &r.settings, now);
        if out.breaker.opened_now {
            metrics::compaction_breaker_opened();
        }
        explain_summary(out, r, cut - body, success);
        let mut messages = req.messages;
        let recent = messages.split_off(cut);
        messages.truncate(head);
        messages.push(continuation);
        messages.extend(pinned);
        messages.extend(recent);
        out.messages = messages;
        Ok(())
    }

    /// Tokens of the messages a summary inserts after the `head` system
    /// messages: the `continuation`, then the `pinned` items.
    fn inserted_tokens(
        &self,
        r: &Resolved,
        head: usize,
        continuation: &Msg,
        pinned: &[Msg],
        cancel: &Cancel,
    ) -> Result<u32, CompactError> {
        let mut lookups = Lookups::default();
        let mut meter = Meter::new(cancel);
        let mut added = 0u32;
        for (i, m) in std::iter::once(continuation).chain(pinned).enumerate() {
            let first = head + i == 0;
            added = added.saturating_add(self.cost(r, m, first, &mut lookups, &mut meter)?);
        }
        Ok(added)
    }

    /// Drops the oldest turns of the body, [`TURNS_PER_TRIM_STEP`] at a time
    /// (a call and its results are one turn), until the conversation is at
    /// most the target or only the last turn is left. An emergency trim
    /// drops at least one step (the provider has already refused the
    /// conversation); when not one turn can go, it answers
    /// [`CompactOutcome::NothingToCompact`].
    #[allow(clippy::too_many_arguments)]
    fn trim(
        &self,
        req: CompactRequest,
        costs: &[u32],
        layout: &Layout,
        bounds: &Boundaries,
        r: &Resolved,
        out: &mut Compaction,
        emergency: bool,
    ) {
        let mut tokens = out.tokens_before;
        let mut k = layout.body;
        while tokens > r.target || (emergency && out.trim_steps.is_empty()) {
            let Some(next) = bounds.after_turns(k, TURNS_PER_TRIM_STEP) else {
                break;
            };
            let dropped = costs[k..next].iter().copied().fold(0, u32::saturating_add);
            tokens = tokens.saturating_sub(dropped);
            out.trim_steps.push(TrimStep {
                message_ids: ids(&req.messages[k..next]),
                start: index(k),
                end: index(next),
                tokens_after: tokens,
            });
            k = next;
        }
        out.tokens_after = tokens;
        if emergency && out.trim_steps.is_empty() {
            // Not even one step could go (the body is at most one turn):
            // say so instead of reporting a trim that did not happen.
            out.outcome = CompactOutcome::NothingToCompact;
            out.reason = format!(
                "the provider refused {tokens} tokens, but past its system messages the conversation is at \
                 most one turn: nothing can be trimmed without dropping the last turn"
            );
        } else {
            out.outcome = if emergency {
                CompactOutcome::EmergencyTrimmed
            } else {
                CompactOutcome::BreakerTrimmed
            };
            out.reason = format!(
                "{} trim steps dropped {} messages: {} tokens to {tokens}",
                out.trim_steps.len(),
                k - layout.body,
                out.tokens_before
            );
        }
        if tokens > r.target {
            out.warnings.push(Warning {
                code: OVER_TARGET,
                message: format!(
                    "{tokens} tokens after trimming, over the target of {}: only the last turn is left",
                    r.target
                ),
                about: Vec::new(),
            });
        }
        let mut messages = req.messages;
        messages.drain(layout.body..k);
        out.messages = messages;
    }
}

impl Layout {
    /// Finds the parts; an earlier summary and its pinned items count only
    /// with a valid tag under `key` (else they are ordinary messages).
    fn of(msgs: &[Msg], key: &MarkerKey) -> Self {
        let head = msgs.iter().take_while(|m| m.role == Role::System).count();
        let earlier = msgs
            .get(head)
            .and_then(|m| match m.content.as_slice() {
                [Content::Text(t)] => Summary::parse(t, key),
                _ => None,
            })
            .map(|s| (head, s));
        let body = match earlier {
            Some(_) => {
                head + 1
                    + msgs[head + 1..]
                        .iter()
                        .take_while(|m| is_pinned_message(m, key))
                        .count()
            }
            None => head,
        };
        Layout { head, earlier, body }
    }
}

/// The breaker's key of a request: its session within its tenant.
fn session(req: &CompactRequest) -> SessionKey<'_> {
    SessionKey::new(&req.cache_salt, &req.session_id)
}

/// The pinned items to follow a new summary: the request's new ones replace
/// those restored last time (`restored`, after the earlier summary); without
/// new ones, those are carried forward.
fn pinned_after_summary(req: &CompactRequest, restored: std::ops::Range<usize>, key: &MarkerKey) -> Vec<Msg> {
    if req.pinned.is_empty() {
        req.messages[restored].to_vec()
    } else {
        req.pinned.iter().map(|p| pinned_message(p, key)).collect()
    }
}

/// Sets the outcome and reason of a compaction that summarized `summarized`
/// messages, with a warning when it ended over the target (the tokens after
/// it and the breaker already recorded in `out`).
fn explain_summary(out: &mut Compaction, r: &Resolved, summarized: usize, success: bool) {
    let after = out.tokens_after;
    if success {
        out.outcome = CompactOutcome::Compacted;
        out.reason = format!(
            "{summarized} messages summarized: {} tokens to {after}",
            out.tokens_before
        );
    } else {
        out.outcome = CompactOutcome::CompactedOverTarget;
        out.reason = format!(
            "{summarized} messages summarized, but {after} tokens are still over the target of {}",
            r.target
        );
        out.warnings.push(Warning {
            code: OVER_TARGET,
            message: format!(
                "{after} tokens after compaction, over the target of {}: the {} preserved messages \
                 or the pinned items are too large ({} consecutive failures for this session)",
                r.target, r.preserve, out.breaker.consecutive_failures
            ),
            about: Vec::new(),
        });
    }
}

/// Count-cache lookups made, and how many hit.
#[derive(Debug, Default)]
struct Lookups {
    made: u64,
    hits: u64,
}

/// Tokens of a conversation whose messages cost `costs`.
fn total(tok: &Tokenizer, costs: &[u32]) -> u32 {
    costs
        .iter()
        .copied()
        .fold(tok.priming_tokens(), u32::saturating_add)
}

/// Tokens of the message `m` (opening the conversation when `first`), each
/// text counted by `count`: the chat formula's frame plus its blocks' texts
/// (thinking when the provider `reads_thinking`);
/// for a model folder whose template sets a lone text in a piece of its own
/// ([`Tokenizer::glue`]), the frame outside that piece plus the piece's
/// count, which is exact where the content meets the frame.
fn message_tokens(
    tok: &Tokenizer,
    reads_thinking: bool,
    m: &Msg,
    first: bool,
    mut count: impl FnMut(&str) -> u32,
) -> u32 {
    if let ([Content::Text(text)], Some(glue)) = (m.content.as_slice(), tok.glue(m.role, first)) {
        return tok.glued_message_tokens(m.role, first, count(&glue.piece(text)));
    }
    m.content
        .iter()
        .flat_map(|c| c.counted_texts(reads_thinking))
        .filter(|t| !t.is_empty())
        .map(count)
        .fold(tok.frame_tokens(m.role), u32::saturating_add)
}

/// Tokens of `messages` under the compaction formula, counted from scratch
/// (no cache): what every reported count must equal. Thinking counts when
/// the provider `reads_thinking` ([`crate::tokens::ModelSpec::reads_thinking`]).
pub fn recount(tok: &Tokenizer, reads_thinking: bool, messages: &[Msg]) -> u32 {
    let costs: Vec<u32> = messages
        .iter()
        .enumerate()
        .map(|(i, m)| message_tokens(tok, reads_thinking, m, i == 0, |t| tok.count(t)))
        .collect();
    total(tok, &costs)
}

fn ids(msgs: &[Msg]) -> Vec<String> {
    msgs.iter()
        .filter(|m| !m.id.is_empty())
        .map(|m| m.id.clone())
        .collect()
}

fn index(i: usize) -> u32 {
    saturating_u32(i)
}

/// Warnings for pairs already broken in the input: results whose call is
/// nowhere before them, and calls that no later message answers (except in
/// the last message, where the gateway is waiting for the tool).
fn pairing_warnings(msgs: &[Msg], bounds: &Boundaries) -> Vec<Warning> {
    let mut out = Vec::new();
    if !bounds.orphans.is_empty() {
        out.push(Warning {
            code: ORPHAN_TOOL_RESULT,
            message: format!(
                "{} tool results without their call; they stay with the oldest messages",
                bounds.orphans.len()
            ),
            about: Vec::new(),
        });
    }
    let answered: std::collections::HashSet<&str> = msgs.iter().flat_map(Msg::tool_results).collect();
    let unanswered = msgs
        .iter()
        .take(msgs.len().saturating_sub(1))
        .flat_map(Msg::tool_uses)
        .filter(|id| !answered.contains(id))
        .count();
    if unanswered > 0 {
        out.push(Warning {
            code: UNANSWERED_TOOL_CALL,
            message: format!("{unanswered} tool calls have no result in the conversation"),
            about: Vec::new(),
        });
    }
    out
}

#[cfg(test)]
mod tests;
