//! Where a conversation may be cut: a boundary is *clean* when no tool call
//! and its result lie on opposite sides of it. Every cut this crate makes,
//! by compaction or by trimming, is at a clean boundary, so the output never
//! holds a tool result without its call nor a call without its result (and
//! so never begins with a tool result).
//!
//! A result whose call is nowhere before it (an orphan already in the input)
//! is treated as paired with the start of the conversation: no boundary
//! before it is clean, so it always leaves with the oldest part instead of
//! reaching the provider alone (which providers reject).
//!
//! Unlike Assemble's turn grouping ([`crate::assemble::turns`]), a result
//! need not directly follow its call here: Compact keeps what it does not
//! summarize as the caller sent it, so it only keeps pairs on one side of
//! every cut; Assemble drops a pair that a provider would reject.

use std::collections::HashMap;

use super::conversation::Msg;

/// The clean boundaries of `msgs[start..]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Boundaries {
    start: usize,
    /// `clean[k - start]` for `k` in `start..=msgs.len()`.
    clean: Vec<bool>,
    /// Ids of results whose call is not before them.
    pub orphans: Vec<String>,
    /// Where the last turn starts (the latest clean boundary before the
    /// end), found once: each trim step asks for it.
    last_turn: Option<usize>,
}

impl Boundaries {
    /// Finds the clean boundaries of `msgs[start..]`. Linear in the number
    /// of blocks.
    pub fn of(msgs: &[Msg], start: usize) -> Self {
        let n = msgs.len();
        let start = start.min(n);
        // crossing[k - start]: pairs with call at i and result at j, i < k <= j.
        let mut diff = vec![0i64; n - start + 2];
        let mut calls: HashMap<&str, usize> = HashMap::new();
        let mut orphans = Vec::new();
        for (j, m) in msgs.iter().enumerate().skip(start) {
            for id in m.tool_uses() {
                calls.insert(id, j);
            }
            for id in m.tool_results() {
                let i = match calls.get(id) {
                    Some(&i) => i,
                    None => {
                        orphans.push(id.to_owned());
                        start
                    }
                };
                if i < j {
                    diff[i + 1 - start] += 1;
                    diff[j + 1 - start] -= 1;
                }
            }
        }
        let mut running = 0;
        let clean: Vec<bool> = (0..=n - start)
            .map(|k| {
                running += diff[k];
                running == 0
            })
            .collect();
        let last_turn = (0..n - start).rev().find(|&i| clean[i]).map(|i| start + i);
        Boundaries {
            start,
            clean,
            orphans,
            last_turn,
        }
    }

    /// Whether cutting before message `k` separates no pair.
    pub fn is_clean(&self, k: usize) -> bool {
        k.checked_sub(self.start)
            .and_then(|i| self.clean.get(i))
            .copied()
            .unwrap_or(false)
    }

    /// The end of the conversation (always clean).
    fn end(&self) -> usize {
        self.start + self.clean.len() - 1
    }

    /// The compaction cut keeping about `preserve` messages verbatim: the
    /// latest clean boundary that keeps at least `preserve`, else the
    /// earliest one that keeps fewer. Always past `start` (something is
    /// summarized) when the conversation has more than `preserve` messages
    /// after `start`; `None` otherwise.
    pub fn compaction_cut(&self, preserve: usize) -> Option<usize> {
        let n = self.end();
        if n - self.start <= preserve {
            return None;
        }
        let naive = n - preserve;
        (self.start + 1..=naive)
            .rev()
            .find(|&k| self.is_clean(k))
            .or_else(|| (naive + 1..=n).find(|&k| self.is_clean(k)))
    }

    /// The clean boundary after dropping the `turns` oldest turns from `from`
    /// (a turn is the span between two clean boundaries: a message, or a
    /// call with the messages up to its last result), never past the start
    /// of the last turn. `None` when nothing more can go.
    pub fn after_turns(&self, from: usize, turns: usize) -> Option<usize> {
        let last_turn = self.last_turn?;
        let mut k = from;
        for _ in 0..turns {
            match (k + 1..=last_turn).find(|&b| self.is_clean(b)) {
                Some(b) => k = b,
                None => break,
            }
        }
        (k > from).then_some(k)
    }
}

#[cfg(test)]
mod tests;
