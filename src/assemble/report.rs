//! The decision report: one [`BlockDecision`] per block, every cut, drop and
//! filter with a reason, logged at debug with ids and counts only.

use tracing::debug;

use super::allocate::{Allocation, BlockFate, BlockPlan, DropReason, Form, Full};
use super::measure::{Measured, Measurement};
use crate::prompt::{Block, BlockDecision, Outcome};
use crate::vocab::{Warning, WarningRef, codes, saturating_u32};

/// The decisions, in request order, and warnings about gaps in the
/// conversation. A turn unit that spans two blocks counts its tokens in the
/// newer block; each item is reported in its own block.
pub(super) fn decisions(
    p: Measurement<'_>,
    plans: &[BlockPlan],
    alloc: &Allocation,
    warnings: &mut Vec<Warning>,
) -> Vec<BlockDecision> {
    let forms = candidate_forms(p, alloc);
    let out = plans
        .iter()
        .enumerate()
        .map(|(bi, plan)| decision(p, alloc, bi, plan, &forms[bi]))
        .collect();
    warn_about_gaps(p, plans, alloc, warnings);
    out
}

/// The form each candidate ended in, per block; a candidate in no unit of
/// the allocation had no room.
fn candidate_forms(p: Measurement<'_>, alloc: &Allocation) -> Vec<Vec<Form>> {
    let no_room = Form::Dropped(DropReason::NoRoom);
    let mut forms: Vec<Vec<Form>> = p
        .blocks
        .iter()
        .map(|m| vec![no_room; m.candidates.len()])
        .collect();
    for (bi, m) in p.blocks.iter().enumerate() {
        for (ui, unit) in m.units.iter().enumerate() {
            for &(mb, mc) in &unit.members {
                forms[mb][mc] = alloc.forms[bi][ui];
            }
        }
    }
    forms
}

/// Block `bi`'s decision, `forms` the form each of its candidates ended in;
/// logged at debug when the block was cut.
fn decision(
    p: Measurement<'_>,
    alloc: &Allocation,
    bi: usize,
    plan: &BlockPlan,
    forms: &[Form],
) -> BlockDecision {
    let block = &p.req.blocks[bi];
    let mut d = totals(p, alloc, bi, plan);
    sort_items(&mut d, &p.blocks[bi], block, forms);
    d.tokens_cleared = tokens_cleared(alloc, bi);
    let any_dropped = forms.iter().any(|f| !f.is_kept());
    d.outcome = outcome(
        &p.blocks[bi],
        block,
        forms,
        any_dropped,
        !d.compacted_item_ids.is_empty(),
    );
    d.reason = reason(block, alloc.fates[bi], forms, d.outcome).to_owned();
    if any_dropped || !d.filtered_item_ids.is_empty() {
        debug!(
            block = bi,
            kind = block.kind.as_str(),
            outcome = d.outcome.as_str(),
            dropped = ?d.dropped_item_ids,
            filtered = ?d.filtered_item_ids,
            offered = d.tokens_offered,
            kept = d.tokens_kept,
            "block cut"
        );
    }
    d
}

/// Block `bi`'s decision as its totals tell it: tokens offered and kept,
/// window unused, items filtered; its other items not yet sorted, its
/// outcome and reason not yet chosen.
fn totals(p: Measurement<'_>, alloc: &Allocation, bi: usize, plan: &BlockPlan) -> BlockDecision {
    let block = &p.req.blocks[bi];
    BlockDecision {
        name: block.name.clone(),
        kind: block.kind,
        priority: plan.priority,
        outcome: Outcome::Kept,
        tokens_offered: alloc.fulls[bi]
            .iter()
            .map(|f| f.tokens())
            .fold(0, u32::saturating_add),
        tokens_offered_is_lower_bound: alloc.fulls[bi].iter().any(|f| matches!(f, Full::AtLeast(_))),
        tokens_kept: alloc.costs[bi]
            .iter()
            .copied()
            .fold(summary_cost(alloc, bi), u32::saturating_add),
        kept_item_ids: Vec::new(),
        dropped_item_ids: Vec::new(),
        filtered_item_ids: p.blocks[bi]
            .filtered
            .iter()
            .map(|&i| block.items[i].id.clone())
            .collect(),
        compacted_item_ids: Vec::new(),
        summarized_item_ids: Vec::new(),
        tokens_window_unused: saturating_u32(alloc.window_given_up[bi]),
        cleared_item_ids: Vec::new(),
        thinking_dropped_item_ids: Vec::new(),
        tokens_cleared: 0,
        reason: String::new(),
    }
}

/// Lists each candidate of `block` (measured as `m`) by the form it ended
/// in: kept or dropped, and also compacted, summarized, cleared or with its
/// thinking dropped.
fn sort_items(d: &mut BlockDecision, m: &Measured, block: &Block, forms: &[Form]) {
    for (ci, form) in forms.iter().enumerate() {
        let item_id = block.items[m.candidates[ci]].id.clone();
        match form {
            Form::Dropped(DropReason::Summarized) => {
                d.summarized_item_ids.push(item_id.clone());
                d.dropped_item_ids.push(item_id);
            }
            Form::Dropped(_) => d.dropped_item_ids.push(item_id),
            Form::Compact => {
                d.compacted_item_ids.push(item_id.clone());
                d.kept_item_ids.push(item_id);
            }
            Form::Light => {
                if m.clears(ci).is_some() {
                    d.cleared_item_ids.push(item_id.clone());
                }
                if m.lights.get(ci).is_some_and(|l| l.drops_thinking()) {
                    d.thinking_dropped_item_ids.push(item_id.clone());
                }
                d.kept_item_ids.push(item_id);
            }
            Form::Full | Form::Truncated { .. } => d.kept_item_ids.push(item_id),
        }
    }
}

