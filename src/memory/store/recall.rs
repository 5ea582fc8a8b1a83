//! A recall's candidates from the rows of its two queries, alike for every
//! backend: the best matches of the terms, then the newest memories, each
//! memory once, up to a byte budget of titles and bodies. The queries
//! themselves (full-text search, scope and type conditions) are each
//! backend's own.

use std::collections::HashSet;

use tokio_stream::{Stream, StreamExt as _};

use super::{Candidate, StoreError};
use crate::memory::model::MemoryId;

/// The columns of a candidate's row, in order: public id, row id, type,
/// title, body, created (ms), relevance.
pub(super) type CandidateRow = (String, i64, String, String, String, i64, f64);

impl From<CandidateRow> for Candidate {
    fn from((id, seq, memory_type, title, body, created_at_ms, relevance): CandidateRow) -> Self {
        Candidate {
            id: MemoryId::stored(id),
            seq,
            memory_type,
            title,
            body,
            created_at_ms,
            relevance,
        }
    }
}

/// The candidates read so far, in the order read.
#[derive(Debug)]
pub(super) struct Gathered {
    candidates: Vec<Candidate>,
    /// Row ids of `candidates`: a memory both queries find is kept once,
    /// with its relevance from the first.
    seen: HashSet<i64>,
    /// Bytes of titles and bodies still allowed.
    left: u64,
}

impl Gathered {
    /// Nothing read yet, `max_bytes` of titles and bodies allowed.
    pub(super) fn new(max_bytes: u64) -> Self {
        Gathered {
            candidates: Vec::new(),
            seen: HashSet::new(),
            left: max_bytes,
        }
    }

    /// Reads one query's rows, best first, until they end or a memory not
    /// read already does not fit the budget (every later one is then
    /// refused too: the candidates never skip a better one for a smaller).
    pub(super) async fn read(
        &mut self,
        mut rows: impl Stream<Item = Result<CandidateRow, sqlx::Error>> + Unpin,
    ) -> Result<(), StoreError> {
        while let Some(row) = rows.try_next().await? {
            let c = Candidate::from(row);
            // A memory read already costs nothing more.
            if self.seen.contains(&c.seq) {
                continue;
            }
            if !self.take(&c) {
                break;
            }
            self.seen.insert(c.seq);
            self.candidates.push(c);
        }
        Ok(())
    }

    /// Takes `c`'s bytes; false (and the budget spent) when they do not fit.
    fn take(&mut self, c: &Candidate) -> bool {
        let bytes = (c.title.len() + c.body.len()) as u64;
        if bytes > self.left {
            self.left = 0;
            return false;
        }
        self.left -= bytes;
        true
    }

    /// The candidates, in the order read.
    pub(super) fn finish(self) -> Vec<Candidate> {
        self.candidates
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(seq: i64, bytes: usize, relevance: f64) -> Result<CandidateRow, sqlx::Error> {
        Ok((
            format!("{seq:032x}"),
            seq,
            "decision".into(),
            String::new(),
            "x".repeat(bytes),
            0,
            relevance,
        ))
    }

    fn seqs(gathered: Gathered) -> Vec<(i64, f64)> {
        gathered.finish().iter().map(|c| (c.seq, c.relevance)).collect()
    }

    #[tokio::test]
    async fn a_memory_both_queries_find_is_kept_once_with_its_relevance() {
        let mut gathered = Gathered::new(u64::MAX);
        let matched = tokio_stream::iter([row(3, 1, 2.0), row(1, 1, 1.0)]);
        let recent = tokio_stream::iter([row(4, 1, 0.0), row(3, 1, 0.0), row(2, 1, 0.0)]);
        gathered.read(matched).await.ok();
        gathered.read(recent).await.ok();
        assert_eq!(seqs(gathered), [(3, 2.0), (1, 1.0), (4, 0.0), (2, 0.0)]);
    }

    #[tokio::test]
    async fn the_budget_stops_at_the_first_memory_that_does_not_fit() {
        let mut gathered = Gathered::new(10);
        gathered
            .read(tokio_stream::iter([row(3, 4, 1.0), row(2, 7, 1.0)]))
            .await
            .ok();
        // Spent: the newest, small as it is, is refused; the one read is not.
        gathered
            .read(tokio_stream::iter([row(3, 4, 0.0), row(4, 1, 0.0)]))
            .await
            .ok();
        assert_eq!(seqs(gathered), [(3, 1.0)]);
    }
}
