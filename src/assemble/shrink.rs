//! The allocator's on-demand measures: compact and truncated forms, and the
//! summary of turns that do not fit (the Compact RPC's summary, rendered as
//! one unit, remembered by what it covers).

use std::sync::Arc;

use super::allocate::{Light, Shrink, TurnSummary};
use super::counting::Counter;
use super::lighten;
use super::measure::Measurement;
use super::policy::Policy;
use super::render::{self, FormAttr};
use super::turn_memo::TurnMemo;
use crate::compact::summary::Running;
use crate::compact::{Content, Msg};
use crate::prompt::Item;
use crate::tokens::cache;
use crate::vocab::{Meter, Role};

/// Measures compact and truncated forms, and the summary of turns that do
/// not fit, on demand.
pub(super) struct Shrinker<'p, 'a> {
    /// Counts through the request's counter.
    c: &'p Counter<'a>,
    /// The blocks measured.
    m: Measurement<'p>,
    policy: &'p Policy,
    /// The turn units the last summary covered, oldest first, and the key of
    /// each prefix of them (`keys[i]` covers `units[..=i]`).
    units: Vec<(usize, usize)>,
    keys: Vec<cache::Key>,
    /// How many of `units` the last summary asked for covers: the summary
    /// kept, when the allocator keeps one (it stops at the first that fits).
    asked: Option<usize>,
    /// The last summary made or found whole.
    last: Option<Last>,
    /// Whether a summary made now is one counted ahead: it takes from the
    /// allowance only what is left, and never cancels the try.
    ahead: bool,
}

/// A summary made or found whole during this request (in the memo cache
/// either way).
struct Last {
    /// How many of the units it covers.
    covered: usize,
    memo: Arc<TurnMemo>,
    /// Its unit, when rendered (made here, not found).
    unit: Option<String>,
}

impl<'p, 'a> Shrinker<'p, 'a> {
    pub(super) fn new(c: &'p Counter<'a>, m: Measurement<'p>, policy: &'p Policy) -> Self {
        Shrinker {
            c,
            m,
            policy,
            units: Vec::new(),
            keys: Vec::new(),
            asked: None,
            last: None,
            ahead: false,
        }
    }

    /// The unit of the summary a session's next request most likely keeps:
    /// `kept`'s turns and those the window's next step adds
    /// ([`TurnSummary::ahead`]), made now (and remembered, so that request
    /// finds it) when the allowance left covers it. `None` when no turn
    /// follows, or it would take more than what is left: a summary counted
    /// ahead never cancels the request.
    pub(super) fn ahead_summary(&mut self, kept: &TurnSummary) -> Option<String> {
        if kept.ahead.is_empty() {
            return None;
        }
        let units: Vec<(usize, usize)> = kept.units.iter().chain(&kept.ahead).copied().collect();
        self.ahead = true;
        let cost = self.summarize(&units);
        self.ahead = false;
        cost?;
        let last = self.last.as_mut()?;
        Some(last.unit.take().unwrap_or_else(|| last.memo.unit()))
    }

    /// Takes `bytes` from the allowance: as the counter does for the
    /// request's own summaries (cancelling the try past it), or, for a
    /// summary counted ahead, only while it lasts.
    fn afford(&self, bytes: usize) -> bool {
        if self.ahead {
            self.c.allowance.take(bytes)
        } else {
            self.c.afford(bytes)
        }
    }

    /// The unit of the turn summary the allocator kept (call it only when
    /// it kept one: the last asked for). Every summary tried is remembered
    /// whole (a replay finds it; a session's next request, or a longer
    /// eviction step, extends the longest it finds), so the one kept is
    /// this request's last. `None` only once the request is cancelled (it
    /// is, if anything else fails).
    pub(super) fn kept_summary(&mut self, kept: &TurnSummary) -> Option<String> {
        // The allocator keeps the last summary it asked for, at the cost it
        // was told: the prompt's total is exact only while that holds.
        debug_assert_eq!(self.asked, Some(kept.units.len()));
        let unit = self.asked.and_then(|n| {
            self.make(n)?;
            let last = self.last.as_mut()?;
            debug_assert_eq!(
                last.memo.cost, kept.cost,
                "a summary's count and its bytes differ"
            );
            Some(last.unit.take().unwrap_or_else(|| last.memo.unit()))
        });
        if unit.is_none() {
            self.c.cancel.cancel();
        }
        unit
    }

