//! The allocator's on-demand measures: compact and truncated forms, and the
//! summary of turns that do not fit (the Compact RPC's summary, rendered as
//! one unit, remembered by what it covers).

use super::allocate::Shrink;
use super::pipeline::Pipeline;
use super::render::{self, FormAttr};
use crate::compact::summary::Summary;
use crate::compact::{Content, Msg};
use crate::prompt::{BlockKind, Item};
use crate::tokens::{Tokenizer, cache};
use crate::vocab::{Meter, Role};

/// Measures compact and truncated forms, and the summary of turns that do
/// not fit, on demand.
pub(super) struct Shrinker<'p, 'a> {
    pub(super) p: &'p Pipeline<'a>,
    /// The last turn summary unit rendered (the one kept, if any).
    pub(super) turn_summary: Option<String>,
}

/// The id of the summary unit of compacted turns.
pub const TURN_SUMMARY_ID: &str = "compacted-turns";
/// The source attribute of the summary unit of compacted turns.
const TURN_SUMMARY_SOURCE: &str = "context-assembler";

impl Shrink for Shrinker<'_, '_> {
    fn measure(&mut self, block: usize, unit: usize, limit: u32) -> Option<u32> {
        self.p
            .count_at_most(&self.p.measured[block].rendered[unit], limit)
    }

    /// The summary unit of the turns' items (the Compact RPC's summary), as
    /// one `<summary id="compacted-turns">` unit of the summary message, so
    /// its count adds exactly to the units beside it.
    fn summarize(&mut self, units: &[(usize, usize)]) -> Option<u32> {
        if !self.p.policy.compact_turns || self.p.cancel.is_cancelled() {
            return None;
        }
        let members = || {
            units
                .iter()
                .flat_map(|&(b, u)| &self.p.measured[b].units[u].members)
                .map(|&(mb, mc)| self.p.item(mb, mc))
        };
        let key = turn_summary_key(self.p.tok, members());
        if let Some(known) = self.p.asm.summaries.get(&key) {
            self.turn_summary = Some(known.0.clone());
            return Some(known.1);
        }
        let msgs: Vec<Msg> = members().map(turn_message).collect();
        let text = Summary::of_until(&msgs, None, self.p.cancel).ok()?.plain();
        // The summary clips the turns verbatim: it is only as trusted as the
        // least trusted turn it covers.
        let item = Item {
            id: TURN_SUMMARY_ID.to_owned(),
            source: TURN_SUMMARY_SOURCE.to_owned(),
            trusted: members().all(vouched_for),
            ..Item::default()
        };
        let unit = render::unit(BlockKind::Summary, &item, &text, FormAttr::Compact);
        let cost = self.p.count(&unit);
        if self.p.cancel.is_cancelled() {
            // The count may be a cancelled 0: remember nothing.
            return None;
        }
        self.p.asm.summaries.insert(key, unit.clone(), cost);
        self.turn_summary = Some(unit);
        Some(cost)
    }

    fn compact_cost(&mut self, block: usize, unit: usize, limit: u32) -> Option<u32> {
        let item = self.p.item(block, unit);
        let text = item.compact_form.as_deref().unwrap_or_default();
        self.p.count_at_most(
            &render::unit(self.p.req.blocks[block].kind, item, text, FormAttr::Compact),
            limit,
        )
    }

    /// The longest prefix ending at a sentence end whose unit fits in
    /// `limit`. One pass over the pieces of what fits estimates where that
    /// end is; exact counts (each stopping once past `limit`) verify it and
    /// gallop from there, usually two of them. The work is proportional to
    /// what is kept, not to the whole text (finding the ends is one cheap
    /// pass, cancellable); every answer is a verified count.
    fn truncate(&mut self, block: usize, unit: usize, limit: u32) -> Option<(usize, u32)> {
        let item = self.p.item(block, unit);
        let kind = self.p.req.blocks[block].kind;
        // Cancelled: nothing fits, and the run is abandoned at its next check.
        let mut ends = render::sentence_ends(&item.content, &mut Meter::new(self.p.cancel)).ok()?;
        // A prefix longer than `limit` tokens can hold cannot fit: neither
        // the estimate nor the probes look past it, so a long text costs
        // what can be kept (the scan for ends aside).
        let most = self.p.tok.most_bytes_within(limit);
        ends.retain(|&e| e < item.content.len() && e <= most);
        let wrapper = render::unit(kind, item, "", FormAttr::Truncated);
        let head = &item.content[..ends.last().copied().unwrap_or(0)];
        let within = self.p.tok.prefixes_within(head, &ends, &wrapper, limit);
        let found = last_fitting(ends.len(), within.saturating_sub(1), |i| {
            if self.p.cancel.is_cancelled() {
                return None;
            }
            let u = render::unit(kind, item, &item.content[..ends[i]], FormAttr::Truncated);
            self.p.tok.count_at_most(&u, limit)
        });
        found.map(|(i, cost)| (ends[i], cost))
    }
}

