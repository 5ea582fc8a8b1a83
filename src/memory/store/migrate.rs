//! The versioned schema migrations, compiled into the binary: one list of
//! versions, each with its SQL for SQLite (`migrations/sqlite`) and for
//! PostgreSQL (`migrations/postgres`), so the two schemas move in step. A
//! version one backend has no use for (version 4, the fleet's shared
//! provider counts, is PostgreSQL's only) is skipped by the other.

use std::future::Future;
use std::pin::Pin;

use sqlx::error::BoxDynError;
use sqlx::migrate::{Migration, MigrationSource, MigrationType, Migrator};

use super::StoreError;

/// One schema version, as each backend applies it.
#[derive(Debug)]
pub(super) struct Step {
    version: i64,
    description: &'static str,
    /// The SQLite script (empty: no such version for SQLite, so a file a
    /// sidecar has opened is still one an older sidecar opens).
    pub(super) sqlite: &'static str,
    /// The PostgreSQL script (empty: no such version for PostgreSQL).
    pub(super) postgres: &'static str,
}

/// The versions, applied in order at start.
const STEPS: &[Step] = &[
    Step {
        version: 1,
        description: "memories",
        sqlite: include_str!("../../../migrations/sqlite/0001_memories.sql"),
        postgres: include_str!("../../../migrations/postgres/0001_memories.sql"),
    },
    Step {
        version: 2,
        description: "memory bytes",
        sqlite: include_str!("../../../migrations/sqlite/0002_memory_bytes.sql"),
        postgres: include_str!("../../../migrations/postgres/0002_memory_bytes.sql"),
    },
    Step {
        version: 3,
        description: "tenancy",
        sqlite: include_str!("../../../migrations/sqlite/0003_tenancy.sql"),
        postgres: include_str!("../../../migrations/postgres/0003_tenancy.sql"),
    },
    Step {
        version: 4,
        description: "learned counts",
        // The fleet's shared provider counts (issue 52): a SQLite store is
        // one sidecar's, with nothing to share.
        sqlite: "",
        postgres: include_str!("../../../migrations/postgres/0004_learned_counts.sql"),
    },
];

/// Applies the migrations (each step's script that `script` picks) that the
/// database has not applied yet, each in its own transaction, under the
/// backend's migration lock (sidecars starting together migrate once). A
/// database migrated by a newer sidecar (versions this one does not know)
/// is refused rather than used.
pub(super) async fn migrator(script: fn(&Step) -> &'static str) -> Result<Migrator, StoreError> {
    Migrator::new(Embedded(script))
        .await
        .map_err(|e| StoreError::Unavailable(format!("migrations: {e}")))
}

/// [`STEPS`] as one backend's migrations.
#[derive(Debug)]
struct Embedded(fn(&Step) -> &'static str);

impl<'s> MigrationSource<'s> for Embedded {
    fn resolve(self) -> Pin<Box<dyn Future<Output = Result<Vec<Migration>, BoxDynError>> + Send + 's>> {
        Box::pin(async move {
            Ok(STEPS
                .iter()
                .filter(|step| !(self.0)(step).is_empty())
                .map(|step| {
                    Migration::new(
                        step.version,
                        step.description.into(),
                        MigrationType::Simple,
                        (self.0)(step).into(),
                        false,
                    )
                })
                .collect())
        })
    }
}
