//! Retain and recall as the service uses them: validation, `<private>`
//! removal and parsing before a write; query, ranking and the MEMORY items
//! of a recall. Knows nothing of gRPC.

use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::model::{BUILTIN_TYPES, FieldRole, MemoryBody, MemoryId, NewMemory, Observation, SessionSummary};
use super::parse::{self, BlockProblem};
use super::rank::{self, Ranked};
use super::store::{
    ForgetFilter, Forgotten, ListQuery, MemoryStore, Page, RecallQuery, RetainBatch, Retention, StoreError,
};
use crate::prompt::MAX_PRINCIPAL_SCOPES;
use crate::prompt::{AssembleRequest, Assembly, Block, BlockKind, Item};
use crate::vocab::FieldViolation;

/// Longest idempotency key, in bytes.
pub const MAX_KEY_BYTES: usize = 256;
/// Longest subject, in bytes.
pub const MAX_SUBJECT_BYTES: usize = 512;
/// Longest scope or type name, in bytes.
pub const MAX_NAME_BYTES: usize = 256;
/// Most scopes on a memory.
pub const MAX_SCOPES: usize = 64;
/// Most memories one Retain stores.
pub const MAX_MEMORIES_PER_RETAIN: usize = parse::MAX_BLOCKS;
/// Most memories a page of ListMemories holds.
pub const MAX_PAGE_SIZE: u32 = 1000;
/// Page size when a request gives none.
pub const DEFAULT_PAGE_SIZE: u32 = 100;
/// Default of [`MemorySettings::recall_timeout`].
pub const DEFAULT_RECALL_TIMEOUT: Duration = Duration::from_millis(50);
/// Default of [`MemorySettings::max_store_waits`].
pub const DEFAULT_MAX_STORE_WAITS: u32 = 64;
/// Default of [`MemorySettings::max_memory_bytes`]: 16 KiB.
pub const DEFAULT_MAX_MEMORY_BYTES: u32 = 16 * 1024;
/// Default of [`MemorySettings::max_recall_bytes`]: 1 MiB.
pub const DEFAULT_MAX_RECALL_BYTES: u64 = 1 << 20;
/// Default of [`MemorySettings::max_page_bytes`]: 1 MiB, so a page stays
/// well under the 4 MiB gRPC clients accept by default.
pub const DEFAULT_MAX_PAGE_BYTES: u64 = 1 << 20;

/// What a recall the store does not answer in time (or at all) does to its
/// request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecallFailure {
    /// The prompt is assembled without memories, with a
    /// `RECALL_UNAVAILABLE` warning.
    #[default]
    Degrade,
    /// The request fails with UNAVAILABLE.
    Fail,
}

/// How memories are retained and recalled.
#[derive(Debug, Clone, PartialEq)]
pub struct MemorySettings {
    /// Observation types accepted: the built-in five and configured others.
    pub types: Vec<String>,
    /// Limits per subject, applied on every write.
    pub retention: Retention,
    /// Memories recalled when a request does not say.
    pub recall_limit: u32,
    /// The most a request may ask to recall.
    pub max_recall_limit: u32,
    /// Recency's weight halves every this long.
    pub half_life: Duration,
    /// The longest a recall waits on the store, its wait for a store slot
    /// included.
    pub recall_timeout: Duration,
    /// What a recall that times out or fails does.
    pub recall_failure: RecallFailure,
    /// Most calls waiting on the store at once (recalls, Retain, Forget,
    /// ListMemories), apart from the CPU work slots.
    pub max_store_waits: u32,
    /// Largest memory, in bytes of its fields.
    pub max_memory_bytes: u32,
    /// Bytes of candidate memories one recall loads before ranking.
    pub max_recall_bytes: u64,
    /// Bytes of memories one ListMemories page holds.
    pub max_page_bytes: u64,
}

