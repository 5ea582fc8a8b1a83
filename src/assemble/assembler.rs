//! The assembly pipeline: resolve, validate, filter, measure, allocate, lay
//! out, report. CLEAR's control flow: C/E arrive in the request, L filters
//! before anything is measured, A allocates and orders.

use std::sync::Arc;

use tracing::debug;

use super::allocate::{self, Allocation, BlockFate, BlockPlan, DropReason, Form, Shrink, Slot, UnitPlan};
use super::cache::CountCache;
use super::error::AssembleError;
use super::models::{ModelSpec, ModelTable};
use super::render::{self, FormAttr};
use super::request::{AssembleRequest, Block, BlockKind, Item, Role};
use super::response::{Assembly, BlockDecision, CacheInfo, Message, Outcome, Usage, Warning};
use super::tokenizer::{Encoding, Tokenizer};
use super::turns;
use super::validate::{self, Budget};
use crate::telemetry::metrics;

/// Tokens every reply is primed with (chat formula).
const REPLY_PRIMING_TOKENS: u32 = 3;
/// Tokens every message costs besides its role and content (chat formula).
const MESSAGE_OVERHEAD_TOKENS: u32 = 3;
/// Default weight of the token-count caches.
pub const DEFAULT_CACHE_BYTES: u64 = 64 * 1024 * 1024;

/// Assembles prompts. Cheap to share: clone the `Arc`.
#[derive(Debug)]
pub struct Assembler {
    models: Arc<ModelTable>,
    segments: CountCache,
    prefixes: CountCache,
}

/// Which tokenizer `CountTokens` should use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CountTarget {
    /// A model name from the table.
    Model(String),
    /// An encoding name.
    Encoding(String),
}

/// A token count and how it was made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenCount {
    /// Tokens.
    pub tokens: u32,
    /// Tokenizer id.
    pub tokenizer: String,
    /// Whether exact.
    pub exact: bool,
}

impl Assembler {
    /// An assembler over `models` whose caches hold about `cache_bytes`
    /// (split: seven eighths for segments and items, one eighth for prefixes).
    pub fn new(models: ModelTable, cache_bytes: u64) -> Self {
        Assembler {
            models: Arc::new(models),
            segments: CountCache::new(cache_bytes / 8 * 7, metrics::SEGMENT_CACHE_LOOKUPS_TOTAL),
            prefixes: CountCache::new(cache_bytes / 8, metrics::PREFIX_CACHE_LOOKUPS_TOTAL),
        }
    }

    /// The model table.
    pub fn models(&self) -> &ModelTable {
        &self.models
    }

    /// Loads every vocabulary the table uses (readiness waits for this).
    pub fn warm(&self) {
        for e in self.models.encodings() {
            e.warm();
        }
    }

    /// Counts `text` with the tokenizer of a model or an encoding.
    pub fn count_tokens(&self, target: &CountTarget, text: &str) -> Result<TokenCount, AssembleError> {
        let tokenizer = match target {
            CountTarget::Model(m) => {
                self.models
                    .resolve(m)
                    .map(|s| s.tokenizer.clone())
                    .ok_or_else(|| {
                        AssembleError::invalid(
                            "model",
                            "unknown model: not in the model table (see ListModels)",
                        )
                    })?
            }
            CountTarget::Encoding(e) => Encoding::from_name(e).map(Tokenizer::exact).ok_or_else(|| {
                AssembleError::invalid("encoding", "unknown encoding: use o200k_base or cl100k_base")
            })?,
        };
        Ok(TokenCount {
            tokens: tokenizer.count(text),
            tokenizer: tokenizer.to_string(),
            exact: tokenizer.is_exact(),
        })
    }

    /// Assembles one prompt. CPU-bound: call it off the async reactor.
    pub fn assemble(&self, req: &AssembleRequest) -> Result<Assembly, AssembleError> {
        let spec = self.models.resolve(&req.model).cloned();
        let budget = validate::validate(req, spec.as_deref()).map_err(AssembleError::InvalidArgument)?;
        let Some(spec) = spec else {
            return Err(AssembleError::invalid("model", "unknown model"));
        };
        Pipeline::new(self, &spec, req, budget).run()
    }
}