    /// Makes the summary of the first `n` units into [`Self::last`], and
    /// remembers it, unless it is there: extending the longest run
    /// summarized before (a memo found in the cache, or this request's
    /// last), so the cost follows the new turns. An inline try makes it
    /// while its allowance lasts.
    fn make(&mut self, n: usize) -> Option<()> {
        if self.last.as_ref().is_some_and(|l| l.covered == n) {
            return Some(());
        }
        let (c, m) = (self.c, self.m);
        let floor = self.last.as_ref().map_or(0, |l| l.covered);
        let found = (floor + 1..n).rev().find_map(|i| {
            c.caches.summaries.get(&self.keys[i - 1]).map(|memo| Last {
                covered: i,
                memo,
                unit: None,
            })
        });
        if found.is_some() {
            self.last = found;
        }
        let fresh = Running::default();
        let (from, run, trusted) = match &self.last {
            Some(l) => (l.covered, &l.memo.run, l.memo.trusted),
            None => (0, &fresh, true),
        };
        let new = members(m, &self.units[from..n]);
        // An inline try summarizes the new turns, and counts the summary's
        // unit whole, while its allowance lasts.
        if !self.afford(new.iter().map(|item| item.content.len()).sum()) {
            return None;
        }
        let msgs: Vec<Msg> = new.iter().map(|item| turn_message(item)).collect();
        #[cfg(test)]
        SUMMARIZED.with(|n| n.set(n.get() + msgs.len()));
        let run = run.extended(&msgs, c.cancel).ok()?;
        // The summary clips the turns verbatim: it is only as trusted as the
        // least trusted turn it covers.
        let trusted = trusted && new.iter().all(|item| vouched_for(item));
        let mut memo = TurnMemo {
            run,
            trusted,
            cost: 0,
        };
        let unit = memo.unit();
        if !self.afford(unit.len()) {
            return None;
        }
        // Counted apart from the segment cache: the count table (and the
        // memo, once kept) remember it under the turns' key.
        memo.cost = c.tok.count(&unit);
        let memo = Arc::new(memo);
        let key = *self.keys.get(n.checked_sub(1)?)?;
        c.caches.summaries.insert(key, memo.clone());
        self.last = Some(Last {
            covered: n,
            memo,
            unit: Some(unit),
        });
        Some(())
    }
}

/// The items of turn units, (block, unit), in order.
fn members<'p>(m: Measurement<'p>, units: &[(usize, usize)]) -> Vec<&'p Item> {
    units
        .iter()
        .flat_map(|&(b, u)| &m.blocks[b].units[u].members)
        .map(|&(mb, mc)| m.item(mb, mc))
        .collect()
}

