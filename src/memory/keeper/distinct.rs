//! Each text once: of a recall's ranked memories, a request gets the best
//! ones, at most the recall's `max`, but never two that say the same, nor
//! one that says what an item of the request already says. The rest are
//! reported (ids only) as a `MEMORY_DUPLICATE` warning.
//!
//! Two texts say the same when their [`normalized`] forms are equal,
//! compared by their blake3 digests in one pass: a digest per memory
//! considered, and one per item of the request whose normalized length is a
//! memory's (any other can repeat none), never a comparison of two texts
//! (test `the_work_is_a_digest_per_memory_and_per_item`). So the request's
//! text is seldom digested twice, and never a long item. blake3 is
//! collision resistant, so equal digests are equal texts: no crafted item
//! can pass for a memory it does not repeat.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};

use super::recall::{Recalled, item_id, shown};
use crate::memory::model::MemoryId;
use crate::memory::rank::Ranked;
use crate::prompt::AssembleRequest;
use crate::tokens::digest;
use crate::vocab::{Warning, WarningRef, codes};

/// The memories a recall brings into a request, and those it left out.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Chosen {
    /// Best first: at most the recall's `max`, no two alike, none alike to
    /// an item of the request the principal may see.
    pub memories: Vec<Ranked>,
    /// The memories left out, in rank order: those ranked before the last
    /// one chosen (or any, when fewer than `max` were) that repeat a
    /// better-ranked memory or an item.
    pub duplicates: Vec<Duplicate>,
}

/// A memory left out, and what it repeats.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Duplicate {
    /// The memory left out.
    pub id: MemoryId,
    /// What says the same.
    pub of: Original,
}

/// What a memory left out repeats.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Original {
    /// A better-ranked memory, recalled.
    Memory(MemoryId),
    /// An item of the request.
    Item {
        /// Its block's index in the request.
        block: usize,
        /// Its block's name.
        block_name: String,
        /// Its id.
        id: String,
    },
}

/// The form in which two texts are compared: trimmed, each run of
/// whitespace (Unicode `White_Space`, as [`str::trim`] reads it) one space,
/// and nothing else changed.
///
/// Case is kept. A memory is text a model reads, and case carries meaning
/// there: `PATH` and `path`, `Set` and `set`, an acronym and a word. Folding
/// it would make two memories that say different things one and drop the
/// other silently, while two that differ only in case cost a few repeated
/// tokens; and Unicode case mapping depends on the language (Turkish `I`)
/// and changes lengths. Whitespace is only layout to the model, and the
/// form a text takes from where it was written (a line ending, an indent,
/// a trailing newline). No Unicode normalization (NFC) either: a repeat is
/// expected to come from the same text, in the same form.
pub fn normalized(text: &str) -> String {
    let mut out = String::new();
    normalize_into(&mut out, &[text], usize::MAX);
    out
}

/// Writes the [`normalized`] form of `pieces`, read as if joined by
/// whitespace, into `out` (cleared first). Stops, returning false, as soon
/// as it would pass `limit` bytes: reading ends there, not at the end of a
/// long text.
fn normalize_into(out: &mut String, pieces: &[&str], limit: usize) -> bool {
    out.clear();
    let mut gap = false;
    for c in pieces.iter().flat_map(|p| p.chars().chain([' '])) {
        if c.is_whitespace() {
            gap = !out.is_empty();
            continue;
        }
        if out.len() + usize::from(gap) + c.len_utf8() > limit {
            return false;
        }
        if gap {
            out.push(' ');
            gap = false;
        }
        out.push(c);
    }
    true
}