/// Per-request state: the measured candidates of every block.
struct Pipeline<'a> {
    asm: &'a Assembler,
    spec: &'a ModelSpec,
    tok: &'a Tokenizer,
    req: &'a AssembleRequest,
    budget: Budget,
    role_tokens: [u32; 4],
    measured: Vec<Measured<'a>>,
    warnings: Vec<Warning>,
}

/// One block after filtering and measuring.
struct Measured<'a> {
    block: &'a Block,
    /// Items the principal may see, in block order.
    candidates: Vec<&'a Item>,
    /// Ids of the items filtered out.
    filtered: Vec<&'a str>,
    /// Units: candidate positions (one per item, or a turn with its results).
    units: Vec<turns::TurnUnit>,
    /// Rendered full-form text of each unit (context kinds only).
    rendered: Vec<String>,
}

impl<'a> Pipeline<'a> {
    fn new(asm: &'a Assembler, spec: &'a ModelSpec, req: &'a AssembleRequest, budget: Budget) -> Self {
        let tok = &spec.tokenizer;
        let role_tokens = Role::ALL.map(|r| tok.count(r.as_str()));
        Pipeline {
            asm,
            spec,
            tok,
            req,
            budget,
            role_tokens,
            measured: Vec::new(),
            warnings: Vec::new(),
        }
    }

    fn role_tokens(&self, role: Role) -> u32 {
        self.role_tokens[role as usize]
    }

    /// Tokens of one message whose content has `content` tokens.
    fn message_cost(&self, role: Role, content: u32) -> u32 {
        MESSAGE_OVERHEAD_TOKENS + self.role_tokens(role) + content
    }

    fn count(&self, text: &str) -> u32 {
        self.asm.segments.count(self.tok, text)
    }

    fn run(mut self) -> Result<Assembly, AssembleError> {
        let req = self.req;
        let (prefix_hash, prefix_digest, prefix_bytes) = render::prefix_hash(&req.static_segments);
        let (static_tokens, prefix_hit) = self.static_tokens(&prefix_digest);
        let query_tokens = self.message_cost(Role::User, self.count(&req.query));
        let base = u64::from(static_tokens) + u64::from(query_tokens) + u64::from(REPLY_PRIMING_TOKENS);

        let plans = self.measure();
        let overhead = self.message_cost(Role::User, 0);
        let mut shrinker = Shrinker { p: &self };
        let alloc = allocate::allocate(&plans, base, overhead, self.budget.input, &mut shrinker).map_err(|o| {
            debug!(non_cuttable = o.non_cuttable, budget = self.budget.input, model = %self.spec.name, "budget overflow");
            AssembleError::BudgetOverflow {
                non_cuttable_tokens: o.non_cuttable,
                budget: self.budget.input,
                model: self.spec.name.clone(),
            }
        })?;

        let messages = self.layout(&alloc);
        let decisions = self.decisions(&plans, &alloc);
        let total = u32::try_from(alloc.used).unwrap_or(u32::MAX);
        Ok(Assembly {
            request_id: req.request_id.clone(),
            model: self.spec.name.clone(),
            messages,
            usage: Usage {
                budget: self.budget.input,
                total_tokens: total,
                static_tokens,
                dynamic_tokens: total - static_tokens,
                tokenizer: self.tok.to_string(),
                exact: self.tok.is_exact(),
                output_reserve: self.budget.output_reserve,
                context_window: self.spec.context_window,
            },
            cache: CacheInfo {
                prefix_hash,
                prefix_tokens: static_tokens,
                prefix_bytes,
                prefix_message_count: req.static_segments.len() as u32,
                prefix_cache_hit: prefix_hit,
            },
            decisions,
            warnings: self.warnings,
        })
    }

    /// Tokens of the static prefix messages: one lookup when the prefix is
    /// known, else one per segment.
    fn static_tokens(&self, digest: &[u8; 32]) -> (u32, bool) {
        let key = CountCache::key(self.tok, digest);
        if let Some(n) = self.asm.prefixes.get(&key) {
            return (n, true);
        }
        let n = self
            .req
            .static_segments
            .iter()
            .map(|s| self.message_cost(Role::System, self.count(&s.content)))
            .sum();
        self.asm.prefixes.insert(key, n);
        (n, false)
    }

