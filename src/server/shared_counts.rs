//! The provider counters' shared table (issue 52) over the PostgreSQL
//! memory store: with `[memory] store = "postgres"`, every counter reads
//! and writes the fleet's learned counts there. The store may open after
//! the start (see [`super::memory::keep`]): until it does, every call is
//! unavailable, and the counters count through their providers as a lone
//! sidecar does.

use std::sync::OnceLock;

use tracing::debug;

use crate::assemble::flow::now_ms;
use crate::memory::store::{MemoryStore, PostgresStore};
use crate::provider_count::{Shared, SharedFuture, SharedUnavailable};

/// The learned counts of the PostgreSQL store, once it is open.
#[derive(Debug, Default)]
pub struct SharedCounts {
    store: OnceLock<PostgresStore>,
}

impl SharedCounts {
    /// Uses `store` from now on if it is PostgreSQL (a SQLite store is
    /// one sidecar's: nothing to share), unless one is in use already.
    pub fn offer(&self, store: &MemoryStore) {
        if let MemoryStore::Postgres(s) = store {
            let _ = self.store.set(s.clone());
        }
    }

    fn store(&self) -> Result<&PostgresStore, SharedUnavailable> {
        self.store.get().ok_or(SharedUnavailable)
    }
}

/// The store's error, logged (it names no text: keys are hashes), as
/// unavailable.
fn unavailable(e: crate::memory::store::StoreError) -> SharedUnavailable {
    debug!(err = %e, "shared counts store call failed");
    SharedUnavailable
}

impl Shared for SharedCounts {
    fn get<'a>(&'a self, generation: &'a str, keys: &'a [[u8; 32]]) -> SharedFuture<'a, Vec<Option<u32>>> {
        Box::pin(async move {
            let store = self.store()?;
            store.learned_counts(generation, keys).await.map_err(unavailable)
        })
    }

    fn put<'a>(&'a self, generation: &'a str, counts: &'a [([u8; 32], u32)]) -> SharedFuture<'a, ()> {
        Box::pin(async move {
            let store = self.store()?;
            store
                .put_learned_counts(generation, counts, now_ms())
                .await
                .map_err(unavailable)
        })
    }
}
