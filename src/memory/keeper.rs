//! Retain and recall as the service uses them, knowing nothing of gRPC.
//! Here: [`Memories`] (its store, connected or not, and the store slots of
//! its calls), Forget and ListMemories, and the checks every call shares.
//! Beside it: `keeper/retain.rs` (validation, `<private>` removal and
//! parsing before a write), `keeper/recall.rs` (the query, ranking and
//! MEMORY items of a recall), `keeper/distinct.rs` (which ranked memories a
//! request gets: each text once, none the request holds already) and
//! `keeper/settings.rs` (the settings and the bounds on a call's fields).

use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::store::{ForgetFilter, Forgotten, ListQuery, MemoryStore, Page, StoreError};
use crate::prompt::MAX_PRINCIPAL_SCOPES;
use crate::vocab::FieldViolation;

mod distinct;
mod recall;
mod retain;
mod settings;

pub use distinct::{Chosen, Duplicate, Original, normalized};
pub use recall::{
    DEFAULT_RECALL_BLOCK, Placement, RecallReport, RecallSpec, Recalled, attach, date, item_id, items,
    memory_id, report,
};
pub use retain::{PreparedRetain, RetainInput, RetainOutput};
pub use settings::{
    DEFAULT_MAX_MEMORY_BYTES, DEFAULT_MAX_PAGE_BYTES, DEFAULT_MAX_RECALL_BYTES, DEFAULT_MAX_STORE_WAITS,
    DEFAULT_PAGE_SIZE, DEFAULT_RECALL_TIMEOUT, MAX_KEY_BYTES, MAX_MEMORIES_PER_RETAIN, MAX_NAME_BYTES,
    MAX_PAGE_SIZE, MAX_SCOPES, MAX_SUBJECT_BYTES, MemorySettings, RecallFailure,
};

/// Why a memory operation failed.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// The request is malformed; every bad field is listed.
    #[error("invalid request")]
    Invalid(Vec<FieldViolation>),
    /// The sidecar runs without a memory store.
    #[error("no memory store is configured ([memory] store = \"off\")")]
    Disabled,
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl MemoryError {
    fn invalid(field: impl Into<String>, description: impl Into<String>) -> Self {
        MemoryError::Invalid(vec![FieldViolation::new(field, description)])
    }
}

/// The memory service: a store (which may not be connected yet) and its
/// settings.
#[derive(Debug, Clone)]
pub struct Memories {
    /// `None` while a configured store is not connected.
    store: Arc<RwLock<Option<MemoryStore>>>,
    /// Whether a store is configured at all.
    configured: bool,
    settings: MemorySettings,
    /// Calls waiting on the store: their own budget, apart from the CPU
    /// work slots.
    waits: Arc<Semaphore>,
}

impl Memories {
    /// Memories over `store` (`None`: every call is [`MemoryError::Disabled`]).
    pub fn new(store: Option<MemoryStore>, settings: MemorySettings) -> Self {
        let configured = store.is_some();
        Memories {
            store: Arc::new(RwLock::new(store)),
            configured,
            waits: Arc::new(Semaphore::new(settings.max_store_waits.max(1) as usize)),
            settings,
        }
    }

    /// Memories over a configured store that is not connected yet: calls
    /// are [`StoreError::Unavailable`] until [`Memories::connected`].
    pub fn connecting(settings: MemorySettings) -> Self {
        Memories {
            configured: true,
            ..Memories::new(None, settings)
        }
    }

    /// Puts the store, now open, in use.
    pub fn connected(&self, store: MemoryStore) {
        *self.store.write().unwrap_or_else(PoisonError::into_inner) = Some(store);
    }

    /// Whether a store is configured and connected.
    pub fn is_connected(&self) -> bool {
        self.store
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }

    /// The settings.
    pub fn settings(&self) -> &MemorySettings {
        &self.settings
    }

