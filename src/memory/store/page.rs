//! A `ListMemories` page from the rows a store reads, newest first, alike
//! for every backend: a hidden memory counts against the page's size like a
//! listed one, content stops at the byte budget, and a memory comes back
//! from its stored columns (its content's stored form is written here too).

use tokio_stream::{Stream, StreamExt as _};

use super::{ListQuery, Page, StoreError};
use crate::memory::model::{Memory, MemoryId, NewMemory};

/// The columns of a page's row, in order: row id, public id, created (ms),
/// subject, request id, turn, then content and scopes, both NULL for a
/// memory the principal may not see (every stored memory has content).
/// Scopes are `S` as the backend stores them.
pub(super) type PageRow<S> = (i64, String, i64, String, String, i64, Option<String>, Option<S>);

/// Reads `rows` (at most `q.limit + 1`, newest first) into a page; `scopes`
/// reads a listed memory's stored scopes (given its row id, for errors).
pub(super) async fn read_page<S>(
    q: &ListQuery<'_>,
    mut rows: impl Stream<Item = Result<PageRow<S>, sqlx::Error>> + Unpin,
    scopes: impl Fn(i64, S) -> Result<Vec<String>, StoreError>,
) -> Result<Page, StoreError> {
    let mut page = PageBuilder::new(q.limit, q.max_bytes);
    while let Some((row, id, created_at_ms, subject, request_id, turn, content, stored)) =
        rows.try_next().await?
    {
        let listed = match content.zip(stored) {
            None => None,
            Some((content, stored)) => {
                let required_scopes = scopes(row, stored)?;
                let id = MemoryId::stored(id);
                let body = serde_json::from_str(&content)
                    .map_err(|e| StoreError::Corrupt(format!("memory {id}: content: {e}")))?;
                let memory = NewMemory {
                    subject,
                    content: body,
                    required_scopes,
                    request_id,
                    turn: u32::try_from(turn).unwrap_or(0),
                };
                Some((
                    Memory {
                        id,
                        created_at_ms,
                        memory,
                    },
                    content.len(),
                ))
            }
        };
        if !page.push(row, listed) {
            break;
        }
    }
    Ok(page.finish())
}

/// The stored form of a memory's content, which [`read_page`] reads back.
pub(super) fn content_json(m: &NewMemory) -> Result<String, StoreError> {
    serde_json::to_string(&m.content).map_err(|e| StoreError::Query(e.to_string()))
}

/// Builds a page from rows of the subject read newest first, up to
/// `limit + 1` (the extra one only says there is a next page) and
/// `max_bytes` of content: a hidden row counts against `limit` like a
/// listed one (so hidden memories never make a page read more rows), and
/// the page ends before the memory that would pass the byte budget (never
/// before its first listed one), and says there is more.
#[derive(Debug)]
struct PageBuilder {
    memories: Vec<Memory>,
    hidden: u32,
    limit: usize,
    read: usize,
    last: Option<i64>,
    max_bytes: u64,
    bytes: u64,
    next: Option<i64>,
}

impl PageBuilder {
    fn new(limit: u32, max_bytes: u64) -> Self {
        PageBuilder {
            memories: Vec::new(),
            hidden: 0,
            limit: limit as usize,
            read: 0,
            last: None,
            max_bytes,
            bytes: 0,
            next: None,
        }
    }

    /// Adds the next row, `row` its row id: a memory the principal may see
    /// with its content's bytes, or `None` for one hidden from it. False
    /// once the page is full (stop reading).
    fn push(&mut self, row: i64, listed: Option<(Memory, usize)>) -> bool {
        let full = self.read >= self.limit
            || listed.as_ref().is_some_and(|(_, n)| {
                !self.memories.is_empty() && self.bytes.saturating_add(*n as u64) > self.max_bytes
            });
        if full {
            self.next = self.last;
            return false;
        }
        match listed {
            Some((memory, n)) => {
                self.bytes = self.bytes.saturating_add(n as u64);
                self.memories.push(memory);
            }
            None => self.hidden += 1,
        }
        self.read += 1;
        self.last = Some(row);
        true
    }

    fn finish(self) -> Page {
        Page {
            memories: self.memories,
            hidden: self.hidden,
            next: self.next,
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::memory::model::{MemoryBody, Observation};

    fn memory(row: i64) -> Memory {
        Memory {
            id: MemoryId::stored(format!("{row:032x}")),
            created_at_ms: 0,
            memory: NewMemory {
                subject: "s".into(),
                content: MemoryBody::Observation(Observation::default()),
                required_scopes: Vec::new(),
                request_id: String::new(),
                turn: 0,
            },
        }
    }

    /// Pages through `rows` (shown or hidden, content bytes; row ids
    /// descending from `rows.len()`) as the stores do: each page reads at
    /// most `limit + 1` rows older than the last page's `next`.
    fn pages(rows: &[(bool, usize)], limit: u32, max_bytes: u64) -> Vec<(Page, usize)> {
        let n = rows.len() as i64;
        let mut out = Vec::new();
        let mut before = i64::MAX;
        loop {
            let mut page = PageBuilder::new(limit, max_bytes);
            let mut read = 0;
            for (i, &(shown, bytes)) in rows.iter().enumerate() {
                let row = n - i as i64;
                if row >= before {
                    continue;
                }
                if read == limit as usize + 1 {
                    break;
                }
                read += 1;
                if !page.push(row, shown.then(|| (memory(row), bytes))) {
                    break;
                }
            }
            let page = page.finish();
            let next = page.next;
            out.push((page, read));
            match next {
                Some(next) => before = next,
                None => return out,
            }
        }
    }

    proptest! {
        /// Paging lists every shown memory once, newest first, and counts
        /// every hidden one once; a page covers at most `limit` rows and
        /// reads at most `limit + 1`, holds at most `max_bytes` past its
        /// first memory, and every page moves on.
        #[test]
        fn pages_list_each_shown_memory_once_and_count_each_hidden_one(
            rows in prop::collection::vec((any::<bool>(), 0usize..100), 0..60),
            limit in 1u32..10,
            max_bytes in prop_oneof![Just(u64::MAX), 0u64..300],
        ) {
            let all = pages(&rows, limit, max_bytes);
            prop_assert!(all.len() <= rows.len() + 1);
            let n = rows.len() as i64;
            let shown: Vec<MemoryId> = rows
                .iter()
                .enumerate()
                .filter(|(_, r)| r.0)
                .map(|(i, _)| memory(n - i as i64).id)
                .collect();
            let hidden = rows.iter().filter(|r| !r.0).count();
            let mut listed = Vec::new();
            let mut counted = 0;
            for (page, read) in &all {
                prop_assert!(page.memories.len() + page.hidden as usize <= limit as usize);
                prop_assert!(*read <= limit as usize + 1);
                if page.next.is_some() {
                    prop_assert!(page.memories.len() + page.hidden as usize >= 1);
                }
                let bytes: u64 = page
                    .memories
                    .iter()
                    .skip(1)
                    .map(|m| {
                        let row = i64::from_str_radix(m.id.as_str(), 16).unwrap_or(0);
                        rows[(n - row) as usize].1 as u64
                    })
                    .sum();
                prop_assert!(bytes <= max_bytes);
                listed.extend(page.memories.iter().map(|m| m.id.clone()));
                counted += page.hidden as usize;
            }
            prop_assert_eq!(listed, shown);
            prop_assert_eq!(counted, hidden);
        }
    }
}