impl Default for MemorySettings {
    fn default() -> Self {
        MemorySettings {
            types: BUILTIN_TYPES.iter().map(|t| (*t).to_owned()).collect(),
            retention: Retention {
                max_per_subject: 10_000,
                max_age: None,
                max_total_bytes: 0,
            },
            recall_limit: 20,
            max_recall_limit: 200,
            half_life: Duration::from_secs(7 * 24 * 3600),
            recall_timeout: DEFAULT_RECALL_TIMEOUT,
            recall_failure: RecallFailure::Degrade,
            max_store_waits: DEFAULT_MAX_STORE_WAITS,
            max_memory_bytes: DEFAULT_MAX_MEMORY_BYTES,
            max_recall_bytes: DEFAULT_MAX_RECALL_BYTES,
            max_page_bytes: DEFAULT_MAX_PAGE_BYTES,
        }
    }
}

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

/// One Retain call.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RetainInput {
    /// Idempotency key (required).
    pub key: String,
    /// Whose memories (required).
    pub subject: String,
    /// Scopes every memory of the call requires.
    pub required_scopes: Vec<String>,
    /// The request the memories came from.
    pub request_id: String,
    /// Its turn.
    pub turn: u32,
    /// Raw model output holding `<observation>` and `<summary>` blocks.
    pub model_output: String,
    /// Structured observations.
    pub observations: Vec<Observation>,
    /// Structured summaries.
    pub summaries: Vec<SessionSummary>,
}

/// What a Retain did.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RetainOutput {
    /// Ids stored (or, for a replay, stored by the first call): structured
    /// observations, structured summaries, then blocks of the model output.
    pub ids: Vec<MemoryId>,
    /// The types of those memories (for metrics), in the same order.
    pub types: Vec<String>,
    /// The key had been used: nothing was stored.
    pub replayed: bool,
    /// Blocks of the model output that were not stored, and why.
    pub problems: Vec<BlockProblem>,
    /// `<private>` spans removed.
    pub private_spans: usize,
    /// Memories the retention limits of the subject deleted.
    pub evicted: u64,
    /// Memories of any subject the store's size bound deleted.
    pub evicted_for_space: u64,
}

/// A checked and parsed Retain, ready to be written.
#[derive(Debug, Clone, PartialEq)]
pub struct PreparedRetain {
    batch: RetainBatch,
    types: Vec<String>,
    problems: Vec<BlockProblem>,
    private_spans: usize,
}