    /// Filters every block by permission, groups and measures its units.
    fn measure(&mut self) -> Vec<BlockPlan> {
        let req = self.req;
        let mut chrono_order: Vec<usize> = (0..req.blocks.len())
            .filter(|&i| req.blocks[i].kind == BlockKind::History)
            .collect();
        chrono_order.extend((0..req.blocks.len()).filter(|&i| req.blocks[i].kind == BlockKind::RecentTurns));

        let mut plans = Vec::with_capacity(req.blocks.len());
        for (bi, block) in req.blocks.iter().enumerate() {
            let (candidates, filtered): (Vec<&Item>, Vec<&Item>) = block
                .items
                .iter()
                .partition(|it| req.principal.may_see(&it.required_scopes));
            let filtered: Vec<&str> = filtered.iter().map(|it| it.id.as_str()).collect();
            if !filtered.is_empty() {
                debug!(
                    block = bi,
                    filtered = filtered.len(),
                    "items filtered by permission"
                );
            }
            let (units, rendered, costs): (Vec<turns::TurnUnit>, Vec<String>, Vec<u32>) =
                if block.kind.is_turns() {
                    let units = turns::group(&candidates);
                    let costs = units
                        .iter()
                        .map(|u| {
                            u.members
                                .iter()
                                .map(|&m| {
                                    let it = candidates[m];
                                    let role = it.role.unwrap_or(Role::User);
                                    self.message_cost(role, self.count(&it.content))
                                })
                                .sum()
                        })
                        .collect();
                    for u in units.iter().filter(|u| u.invalid.is_some()) {
                        let ids: Vec<&str> = u.members.iter().map(|&m| candidates[m].id.as_str()).collect();
                        let (code, what) = match u.invalid {
                            Some(DropReason::OrphanToolResult) => {
                                ("ORPHAN_TOOL_RESULT", "tool result without its call")
                            }
                            _ => ("INCOMPLETE_TOOL_CALL", "tool call without all of its results"),
                        };
                        self.warnings.push(Warning {
                            code,
                            message: format!("block {:?}: {what}, dropped: {}", block.name, ids.join(", ")),
                        });
                    }
                    (units, Vec::new(), costs)
                } else {
                    let rendered: Vec<String> = candidates
                        .iter()
                        .map(|it| render::unit(block.kind, it, &it.content, FormAttr::Full))
                        .collect();
                    let costs = rendered.iter().map(|u| self.count(u)).collect();
                    let units = (0..candidates.len())
                        .map(|i| turns::TurnUnit {
                            members: vec![i],
                            invalid: None,
                        })
                        .collect();
                    (units, rendered, costs)
                };
            let slot = match block.kind {
                BlockKind::Summary => Slot::Summary,
                BlockKind::RecentTurns | BlockKind::History => Slot::Own,
                BlockKind::State | BlockKind::Evidence | BlockKind::Memory => Slot::Context,
            };
            plans.push(BlockPlan {
                kind: block.kind,
                priority: block.effective_priority(),
                cuttable: block.effective_cuttable(),
                min_tokens: block.min_tokens,
                max_tokens: block.max_tokens(),
                slot,
                chrono: chrono_order.iter().position(|&c| c == bi),
                units: units
                    .iter()
                    .zip(&costs)
                    .map(|(u, &full)| UnitPlan {
                        full,
                        score: u.members.first().map_or(0.0, |&m| candidates[m].score),
                        has_compact: !block.kind.is_turns()
                            && candidates[u.members[0]].compact_form.is_some(),
                        invalid: u.invalid,
                    })
                    .collect(),
            });
            self.measured.push(Measured {
                block,
                candidates,
                filtered,
                units,
                rendered,
            });
        }
        plans
    }