#[cfg(test)]
thread_local! {
    /// Texts digested on this thread to compare them (a test counts them).
    pub(super) static DIGESTS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The digest a normalized text is compared by.
fn digest_of(normalized: &str) -> blake3::Hash {
    #[cfg(test)]
    DIGESTS.with(|c| c.set(c.get() + 1));
    digest::hash(normalized.as_bytes())
}

/// Who said a text first: an item (block and item indices in the request),
/// or a memory chosen (its index in [`Chosen::memories`]).
#[derive(Debug, Clone, Copy)]
enum Said {
    Item(usize, usize),
    Memory(usize),
}

impl Recalled {
    /// The memories to recall into `request`: walking the ranking best
    /// first, a memory whose text an item of the request (one the principal
    /// may see, of any block) or a better-ranked memory already says is
    /// left out, and its place goes to the next, until `max` are chosen.
    /// Memories ranked past the last one chosen are not considered.
    ///
    /// A memory's text is its item's content ([`items`](super::items)).
    /// Only an item whose normalized text is as long as a memory's can
    /// repeat it: an item is digested only then, and one longer than every
    /// memory is read only until it passes the longest.
    pub fn choose(self, request: &AssembleRequest) -> Chosen {
        let Recalled { ranked, max } = self;
        let mut chosen = Chosen::default();
        if ranked.is_empty() || max == 0 {
            return chosen;
        }
        // Every memory's text, normalized (they are few and small: the
        // candidates fit `memory.max_recall_bytes`).
        let texts: Vec<String> = ranked
            .iter()
            .map(|r| {
                let mut text = String::new();
                normalize_into(&mut text, &shown(&r.candidate), usize::MAX);
                text
            })
            .collect();
        let lengths: HashSet<usize> = texts.iter().map(String::len).collect();
        let longest = lengths.iter().copied().max().unwrap_or(0);
        let mut said: HashMap<blake3::Hash, Said> = HashMap::new();
        let mut text = String::new();
        let held = request.principal.held();
        for (b, block) in request.blocks.iter().enumerate() {
            for (i, item) in block.items.iter().enumerate() {
                if held.permit(&item.required_scopes)
                    && normalize_into(&mut text, &[&item.content], longest)
                    && lengths.contains(&text.len())
                {
                    // The first item to say it is the one named.
                    said.entry(digest_of(&text)).or_insert(Said::Item(b, i));
                }
            }
        }
        for (r, text) in ranked.into_iter().zip(&texts) {
            if chosen.memories.len() == max {
                break;
            }
            match said.entry(digest_of(text)) {
                Entry::Vacant(v) => {
                    v.insert(Said::Memory(chosen.memories.len()));
                    chosen.memories.push(r);
                }
                Entry::Occupied(o) => {
                    let of = match *o.get() {
                        Said::Memory(m) => Original::Memory(chosen.memories[m].candidate.id.clone()),
                        Said::Item(b, i) => Original::Item {
                            block: b,
                            block_name: request.blocks[b].name.clone(),
                            id: request.blocks[b].items[i].id.clone(),
                        },
                    };
                    chosen.duplicates.push(Duplicate {
                        id: r.candidate.id,
                        of,
                    });
                }
            }
        }
        chosen
    }
}

impl Chosen {
    /// The `MEMORY_DUPLICATE` warning naming the memories left out and
    /// what each repeats (ids, item ids and block names; never text), about
    /// the items they repeat (a recalled memory's in the request's block at
    /// index `recall_block`). `None` when none was left out.
    pub fn warning(&self, recall_block: usize) -> Option<Warning> {
        if self.duplicates.is_empty() {
            return None;
        }
        let mut list = Vec::with_capacity(self.duplicates.len());
        let mut about = Vec::with_capacity(self.duplicates.len());
        for d in &self.duplicates {
            match &d.of {
                Original::Memory(kept) => {
                    list.push(format!("{} (as memory {kept})", d.id));
                    about.push(WarningRef::Item {
                        block: recall_block,
                        id: item_id(kept),
                    });
                }
                Original::Item {
                    block,
                    block_name,
                    id,
                } => {
                    list.push(format!("{} (as item {id:?} of block {block_name:?})", d.id));
                    about.push(WarningRef::Item {
                        block: *block,
                        id: id.clone(),
                    });
                }
            }
        }
        let message = format!(
            "recalled memories left out, their text already in the request: {}",
            list.join(", ")
        );
        Some(Warning::new(codes::MEMORY_DUPLICATE, message).with_about(about))
    }
}

#[cfg(test)]
mod tests;