/// What a request asks to recall.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RecallSpec {
    /// Whose memories (required).
    pub subject: String,
    /// Search text (the request's query when the recall gives none).
    pub query: String,
    /// Most memories; 0 = the configured default.
    pub max_memories: u32,
    /// Only these types; empty = all.
    pub types: Vec<String>,
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

    /// Checks, strips `<private>` spans, parses the model output and stores
    /// everything under the key in one transaction.
    pub async fn retain(&self, input: RetainInput, now_ms: i64) -> Result<RetainOutput, MemoryError> {
        let prepared = self.prepare_retain(input, now_ms)?;
        self.commit_retain(prepared).await
    }

    /// The CPU half of [`Memories::retain`]: checks, strips `<private>`
    /// spans and parses (a caller may run it off its reactor).
    pub fn prepare_retain(&self, input: RetainInput, now_ms: i64) -> Result<PreparedRetain, MemoryError> {
        self.enabled()?;
        let max_bytes = self.settings.max_memory_bytes as usize;
        let mut violations = Vec::new();
        check_name(&mut violations, "idempotency_key", &input.key, MAX_KEY_BYTES);
        check_name(&mut violations, "subject", &input.subject, MAX_SUBJECT_BYTES);
        check_scopes(&mut violations, "required_scopes", &input.required_scopes);
        if input.model_output.is_empty() && input.observations.is_empty() && input.summaries.is_empty() {
            violations.push(FieldViolation::new(
                "model_output",
                "nothing to retain: give model_output, observations or summaries",
            ));
        }
        let structured = input.observations.len() + input.summaries.len();
        if structured > MAX_MEMORIES_PER_RETAIN {
            violations.push(FieldViolation::new(
                "observations",
                format!("at most {MAX_MEMORIES_PER_RETAIN} observations and summaries per call"),
            ));
        }
        let mut private_spans = 0;
        let mut contents = Vec::with_capacity(structured);
        for (i, mut o) in input.observations.into_iter().enumerate() {
            o.kind = o.kind.trim().to_lowercase();
            if !self.settings.types.contains(&o.kind) {
                violations.push(FieldViolation::new(
                    format!("observations[{i}].type"),
                    format!("unknown type; known: {}", self.settings.types.join(", ")),
                ));
            }
            let mut content = MemoryBody::Observation(o);
            private_spans += strip_private(&mut content);
            if content.is_blank() {
                violations.push(FieldViolation::new(format!("observations[{i}].text"), "required"));
            }
            check_size(
                &mut violations,
                &format!("observations[{i}]"),
                &content,
                max_bytes,
            );
            contents.push(content);
        }
        for (i, s) in input.summaries.into_iter().enumerate() {
            let mut content = MemoryBody::Summary(s);
            private_spans += strip_private(&mut content);
            if content.is_blank() {
                violations.push(FieldViolation::new(
                    format!("summaries[{i}]"),
                    "every field is empty",
                ));
            }
            check_size(&mut violations, &format!("summaries[{i}]"), &content, max_bytes);
            contents.push(content);
        }
        if !violations.is_empty() {
            return Err(MemoryError::Invalid(violations));
        }
        let mut parsed = parse::parse_model_output(&input.model_output, &self.settings.types);
        private_spans += parsed.private_spans;
        for block in parsed.blocks {
            let bytes = block.content.bytes();
            if bytes > max_bytes {
                // Reported as a malformed block is: the rest is stored.
                parsed.problems.push(BlockProblem {
                    element: block.element,
                    index: block.index,
                    offset: block.offset,
                    reason: format!("{bytes} bytes; a memory holds at most {max_bytes}"),
                });
            } else {
                contents.push(block.content);
            }
        }
        parsed.problems.sort_by_key(|p| p.index);
        if contents.len() > MAX_MEMORIES_PER_RETAIN {
            return Err(MemoryError::invalid(
                "model_output",
                format!("at most {MAX_MEMORIES_PER_RETAIN} observations and summaries per call"),
            ));
        }
        let types: Vec<String> = contents.iter().map(|c| c.memory_type().to_owned()).collect();
        let memories = contents
            .into_iter()
            .map(without_nul)
            .map(|content| NewMemory {
                subject: input.subject.clone(),
                content,
                required_scopes: input.required_scopes.clone(),
                request_id: input.request_id.replace('\0', ""),
                turn: input.turn,
            })
            .collect();
        let batch = RetainBatch {
            key: input.key,
            subject: input.subject,
            memories,
            now_ms,
            retention: self.settings.retention,
        };
        Ok(PreparedRetain {
            batch,
            types,
            problems: parsed.problems,
            private_spans,
        })
    }

    /// The I/O half of [`Memories::retain`]: one transaction.
    pub async fn commit_retain(&self, prepared: PreparedRetain) -> Result<RetainOutput, MemoryError> {
        let store = self.store()?;
        let _slot = self.store_slot()?;
        let retained = store.retain(&prepared.batch).await?;
        Ok(RetainOutput {
            ids: retained.ids,
            types: prepared.types,
            replayed: retained.replayed,
            problems: prepared.problems,
            private_spans: prepared.private_spans,
            evicted: retained.evicted,
            evicted_for_space: retained.evicted_for_space,
        })
    }

    /// Checks a recall; the field paths are under `field` (e.g. `recall`).
    pub fn check_recall(&self, field: &str, spec: &RecallSpec) -> Vec<FieldViolation> {
        let mut violations = Vec::new();
        check_name(
            &mut violations,
            &format!("{field}.subject"),
            &spec.subject,
            MAX_SUBJECT_BYTES,
        );
        if spec.max_memories > self.settings.max_recall_limit {
            violations.push(FieldViolation::new(
                format!("{field}.max_memories"),
                format!("at most {}", self.settings.max_recall_limit),
            ));
        }
        for (i, t) in spec.types.iter().enumerate() {
            if t != super::model::SUMMARY_TYPE && !self.settings.types.contains(t) {
                violations.push(FieldViolation::new(format!("{field}.types[{i}]"), "unknown type"));
            }
        }
        violations
    }

    /// The memories `spec` recalls for a principal holding `scopes`, best
    /// first. Memories requiring a scope outside `scopes` are excluded by
    /// the store's query, before ranking.
    pub async fn recall(
        &self,
        spec: &RecallSpec,
        scopes: &[String],
        now_ms: i64,
    ) -> Result<Vec<Ranked>, MemoryError> {
        let store = self.store()?;
        let max = if spec.max_memories == 0 {
            self.settings.recall_limit
        } else {
            spec.max_memories
        };
        let query = RecallQuery {
            subject: spec.subject.clone(),
            terms: rank::terms(&spec.query),
            // A scope with NUL matches no stored scope (none holds one), and
            // PostgreSQL refuses NUL in text.
            scopes: scopes.iter().filter(|s| !s.contains('\0')).cloned().collect(),
            types: spec.types.clone(),
            limit: max,
            max_bytes: self.settings.max_recall_bytes,
        };
        let candidates = store.recall(&query).await?;
        Ok(rank::rank(
            candidates,
            now_ms,
            self.settings.half_life,
            max as usize,
        ))
    }

    /// [`Memories::recall`] within the recall timeout, holding a store slot
    /// (waiting for one counts against the timeout): a store that stalls
    /// costs a recall at most the timeout, and is
    /// [`StoreError::Unavailable`] then.
    pub async fn recall_within(
        &self,
        spec: &RecallSpec,
        scopes: &[String],
        now_ms: i64,
    ) -> Result<Vec<Ranked>, MemoryError> {
        let timeout = self.settings.recall_timeout;
        let bounded = async {
            let _slot = self
                .waits
                .acquire()
                .await
                .map_err(|_| StoreError::Unavailable("closed".into()))?;
            self.recall(spec, scopes, now_ms).await
        };
        tokio::time::timeout(timeout, bounded).await.unwrap_or_else(|_| {
            Err(
                StoreError::Unavailable(format!("recall: no answer within {} ms", timeout.as_millis()))
                    .into(),
            )
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

/// Name of the MEMORY block recalled memories go to when a request names none.
pub const DEFAULT_RECALL_BLOCK: &str = "recalled_memories";

/// Where recalled memories go in a request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Placement {
    /// The MEMORY block's name (empty = [`DEFAULT_RECALL_BLOCK`]).
    pub block: String,
    /// For a new block: most tokens kept (0 = no limit).
    pub max_tokens: u32,
    /// For a new block: its priority (0 = the MEMORY default).
    pub priority: u32,
}

impl Placement {
    /// The block's name.
    pub fn name(&self) -> &str {
        if self.block.is_empty() {
            DEFAULT_RECALL_BLOCK
        } else {
            &self.block
        }
    }
}

/// Puts recalled `items` into `request`: after the items of its MEMORY
/// block named by `placement`, or as a new MEMORY block after its blocks.
/// A block of that name that is not a MEMORY block is an error on `field`.
pub fn attach(
    request: &mut AssembleRequest,
    placement: &Placement,
    items: Vec<Item>,
    field: &str,
) -> Result<(), FieldViolation> {
    let name = placement.name();
    match request.blocks.iter_mut().find(|b| b.name == name) {
        Some(b) if b.kind == BlockKind::Memory => b.items.extend(items),
        Some(_) => {
            return Err(FieldViolation::new(
                format!("{field}.block"),
                "names a block of the request that is not a MEMORY block",
            ));
        }
        None => {
            let mut block = Block::new(name, BlockKind::Memory, items);
            block.max_tokens = placement.max_tokens;
            block.priority = placement.priority;
            request.blocks.push(block);
        }
    }
    Ok(())
}

/// What a recall brought into a prompt.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RecallReport {
    /// The MEMORY block.
    pub block: String,
    /// Memory ids recalled, best first.
    pub recalled: Vec<MemoryId>,
    /// Of those, the ids kept.
    pub kept: Vec<MemoryId>,
    /// Of those, the ids dropped.
    pub dropped: Vec<MemoryId>,
}

/// The report of a recall of `recalled` (best first) into `placement`'s
/// block, read from the assembly's decision for that block.
pub fn report(assembly: &Assembly, placement: &Placement, recalled: &[MemoryId]) -> RecallReport {
    let name = placement.name();
    let ids = |list: fn(&crate::prompt::BlockDecision) -> &Vec<String>| -> Vec<MemoryId> {
        assembly
            .decisions
            .iter()
            .filter(|d| d.name == name)
            .flat_map(|d| list(d).iter())
            .filter_map(|id| memory_id(id))
            .filter(|id| recalled.contains(id))
            .collect()
    };
    RecallReport {
        block: name.to_owned(),
        recalled: recalled.to_vec(),
        kept: ids(|d| &d.kept_item_ids),
        dropped: ids(|d| &d.dropped_item_ids),
    }
}

/// The item id of a recalled memory in its MEMORY block.
pub fn item_id(memory_id: &MemoryId) -> String {
    format!("memory:{memory_id}")
}

/// The memory id an item id names, if it names a recalled memory.
pub fn memory_id(item_id: &str) -> Option<MemoryId> {
    MemoryId::parse(item_id.strip_prefix("memory:")?)
}

/// The MEMORY items of recalled memories, best first: untrusted (rendered
/// `trust="untrusted"`), their source saying they are recalled hints of a
/// type and a date, scored by rank.
pub fn items(ranked: &[Ranked]) -> Vec<Item> {
    ranked
        .iter()
        .map(|r| {
            let c = &r.candidate;
            let content = if c.title.is_empty() || c.body.starts_with(&c.title) {
                c.body.clone()
            } else {
                format!("{}\n{}", c.title, c.body)
            };
            Item {
                id: item_id(&c.id),
                content,
                score: r.score,
                source: format!("recalled hint: {} of {}", c.memory_type, date(c.created_at_ms)),
                trusted: false,
                ..Item::default()
            }
        })
        .collect()
}

/// `YYYY-MM-DD` (UTC) of a time in ms since the Unix epoch.
pub fn date(ms: i64) -> String {
    let (year, month, day) = crate::vocab::date::civil_from_days(ms.div_euclid(86_400_000));
    format!("{year:04}-{month:02}-{day:02}")
}

fn check_name(violations: &mut Vec<FieldViolation>, field: &str, value: &str, max: usize) {
    if value.is_empty() {
        violations.push(FieldViolation::new(field, "required"));
    } else if value.len() > max {
        violations.push(FieldViolation::new(field, format!("at most {max} bytes")));
    } else if value.contains('\0') {
        violations.push(FieldViolation::new(field, "must not contain NUL"));
    }
}

/// The content without NUL characters, which no database text column holds
/// alike (PostgreSQL refuses them), so both stores keep the same text.
fn without_nul(mut content: MemoryBody) -> MemoryBody {
    content.fields_mut(|_, value| {
        for s in value.strings().filter(|s| s.contains('\0')) {
            s.retain(|c| c != '\0');
        }
    });
    content
}

/// A memory over `max` bytes is a violation naming its largest field.
fn check_size(violations: &mut Vec<FieldViolation>, field: &str, content: &MemoryBody, max: usize) {
    let bytes = content.bytes();
    if bytes > max {
        violations.push(FieldViolation::new(
            format!("{field}.{}", content.largest_field()),
            format!("the memory has {bytes} bytes; at most {max}"),
        ));
    }
}

fn check_scopes(violations: &mut Vec<FieldViolation>, field: &str, scopes: &[String]) {
    if scopes.len() > MAX_SCOPES {
        violations.push(FieldViolation::new(field, format!("at most {MAX_SCOPES} scopes")));
    }
    for (i, s) in scopes.iter().enumerate().take(MAX_SCOPES) {
        check_name(violations, &format!("{field}[{i}]"), s, MAX_NAME_BYTES);
    }
}

/// Removes `<private>` spans from every field of a structured memory
/// (model output is swept whole before it is parsed); returns how many.
/// The type is left as given: it must name a configured type, so one
/// holding a span is refused, never stored.
fn strip_private(content: &mut MemoryBody) -> usize {
    let mut n = 0;
    content.fields_mut(|field, value| {
        if field.role == FieldRole::Type {
            return;
        }
        for s in value.strings() {
            let (text, spans) = parse::strip_private(s);
            if spans > 0 {
                *s = text.into_owned();
                n += spans;
            }
        }
    });
    n
}

#[cfg(test)]
mod tests;