/// What lightening saved in block `bi`, counted in the block that owns each
/// unit (as its tokens count there).
fn tokens_cleared(alloc: &Allocation, bi: usize) -> u32 {
    alloc.forms[bi]
        .iter()
        .zip(&alloc.fulls[bi])
        .zip(&alloc.costs[bi])
        .filter(|((f, _), _)| **f == Form::Light)
        .map(|((_, full), &cost)| full.tokens().saturating_sub(cost))
        .fold(0, u32::saturating_add)
}

/// How `block` (measured as `m`) ended, its candidates in `forms`:
/// `any_dropped` if one was, `compacted` if one was kept compact.
fn outcome(m: &Measured, block: &Block, forms: &[Form], any_dropped: bool, compacted: bool) -> Outcome {
    if block.items.is_empty() {
        Outcome::Kept
    } else if m.candidates.is_empty() {
        Outcome::Filtered
    } else if !forms.iter().any(|f| f.is_kept()) {
        Outcome::Dropped
    } else if forms.iter().any(|f| matches!(f, Form::Truncated { .. })) {
        Outcome::Truncated
    } else if any_dropped || compacted {
        Outcome::Compacted
    } else {
        Outcome::Kept
    }
}

/// The turn summary's tokens, counted in the block of the newest turn it
/// covers.
fn summary_cost(alloc: &Allocation, bi: usize) -> u32 {
    match &alloc.summary {
        Some(s) if s.units.last().map(|&(b, _)| b) == Some(bi) => s.cost,
        _ => 0,
    }
}

/// Warns when the conversation has a hole: older turns were dropped because
/// newer ones were cut, or (when the caller ranks older turns higher) older
/// turns were kept while newer ones were cut.
fn warn_about_gaps(p: Measurement<'_>, plans: &[BlockPlan], alloc: &Allocation, warnings: &mut Vec<Warning>) {
    let mut chrono: Vec<usize> = (0..plans.len()).filter(|&b| plans[b].chrono.is_some()).collect();
    chrono.sort_by_key(|&b| plans[b].chrono);
    let lost = |b: usize| {
        alloc.forms[b]
            .iter()
            .zip(&plans[b].units)
            .any(|(f, u)| u.invalid.is_none() && !f.is_kept())
    };
    for (i, &b) in chrono.iter().enumerate() {
        let name = &p.req.blocks[b].name;
        if alloc.fates[b] == BlockFate::Gap {
            warnings.push(
                Warning::new(
                    codes::CHRONOLOGY_GAP,
                    format!("block {name:?} dropped: newer turns were cut"),
                )
                .with_about(vec![WarningRef::Block(b)]),
            );
        } else if alloc.forms[b].iter().any(|f| f.is_kept())
            && chrono[i + 1..].iter().any(|&newer| lost(newer))
        {
            warnings.push(
                Warning::new(
                    codes::CHRONOLOGY_GAP,
                    format!("block {name:?} kept although newer turns were cut (it has the higher priority)"),
                )
                .with_about(vec![WarningRef::Block(b)]),
            );
        }
    }
}

/// A few stable words on why a block ended as it did.
fn reason(block: &Block, fate: BlockFate, forms: &[Form], outcome: Outcome) -> &'static str {
    let broken = |f: &Form| {
        matches!(
            f,
            Form::Dropped(DropReason::OrphanToolResult | DropReason::IncompleteToolCall)
        )
    };
    match (outcome, fate) {
        (Outcome::Filtered, _) => "all items filtered by permission",
        _ if block.items.is_empty() => "empty",
        (_, BlockFate::Gap) => "newer turns were cut: dropped to avoid a gap",
        (_, BlockFate::BelowMin) => "cut below min_tokens: dropped whole",
        _ if forms.iter().all(broken) => "broken tool-call pairing",
        (_, BlockFate::Reserved) if forms.iter().any(broken) => {
            "non-cuttable: reserved; broken tool-call pairs dropped"
        }
        (_, BlockFate::Reserved) => "non-cuttable: reserved in full",
        (Outcome::Kept, _) => "fits",
        _ if forms.contains(&Form::Dropped(DropReason::BlockLimit)) => "max_tokens reached",
        (Outcome::Truncated, _) => "over budget: truncated at a sentence boundary",
        _ if forms.contains(&Form::Dropped(DropReason::Summarized)) => {
            "over budget: oldest turns compacted into a summary"
        }
        _ if block.kind.is_turns() => "over budget: dropped oldest turns",
        _ if forms.contains(&Form::Compact) => "over budget: compact forms before dropping lowest-scored",
        _ => "over budget: dropped lowest-scored items",
    }
}
