//! The measure step of a run: the static prefix's facts (looked up, or
//! counted once), the query's tokens, and every block filtered by
//! permission, grouped into units and measured.

use tracing::debug;

use super::super::allocate::{BlockPlan, Carrier, DropReason, UnitPlan};
use super::super::error::AssembleError;
use super::super::lighten;
use super::super::measure::{Measured, MemberCost, Unit};
use super::super::turns;
use super::{Pipeline, Sized};
use crate::prompt::{BlockKind, Item};
use crate::prompt_cache::prefix::{PrefixFacts, PrefixKey};
use crate::telemetry::metrics;
use crate::vocab::{Role, Warning, WarningRef, codes};

impl Pipeline<'_> {
    /// The measure step: the static prefix's facts (looked up or counted),
    /// the query's tokens, and every block filtered, grouped and measured.
    pub(super) fn size(&mut self, prefix: PrefixKey) -> Result<Sized, AssembleError> {
        let (facts, prefix_hit) = self.prefix_facts(&prefix);
        let query_tokens = if self.req.no_query {
            0
        } else {
            self.counter
                .message_count(Role::User, false, &self.req.query, None)
        };
        let plans = self.measure();
        self.check_cancelled()?;
        self.end_phase(metrics::PHASE_TOKENIZE);
        Ok(Sized {
            prefix,
            facts,
            prefix_hit,
            query_tokens,
            plans,
            // Opening the context message (policy's role) and the summary
            // message (user).
            overheads: [
                self.message_cost(self.policy.context_role, 0),
                self.message_cost(Role::User, 0),
            ],
        })
    }

    /// Tokens of the static prefix messages and of the tools, and the
    /// prefix's volatile values: one lookup when the prefix is known, else
    /// one count and one scan per segment and tool (single flight:
    /// concurrent requests with a new prefix do it once). A cancelled count is not cached. Volatile values
    /// give a warning and are counted in every response that carries them.
    ///
    /// The cache is partitioned by `cache_salt`: a prefix another tenant
    /// (another salt) brought is a miss, so `prefix_cache_hit` never tells
    /// one caller what system prompt another used.
    fn prefix_facts(&mut self, prefix: &PrefixKey) -> (PrefixFacts, bool) {
        let key = prefix.cache_key(self.counter.tok, &self.req.cache_salt);
        let cached = self
            .counter
            .allowance
            .is_bounded()
            .then(|| self.counter.caches.prefixes.get(&key));
        let counted = if let Some(found) = cached
            && (found.is_some() || !self.counter.afford(self.prefix_bytes()))
        {
            Ok(found.map(|f| (f, true)).unwrap_or_default())
        } else if self.counter.tok.content_estimate().is_some() {
            // Learned piece by piece: facts counted while a segment or the
            // tools are estimated are not kept, since their counts become
            // the provider's once it has counted them.
            match self.counter.caches.prefixes.get(&key) {
                Some(facts) => Ok((facts, true)),
                None => {
                    let before = self.counter.estimated();
                    let facts = self.count_prefix();
                    if let Ok(f) = facts
                        && self.counter.estimated() == before
                    {
                        self.counter.caches.prefixes.insert(key, f);
                    }
                    facts.map(|f| (f, false))
                }
            }
        } else {
            self.counter
                .caches
                .prefixes
                .get_or_try_count(key, || self.count_prefix())
        };
        // Cancelled: the run is abandoned at the next check.
        let (facts, hit) = counted.unwrap_or((PrefixFacts::default(), false));
        self.prefix_lookup = Some((facts, hit));
        self.warnings.extend(facts.warning(&self.req.static_segments));
        (facts, hit)
    }

    /// Bytes of the static segments and tool definitions: what counting the
    /// static prefix counts.
    fn prefix_bytes(&self) -> usize {
        let segments: usize = self.req.static_segments.iter().map(|s| s.content.len()).sum();
        segments + self.tools.iter().map(String::len).sum::<usize>()
    }

    /// Counts the static prefix: each segment as a system message, and the
    /// tools.
    fn count_prefix(&self) -> Result<PrefixFacts, AssembleError> {
        let tokens = self
            .req
            .static_segments
            .iter()
            .enumerate()
            .map(|(i, s)| self.counter.message_count(Role::System, i == 0, &s.content, None))
            .collect::<Vec<u32>>();
        let tools_tokens = self.counter.tools_tokens(self.tools);
        if self.counter.cancel.is_cancelled() {
            return Err(AssembleError::Cancelled);
        }
        Ok(PrefixFacts::scan(
            tokens,
            tools_tokens,
            &self.req.static_segments,
            self.tools,
        ))
    }

    /// Filters every block by permission, groups the conversation into units
    /// and measures every unit.
    fn measure(&mut self) -> Vec<BlockPlan> {
        self.filter_blocks();
        let chrono = self.group_conversation();
        self.cost_turns(&chrono);
        (self.req.blocks.iter().enumerate())
            .map(|(bi, block)| BlockPlan {
                kind: block.kind,
                priority: self.policy.priority_of(block),
                cuttable: block.effective_cuttable(),
                min_tokens: block.min_tokens,
                max_tokens: block.max_tokens(),
                slot: Carrier::of(block.kind),
                chrono: chrono.iter().position(|&c| c == bi),
                units: self.unit_plans(bi),
            })
            .collect()
    }

    /// Keeps of every block the items the principal may see; a context
    /// block's units are its items (turns are grouped later).
    fn filter_blocks(&mut self) {
        let held = self.req.principal.held();
        for (bi, block) in self.req.blocks.iter().enumerate() {
            let (candidates, filtered): (Vec<usize>, Vec<usize>) =
                (0..block.items.len()).partition(|&i| held.permit(&block.items[i].required_scopes));
            if !filtered.is_empty() {
                debug!(
                    block = bi,
                    filtered = filtered.len(),
                    "items filtered by permission"
                );
            }
            let turns = block.kind.is_turns();
            let units = if turns {
                Vec::new()
            } else {
                (0..candidates.len())
                    .map(|ci| Unit {
                        members: vec![(bi, ci)],
                        invalid: None,
                    })
                    .collect()
            };
            self.measured
                .push(Measured::new(candidates, filtered, units, turns));
        }
    }

    /// Counts every turn of the turn blocks `chrono` and decides what
    /// lightening may do to it.
    fn cost_turns(&mut self, chrono: &[usize]) {
        let reads_thinking = self.spec.reads_thinking();
        for (bi, lights) in lighten::members(self.measurement(), chrono, self.policy)
            .into_iter()
            .enumerate()
        {
            if !chrono.contains(&bi) {
                continue;
            }
            let costs: Vec<MemberCost> = (0..self.measured[bi].candidates.len())
                .map(|ci| self.member_cost(bi, ci, reads_thinking))
                .collect();
            let m = &mut self.measured[bi];
            m.lights = lights;
            m.costs = costs;
        }
    }

    /// The units of block `bi` as the allocator reads them.
    fn unit_plans(&self, bi: usize) -> Vec<UnitPlan> {
        let req = self.req;
        let block = &req.blocks[bi];
        let m = &self.measured[bi];
        m.units
            .iter()
            .enumerate()
            .map(|(ui, u)| {
                // A unit of a cuttable context block is measured when the
                // allocator offers it room, and only as far as that room.
                let lazy = !block.kind.is_turns() && block.effective_cuttable() && u.invalid.is_none();
                let full = if lazy {
                    0
                } else if block.kind.is_turns() {
                    u.members
                        .iter()
                        .map(|&(mb, mc)| {
                            let c = self.measured[mb].costs.get(mc).copied().unwrap_or_default();
                            c.message.saturating_add(c.thinking)
                        })
                        .fold(0, u32::saturating_add)
                } else if self.counter.cancel.is_cancelled() {
                    // Nothing more is rendered or counted: the run is
                    // abandoned after measuring.
                    0
                } else {
                    self.counter
                        .count(m.unit(block.kind, self.measurement().item(bi, ui), ui))
                };
                let first = self.measurement().item(u.members[0].0, u.members[0].1);
                UnitPlan {
                    full,
                    lazy,
                    score: first.score,
                    // An empty compact form would render an empty wrapper
                    // reported as kept: it counts as none.
                    has_compact: !block.kind.is_turns()
                        && first.compact_form.as_deref().is_some_and(|c| !c.is_empty()),
                    invalid: u.invalid,
                    pinned: u
                        .members
                        .iter()
                        .any(|&(mb, _)| !req.blocks[mb].effective_cuttable()),
                }
            })
            .collect()
    }

    /// The tokens of turn candidate `ci` of block `bi`: its message, and
    /// its thinking when the provider reads it.
    fn member_cost(&self, bi: usize, ci: usize, reads_thinking: bool) -> MemberCost {
        let it = self.measurement().item(bi, ci);
        if self.counter.cancel.is_cancelled() {
            return MemberCost::default();
        }
        let role = it.role.unwrap_or(Role::User);
        let message = self.counter.message_count(
            role,
            false,
            &it.content,
            Some(self.measurement().content_key(&self.counter, bi, ci)),
        );
        let thinking = if reads_thinking {
            it.thinking
                .iter()
                .filter(|t| !t.redacted)
                .map(|t| self.counter.count(&t.text))
                .fold(0, u32::saturating_add)
        } else {
            0
        };
        MemberCost { message, thinking }
    }

    /// Groups every visible turn of the conversation (HISTORY blocks, then
    /// RECENT_TURNS blocks, each in request order) into units; a unit belongs
    /// to the block of its last member. Returns the turn blocks oldest first.
    fn group_conversation(&mut self) -> Vec<usize> {
        let req = self.req;
        let of = |k: BlockKind| (0..req.blocks.len()).filter(move |&b| req.blocks[b].kind == k);
        let chrono: Vec<usize> = of(BlockKind::History).chain(of(BlockKind::RecentTurns)).collect();
        let turns: Vec<(usize, usize)> = chrono
            .iter()
            .flat_map(|&b| (0..self.measured[b].candidates.len()).map(move |c| (b, c)))
            .collect();
        let items: Vec<&Item> = turns
            .iter()
            .map(|&(b, c)| self.measurement().item(b, c))
            .collect();
        let mut units = turns::group(&items);
        if self.counter.tok.layout_rules().user_first {
            units = turns::exchanges(units, &items);
        }
        for unit in units {
            let members: Vec<(usize, usize)> = unit.members.iter().map(|&i| turns[i]).collect();
            if let Some(reason) = unit.invalid {
                let ids: Vec<&str> = members
                    .iter()
                    .map(|&(b, c)| self.measurement().item(b, c).id.as_str())
                    .collect();
                let (code, what) = match reason {
                    DropReason::OrphanToolResult => {
                        (codes::ORPHAN_TOOL_RESULT, "tool result without its call")
                    }
                    _ => (
                        codes::INCOMPLETE_TOOL_CALL,
                        "tool call without all of its results",
                    ),
                };
                let about = members
                    .iter()
                    .zip(&ids)
                    .map(|(&(block, _), id)| WarningRef::Item {
                        block,
                        id: (*id).to_owned(),
                    })
                    .collect();
                self.warnings.push(
                    Warning::new(code, format!("{what}, dropped: {}", ids.join(", "))).with_about(about),
                );
            }
            let owner = members.last().map_or(0, |&(b, _)| b);
            self.measured[owner].units.push(Unit {
                members,
                invalid: unit.invalid,
            });
        }
        chrono
    }
}
