//! The lay-out step of a run: the messages ordered for attention and
//! caches, the hints, and the prompt's parts with their tokens.

use super::super::allocate::{Allocation, Carrier};
use super::super::layout;
use super::{Laid, PartFacts, Pipeline, Sized};
use crate::prompt::PartKind;
use crate::prompt_cache::hints;
use crate::prompt_cache::prefix::SEGMENTS_APART;
use crate::vocab::{Warning, codes, saturating_u32};

impl Pipeline<'_> {
    /// The lay-out step: the messages ordered for attention and caches (and
    /// joined where the template refuses two of one role), the hints, and
    /// the parts with their tokens. With `ahead`, the unit of the summary
    /// the window's next step would keep, the summary message holding it
    /// instead of `turn_summary` is handed to the provider's counter.
    pub(super) fn lay_out(
        &mut self,
        sized: &Sized,
        alloc: &Allocation,
        turn_summary: Option<String>,
        ahead: Option<String>,
    ) -> Laid {
        let kept_unit = ahead.as_ref().and(turn_summary.clone());
        let (mut plan, mut part_refs) = layout::plan(self.measurement(), self.policy, alloc, turn_summary);
        let joined = layout::conform(&mut plan, self.counter.tok.layout_rules(), &mut part_refs);
        if let (Some(kept), Some(ahead)) = (kept_unit, ahead) {
            let summary = part_refs
                .iter()
                .find(|p| p.kind == PartKind::Summary)
                .and_then(|p| plan.get(p.message));
            if let Some((_, layout::Source::Rendered(text))) = summary
                && let Some(before) = text.strip_suffix(kept.as_str())
            {
                self.counter.learn_ahead(&[before, ahead.as_str()].concat());
            }
        }
        if joined > 0 {
            self.warnings.push(Warning::new(
                codes::MESSAGES_JOINED,
                format!(
                    "{joined} message(s) joined with the one before them: the chat template of model {} refuses consecutive messages of one role",
                    self.spec.name
                ),
            ));
        }
        let last_turn = plan.iter().rposition(|(_, c)| c.holds_turn());
        let hints = hints::of(
            &self.spec.cache,
            &hints::Prompt {
                segments: &self.req.static_segments,
                session_id: &self.req.session_id,
                tools: self.tools.len(),
                last_turn,
                prefix_hash: &sized.prefix.hex,
                prefix_tokens: sized.facts.tokens,
                stable_tokens: stable_tokens(sized, alloc, last_turn.is_some()),
                tools_tokens: sized.facts.tools_tokens,
            },
        );
        let parts = self.part_facts(&part_refs, sized, alloc);
        Laid { plan, parts, hints }
    }

    /// The parts of the laid-out prompt with their tokens, tools first: a
    /// message's under the chat formula, a context unit's share of the
    /// context message (the first also carries the message's own overhead),
    /// the tools' share.
    fn part_facts(&self, refs: &[layout::PartRef], sized: &Sized, alloc: &Allocation) -> Vec<PartFacts> {
        let Sized {
            facts,
            plans,
            overheads,
            query_tokens,
            ..
        } = sized;
        let turn_summary = alloc.summary.as_ref().map_or(0, |s| s.cost);
        let unit_cost = |b: usize, u: usize| alloc.costs.get(b).and_then(|c| c.get(u)).copied().unwrap_or(0);
        let mut out = Vec::with_capacity(refs.len() + 1);
        if !self.tools.is_empty() {
            let mut h = xxhash_rust::xxh3::Xxh3::new();
            for t in self.tools {
                h.update(&(t.len() as u64).to_le_bytes());
                h.update(t.as_bytes());
            }
            out.push(PartFacts {
                kind: PartKind::Tools,
                at: None,
                hash: h.digest(),
                tokens: facts.tools_tokens,
                message_index: 0,
                volatile: false,
                item: None,
            });
        }
        let last_apart = SEGMENTS_APART - 1;
        let mut context_opened = false;
        for r in refs {
            // Segments past those kept apart are one part with the last of
            // those (its tokens and volatile flag already hold theirs).
            if matches!(r.at, layout::PartAt::Static(i) if i > last_apart) {
                if let Some(last) = out.last_mut() {
                    last.hash = last.hash.rotate_left(17) ^ r.hash;
                }
                continue;
            }
            let (tokens, volatile) = match r.at {
                layout::PartAt::Static(i) => (
                    facts.segment_tokens.get(i).copied().unwrap_or(0),
                    facts.volatile_segments & (1 << i.min(last_apart)) != 0,
                ),
                layout::PartAt::Summary => {
                    let units: u32 = plans
                        .iter()
                        .zip(&alloc.costs)
                        .filter(|(p, _)| p.slot == Carrier::Summary)
                        .flat_map(|(_, c)| c)
                        .fold(0, |a, &c| a.saturating_add(c));
                    (
                        overheads[1].saturating_add(units).saturating_add(turn_summary),
                        false,
                    )
                }
                layout::PartAt::Unit { block, unit } if r.kind != PartKind::Turn => {
                    let opened = if std::mem::replace(&mut context_opened, true) {
                        0
                    } else {
                        overheads[0]
                    };
                    (unit_cost(block, unit).saturating_add(opened), false)
                }
                layout::PartAt::Unit { block, unit } => (unit_cost(block, unit), false),
                layout::PartAt::Query => (*query_tokens, false),
            };
            out.push(PartFacts {
                kind: r.kind,
                at: Some(r.at),
                hash: r.hash,
                tokens,
                message_index: saturating_u32(r.message),
                volatile,
                item: r.item,
            });
        }
        out
    }
}

/// Tokens of the prompt's stable part: the static messages, and with turns
/// kept (`turns`), the summary message and the turns, which come right
/// after them (layout's order; the context message after them).
fn stable_tokens(sized: &Sized, alloc: &Allocation, turns: bool) -> u32 {
    if !turns {
        return sized.facts.tokens;
    }
    let of = |slot: Carrier| -> u64 {
        sized
            .plans
            .iter()
            .zip(&alloc.costs)
            .filter(|(p, _)| p.slot == slot && (slot != Carrier::Own || p.chrono.is_some()))
            .flat_map(|(_, c)| c)
            .map(|&c| u64::from(c))
            .sum()
    };
    let turn_summary = alloc.summary.as_ref().map_or(0, |s| u64::from(s.cost));
    let summary = of(Carrier::Summary) + turn_summary;
    let opened = if summary > 0 {
        u64::from(sized.overheads[1])
    } else {
        0
    };
    saturating_u32(u64::from(sized.facts.tokens) + opened + summary + of(Carrier::Own))
}