    /// The text of a kept context unit in its kept form.
    fn unit_text(&self, bi: usize, ui: usize, form: Form) -> std::borrow::Cow<'_, str> {
        let m = &self.measured[bi];
        let item = m.candidates[ui];
        match form {
            Form::Compact => {
                let text = item.compact_form.as_deref().unwrap_or_default();
                render::unit(m.block.kind, item, text, FormAttr::Compact).into()
            }
            Form::Truncated { bytes } => {
                render::unit(m.block.kind, item, &item.content[..bytes], FormAttr::Truncated).into()
            }
            Form::Full | Form::Dropped(_) => m.rendered[ui].as_str().into(),
        }
    }

    /// Orders the kept units into messages (see the crate docs for the rules).
    fn layout(&self, alloc: &Allocation) -> Vec<Message> {
        let req = self.req;
        let mut out: Vec<Message> = req
            .static_segments
            .iter()
            .map(|s| Message::text(Role::System, s.content.clone()))
            .collect();

        let kept = |bi: usize| -> Vec<usize> {
            (0..alloc.forms[bi].len())
                .filter(|&u| alloc.forms[bi][u].is_kept())
                .collect()
        };
        let of_kind = |k: BlockKind| -> Vec<usize> {
            (0..self.measured.len())
                .filter(|&b| self.measured[b].block.kind == k)
                .collect()
        };
        let by_priority = |mut v: Vec<usize>| {
            v.sort_by_key(|&b| (self.measured[b].block.effective_priority(), b));
            v
        };
        let by_score = |bi: usize, mut v: Vec<usize>| {
            let c = &self.measured[bi].candidates;
            v.sort_by(|&x, &y| c[y].score.total_cmp(&c[x].score).then(x.cmp(&y)));
            v
        };

        let mut summary = String::new();
        for bi in of_kind(BlockKind::Summary) {
            for ui in kept(bi) {
                summary.push_str(&self.unit_text(bi, ui, alloc.forms[bi][ui]));
            }
        }
        if !summary.is_empty() {
            out.push(Message::text(Role::User, summary));
        }

        for kind in [BlockKind::History, BlockKind::RecentTurns] {
            for bi in of_kind(kind) {
                let m = &self.measured[bi];
                for ui in kept(bi) {
                    for &c in &m.units[ui].members {
                        let it = m.candidates[c];
                        out.push(Message {
                            role: it.role.unwrap_or(Role::User),
                            content: it.content.clone(),
                            tool_call_ids: it.tool_call_ids.clone(),
                            tool_call_id: it.tool_call_id.clone(),
                        });
                    }
                }
            }
        }

        // Evidence ranked across blocks (priority, then score), then placed
        // best-first, second-best-last, weaker in the middle.
        let mut evidence: Vec<(usize, usize)> = Vec::new();
        for bi in by_priority(of_kind(BlockKind::Evidence)) {
            evidence.extend(by_score(bi, kept(bi)).into_iter().map(|ui| (bi, ui)));
        }
        let placed: Vec<(usize, usize)> = render::alternating_order(evidence.len())
            .into_iter()
            .map(|r| evidence[r])
            .collect();
        let mut context = String::new();
        let push = |context: &mut String, (bi, ui): (usize, usize)| {
            context.push_str(&self.unit_text(bi, ui, alloc.forms[bi][ui]))
        };
        let mut placed = placed.into_iter();
        if let Some(best) = placed.next() {
            push(&mut context, best);
        }
        for bi in by_priority(of_kind(BlockKind::Memory)) {
            for ui in by_score(bi, kept(bi)) {
                push(&mut context, (bi, ui));
            }
        }
        for e in placed {
            push(&mut context, e);
        }
        for bi in of_kind(BlockKind::State) {
            for ui in kept(bi) {
                push(&mut context, (bi, ui));
            }
        }
        if !context.is_empty() {
            out.push(Message::text(Role::User, context));
        }

        out.push(Message::text(Role::User, req.query.clone()));
        out
    }

    fn decisions(&mut self, plans: &[BlockPlan], alloc: &Allocation) -> Vec<BlockDecision> {
        let mut out = Vec::with_capacity(plans.len());
        for (bi, plan) in plans.iter().enumerate() {
            let m = &self.measured[bi];
            let forms = &alloc.forms[bi];
            let ids = |ui: usize| m.units[ui].members.iter().map(|&c| m.candidates[c].id.clone());
            let mut d = BlockDecision {
                name: m.block.name.clone(),
                kind: m.block.kind,
                priority: plan.priority,
                outcome: Outcome::Kept,
                tokens_offered: plan.units.iter().map(|u| u.full).sum(),
                tokens_kept: alloc.costs[bi].iter().sum(),
                kept_item_ids: Vec::new(),
                dropped_item_ids: Vec::new(),
                filtered_item_ids: m.filtered.iter().map(|s| (*s).to_owned()).collect(),
                compacted_item_ids: Vec::new(),
                reason: String::new(),
            };
            for (ui, form) in forms.iter().enumerate() {
                match form {
                    Form::Dropped(_) => d.dropped_item_ids.extend(ids(ui)),
                    Form::Compact => {
                        d.kept_item_ids.extend(ids(ui));
                        d.compacted_item_ids.extend(ids(ui));
                    }
                    Form::Full | Form::Truncated { .. } => d.kept_item_ids.extend(ids(ui)),
                }
            }
            let any_kept = forms.iter().any(|f| f.is_kept());
            let any_dropped = forms.iter().any(|f| !f.is_kept());
            d.outcome = if m.block.items.is_empty() {
                Outcome::Kept
            } else if m.candidates.is_empty() {
                Outcome::Filtered
            } else if !any_kept {
                Outcome::Dropped
            } else if forms.iter().any(|f| matches!(f, Form::Truncated { .. })) {
                Outcome::Truncated
            } else if any_dropped || !d.compacted_item_ids.is_empty() {
                Outcome::Compacted
            } else {
                Outcome::Kept
            };
            d.reason = reason(m.block, alloc.fates[bi], forms, d.outcome).to_owned();
            if alloc.fates[bi] == BlockFate::Gap {
                self.warnings.push(Warning {
                    code: "CHRONOLOGY_GAP",
                    message: format!("block {:?} dropped: newer turns were cut", m.block.name),
                });
            }
            if any_dropped || !d.filtered_item_ids.is_empty() {
                debug!(
                    block = bi,
                    kind = m.block.kind.as_str(),
                    outcome = d.outcome.as_str(),
                    dropped = ?d.dropped_item_ids,
                    filtered = d.filtered_item_ids.len(),
                    offered = d.tokens_offered,
                    kept = d.tokens_kept,
                    "block cut"
                );
            }
            out.push(d);
        }
        out
    }
}