#[cfg(test)]
thread_local! {
    /// Turn messages summarized on this thread (a test reads it).
    pub(super) static SUMMARIZED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

impl Shrink for Shrinker<'_, '_> {
    /// The unit's runs are its content's runs and the wrapper's (`\n`
    /// before and after the content; escaping writes no whitespace), so a
    /// content that surely counts more than `limit` proves the unit does,
    /// before it is rendered.
    fn measure(&mut self, block: usize, unit: usize, limit: u32) -> Option<u32> {
        let item = self.m.item(block, unit);
        if self.c.surely_over(&item.content, limit) {
            return None;
        }
        let kind = self.m.req.blocks[block].kind;
        self.c
            .count_at_most(self.m.blocks[block].unit(kind, item, unit), limit)
    }

    /// The summary unit of the turns' items (the Compact RPC's summary), as
    /// one `<summary id="compacted-turns">` unit of the summary message, so
    /// its count adds exactly to the units beside it. The covered turns grow
    /// at their end (the eviction steps here; a session's next request), so
    /// the longest run of them already summarized is extended by the rest:
    /// the cost follows the new turns, with the bytes of a summary made from
    /// scratch. Each step's summary is remembered whole: a replay takes
    /// the same steps for a lookup each, and a session's next request
    /// extends the longest run its own covers, whether or not a summary
    /// was kept before.
    fn summarize(&mut self, units: &[(usize, usize)]) -> Option<u32> {
        if !self.policy.compact_turns || self.c.cancel.is_cancelled() {
            return None;
        }
        let (c, m) = (self.c, self.m);
        // The keys of every prefix: the last call's, when these units extend
        // its units, and one more per new unit.
        if !units.starts_with(&self.units) {
            self.units.clear();
            self.keys.clear();
            self.last = None;
        }
        for &unit in &units[self.units.len()..] {
            let before = self.keys.last().copied().unwrap_or_default();
            self.keys.push(turn_summary_key(c, m, &before, unit));
            self.units.push(unit);
        }
        let n = units.len();
        let key = *self.keys.get(n.checked_sub(1)?)?;
        self.asked = Some(n);
        if let Some(memo) = c.caches.summaries.get(&key) {
            let cost = memo.cost;
            self.last = Some(Last {
                covered: n,
                memo,
                unit: None,
            });
            return Some(cost);
        }
        self.make(n)?;
        Some(self.last.as_ref()?.memo.cost)
    }

    /// Each member's lightened form: a cleared result's message counted
    /// with its placeholder or compact form (kept whole when that saves
    /// nothing, and so decided once for the layout), thinking that may be
    /// dropped taken out.
    fn light(&mut self, block: usize, unit: usize) -> Option<Light> {
        let (c, m) = (self.c, self.m);
        let (mut cost, mut saving) = (0u32, 0u32);
        for &(mb, mc) in &m.blocks[block].units.get(unit)?.members {
            let measured = &m.blocks[mb];
            let light = measured.lights.get(mc).copied().unwrap_or_default();
            let costs = measured.costs.get(mc).copied().unwrap_or_default();
            let cleared = light.clear.and_then(|clear| {
                measured.cleared_cost(mc, || {
                    let item = m.item(mb, mc);
                    let text = lighten::cleared_text(item, clear, costs.message);
                    let role = item.role.unwrap_or(Role::Tool);
                    Some(c.message_count(role, false, &text, None)).filter(|&n| n < costs.message)
                })
            });
            let message = match cleared {
                Some(n) if light.cleared().is_some() => n,
                _ => costs.message,
            };
            let thinking = if light.drops_thinking() { 0 } else { costs.thinking };
            cost = cost.saturating_add(message).saturating_add(thinking);
            let could =
                cleared.map_or(0, |n| costs.message - n) + if light.thinking { costs.thinking } else { 0 };
            saving = saving.saturating_add(could);
        }
        (saving > 0).then_some(Light { cost, saving })
    }

    fn compact_cost(&mut self, block: usize, unit: usize, limit: u32) -> Option<u32> {
        let item = self.m.item(block, unit);
        let text = item.compact_form.as_deref().unwrap_or_default();
        if self.c.surely_over(text, limit) {
            return None;
        }
        self.c.count_at_most(
            &render::unit(self.m.req.blocks[block].kind, item, text, FormAttr::Compact),
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
        let item = self.m.item(block, unit);
        // Truncation always counts, at most what `limit` tokens span, about
        // twice (the estimate's pass and the probes).
        let spans = item.content.len().min(self.c.tok.most_bytes_within(limit));
        if !self.c.afford(spans.saturating_mul(2)) {
            return None;
        }
        let kind = self.m.req.blocks[block].kind;
        // Cancelled: nothing fits, and the run is abandoned at its next check.
        let mut ends = render::sentence_ends(&item.content, &mut Meter::new(self.c.cancel)).ok()?;
        // A prefix longer than `limit` tokens can hold cannot fit: neither
        // the estimate nor the probes look past it, so a long text costs
        // what can be kept (the scan for ends aside).
        let most = self.c.tok.most_bytes_within(limit);
        ends.retain(|&e| e < item.content.len() && e <= most);
        let wrapper = render::unit(kind, item, "", FormAttr::Truncated);
        let head = &item.content[..ends.last().copied().unwrap_or(0)];
        let within = self.c.tok.prefixes_within(head, &ends, &wrapper, limit);
        let found = last_fitting(ends.len(), within.saturating_sub(1), |i| {
            if self.c.cancel.is_cancelled() {
                return None;
            }
            let u = render::unit(kind, item, &item.content[..ends[i]], FormAttr::Truncated);
            self.c.tok.count_at_most(&u, limit)
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

/// The key of the summary unit of a run of turns whose run without its last
/// unit has key `before` (zeros for none), the last unit being `unit`: every
/// field [`turn_message`] and [`vouched_for`] read, length-prefixed, keyed by
/// the tokenizer (its count is cached too). A turn's content enters as its
/// count-cache key (a digest of it), so a request hashes each turn's text
/// once, for its count and the summaries covering it alike. A chain, so every
/// prefix of a run has its key for one pass over the run.
fn turn_summary_key(
    c: &Counter<'_>,
    m: Measurement<'_>,
    before: &cache::Key,
    unit: (usize, usize),
) -> cache::Key {
    let mut h = c.tok.hasher();
    h.update(b"turn-summary/v4");
    h.update(before);
    let mut field = |bytes: &[u8]| {
        h.update(&(bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    let (b, u) = unit;
    let members = &m.blocks[b].units[u].members;
    field(&(members.len() as u64).to_le_bytes());
    for &(mb, mc) in members {
        let item = m.item(mb, mc);
        field(item.role.map_or("", Role::as_str).as_bytes());
        field(item.id.as_bytes());
        field(item.tool_call_id.as_bytes());
        field(&(item.tool_call_ids.len() as u64).to_le_bytes());
        for id in &item.tool_call_ids {
            field(id.as_bytes());
        }
        field(m.content_key(c, mb, mc));
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