/// The last index below `n` whose `probe` answers (with its answer), when
/// the answers stop at some index (a prefix count against a limit: every
/// index before it fits, none after): `guess` first, then galloping up or
/// down from it and halving. About two probes when the guess is right,
/// O(log n) however wrong it is.
fn last_fitting<T>(n: usize, guess: usize, mut probe: impl FnMut(usize) -> Option<T>) -> Option<(usize, T)> {
    if n == 0 {
        return None;
    }
    let guess = guess.min(n - 1);
    let mut best = None;
    // Every index below `lo` fits (known or assumed), none at or past `hi`.
    let (mut lo, mut hi) = (0, n);
    match probe(guess) {
        Some(c) => {
            best = Some((guess, c));
            lo = guess + 1;
            // Gallop up until something does not fit.
            let mut step = 1;
            while lo < hi {
                let p = (lo + step - 1).min(hi - 1);
                match probe(p) {
                    Some(c) => {
                        best = Some((p, c));
                        lo = p + 1;
                        step *= 2;
                    }
                    None => {
                        hi = p;
                        break;
                    }
                }
            }
        }
        None => {
            hi = guess;
            // Gallop down until something fits.
            let mut step = 1;
            while lo < hi {
                let p = hi.saturating_sub(step).max(lo);
                if let Some(c) = probe(p) {
                    best = Some((p, c));
                    lo = p + 1;
                    break;
                }
                hi = p;
                step *= 2;
            }
        }
    }
    // Halve what is left between the last fit and the first miss.
    while lo < hi {
        let p = lo + (hi - lo) / 2;
        if let Some(c) = probe(p) {
            best = Some((p, c));
            lo = p + 1;
        } else {
            hi = p;
        }
    }
    best
}

/// Whether the application vouches for a turn's content: it says so, and the
/// turn is neither the end user's text nor a tool's output (those are
/// untrusted whatever the flag says: a prompt injection arrives there).
fn vouched_for(item: &Item) -> bool {
    item.trusted && !matches!(item.role, Some(Role::User | Role::Tool) | None)
}

/// The key of the summary unit of `items`: every field [`turn_message`]
/// and [`vouched_for`] read, length-prefixed, keyed by the tokenizer (its
/// count is cached too).
fn turn_summary_key<'i>(tok: &Tokenizer, items: impl Iterator<Item = &'i Item>) -> cache::Key {
    let mut h = tok.hasher();
    h.update(b"turn-summary/v2");
    let mut field = |bytes: &[u8]| {
        h.update(&(bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    for item in items {
        field(item.role.map_or("", Role::as_str).as_bytes());
        field(item.id.as_bytes());
        field(item.tool_call_id.as_bytes());
        field(&(item.tool_call_ids.len() as u64).to_le_bytes());
        for id in &item.tool_call_ids {
            field(id.as_bytes());
        }
        field(item.content.as_bytes());
        field(&[u8::from(vouched_for(item))]);
    }
    *h.finalize().as_bytes()
}

/// A conversation turn as a compaction message: its text, the calls it
/// makes (tool names are not known here), or the result it carries.
fn turn_message(item: &Item) -> Msg {
    let role = item.role.unwrap_or(Role::User);
    let mut content = Vec::with_capacity(1 + item.tool_call_ids.len());
    if role == Role::Tool {
        content.push(Content::ToolResult {
            tool_use_id: item.tool_call_id.clone(),
            output: item.content.clone(),
            is_error: false,
        });
    } else {
        content.push(Content::Text(item.content.clone()));
    }
    content.extend(item.tool_call_ids.iter().map(|id| Content::ToolUse {
        id: id.clone(),
        name: String::new(),
        input: String::new(),
    }));
    Msg {
        id: item.id.clone(),
        role,
        content,
    }
}

#[cfg(test)]
mod tests;