/// A few stable words on why a block ended as it did.
fn reason(block: &Block, fate: BlockFate, forms: &[Form], outcome: Outcome) -> &'static str {
    let dropped = |r: DropReason| forms.contains(&Form::Dropped(r));
    match (outcome, fate) {
        (Outcome::Filtered, _) => "all items filtered by permission",
        _ if block.items.is_empty() => "empty",
        (_, BlockFate::Gap) => "newer turns were cut: dropped to avoid a gap",
        (_, BlockFate::BelowMin) => "cut below min_tokens: dropped whole",
        _ if forms.iter().all(|f| {
            matches!(
                f,
                Form::Dropped(DropReason::OrphanToolResult | DropReason::IncompleteToolCall)
            )
        }) =>
        {
            "broken tool-call pairing"
        }
        (_, BlockFate::Reserved) => "non-cuttable: reserved in full",
        (Outcome::Kept, _) => "fits",
        _ if dropped(DropReason::BlockLimit) => "max_tokens reached",
        (Outcome::Truncated, _) => "over budget: truncated at a sentence boundary",
        _ if block.kind.is_turns() => "over budget: dropped oldest turns",
        _ if forms.contains(&Form::Compact) => "over budget: compact forms before dropping lowest-scored",
        _ => "over budget: dropped lowest-scored items",
    }
}

/// Measures compact and truncated forms on demand.
struct Shrinker<'p, 'a> {
    p: &'p Pipeline<'a>,
}

impl Shrink for Shrinker<'_, '_> {
    fn compact_cost(&mut self, block: usize, unit: usize) -> u32 {
        let m = &self.p.measured[block];
        let item = m.candidates[unit];
        let text = item.compact_form.as_deref().unwrap_or_default();
        self.p
            .count(&render::unit(m.block.kind, item, text, FormAttr::Compact))
    }

    fn truncate(&mut self, block: usize, unit: usize, limit: u32) -> Option<(usize, u32)> {
        let m = &self.p.measured[block];
        let item = m.candidates[unit];
        let ends = render::sentence_ends(&item.content);
        let cost = |end: usize| {
            let u = render::unit(m.block.kind, item, &item.content[..end], FormAttr::Truncated);
            self.p.tok.count(&u)
        };
        // Binary search for the longest prefix that fits; every answer is verified.
        let (mut lo, mut hi) = (0usize, ends.len());
        let mut best = None;
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let c = cost(ends[mid]);
            if c <= limit {
                best = Some((ends[mid], c));
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        best.filter(|&(end, _)| end < item.content.len())
    }
}

#[cfg(test)]
mod tests;