    /// The store's backend name, `off`, or `connecting`.
    pub fn backend(&self) -> &'static str {
        match &*self.store.read().unwrap_or_else(PoisonError::into_inner) {
            Some(store) => store.backend(),
            None if self.configured => "connecting",
            None => "off",
        }
    }

    /// [`MemoryError::Disabled`] without a configured store.
    fn enabled(&self) -> Result<(), MemoryError> {
        if self.configured {
            Ok(())
        } else {
            Err(MemoryError::Disabled)
        }
    }

    /// The connected store (a cheap handle on its pools).
    fn store(&self) -> Result<MemoryStore, MemoryError> {
        self.enabled()?;
        self.store
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or_else(|| StoreError::Unavailable("not connected yet".into()).into())
    }

    /// A store slot for a Retain, Forget or ListMemories, or UNAVAILABLE at
    /// once when every slot is taken (such calls never queue).
    fn store_slot(&self) -> Result<OwnedSemaphorePermit, MemoryError> {
        self.waits.clone().try_acquire_owned().map_err(|_| {
            StoreError::Unavailable(format!(
                "{} calls are waiting on the store already",
                self.settings.max_store_waits
            ))
            .into()
        })
    }

    /// Deletes what `filter` names, memories of its subject only.
    pub async fn forget(&self, filter: &ForgetFilter) -> Result<Forgotten, MemoryError> {
        let mut violations = Vec::new();
        check_name(&mut violations, "subject", filter.subject(), MAX_SUBJECT_BYTES);
        if let ForgetFilter::SubjectType(_, kind) = filter {
            check_name(&mut violations, "type", kind, MAX_NAME_BYTES);
        }
        if !violations.is_empty() {
            return Err(MemoryError::Invalid(violations));
        }
        let store = self.store()?;
        let _slot = self.store_slot()?;
        Ok(store.forget(filter).await?)
    }

    /// A page of a subject's memories that a principal holding `scopes` may
    /// see, newest first (the same scope rule as recall; `page_size`
    /// memories of the subject at most, listed or hidden).
    pub async fn list(
        &self,
        subject: &str,
        scopes: &[String],
        page_size: u32,
        before: Option<i64>,
    ) -> Result<Page, MemoryError> {
        let mut violations = Vec::new();
        check_name(&mut violations, "subject", subject, MAX_SUBJECT_BYTES);
        if scopes.len() > MAX_PRINCIPAL_SCOPES {
            violations.push(FieldViolation::new(
                "principal.scopes",
                format!("at most {MAX_PRINCIPAL_SCOPES} scopes"),
            ));
        }
        if page_size > MAX_PAGE_SIZE {
            violations.push(FieldViolation::new(
                "page_size",
                format!("at most {MAX_PAGE_SIZE}"),
            ));
        }
        if !violations.is_empty() {
            return Err(MemoryError::Invalid(violations));
        }
        let size = if page_size == 0 {
            DEFAULT_PAGE_SIZE
        } else {
            page_size
        };
        // As in recall: a scope with NUL matches no stored scope.
        let scopes: Vec<String> = scopes.iter().filter(|s| !s.contains('\0')).cloned().collect();
        let store = self.store()?;
        let _slot = self.store_slot()?;
        Ok(store
            .list(&ListQuery {
                subject,
                scopes: &scopes,
                limit: size,
                before,
                max_bytes: self.settings.max_page_bytes,
            })
            .await?)
    }

    /// Whether the store answers a trivial query within `within`.
    pub async fn ping(&self, within: Duration) -> bool {
        let Ok(store) = self.store() else {
            return false;
        };
        matches!(tokio::time::timeout(within, store.ping()).await, Ok(Ok(())))
    }

    /// Closes the store, waiting at most `within` for the calls using it to
    /// return their connections (on drain). Returns whether it closed in
    /// time; if not, the remaining connections are dropped with the process.
    pub async fn close_within(&self, within: Duration) -> bool {
        let store = self.store.read().unwrap_or_else(PoisonError::into_inner).clone();
        match store {
            Some(store) => tokio::time::timeout(within, store.close()).await.is_ok(),
            None => true,
        }
    }
}

/// Adds a violation on `field` unless `value` is given, at most `max`
/// bytes, and free of NUL.
pub(super) fn check_name(violations: &mut Vec<FieldViolation>, field: &str, value: &str, max: usize) {
    if value.is_empty() {
        violations.push(FieldViolation::new(field, "required"));
    } else if value.len() > max {
        violations.push(FieldViolation::new(field, format!("at most {max} bytes")));
    } else if value.contains('\0') {
        violations.push(FieldViolation::new(field, "must not contain NUL"));
    }
}

#[cfg(test)]
mod tests;
