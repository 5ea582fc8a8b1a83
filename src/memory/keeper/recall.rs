//! Recall: a request's recall checked, the store's candidates for the
//! principal's scopes ranked within the recall timeout, and the MEMORY
//! items, block and report they become in a prompt. Which of the ranked
//! memories a request gets (each text once) is `keeper/distinct.rs`.

use super::settings::MAX_SUBJECT_BYTES;
use super::{Memories, MemoryError, check_name};
use crate::memory::model::{MemoryId, SUMMARY_TYPE};
use crate::memory::rank::{self, Ranked};
use crate::memory::store::{Candidate, RecallQuery, StoreError};
use crate::prompt::{AssembleRequest, Assembly, Block, BlockKind, Item};
use crate::vocab::FieldViolation;

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

impl Memories {
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
            if t != SUMMARY_TYPE && !self.settings.types.contains(t) {
                violations.push(FieldViolation::new(format!("{field}.types[{i}]"), "unknown type"));
            }
        }
        violations
    }

    /// The memories `spec` may recall for a principal holding `scopes`,
    /// ranked best first ([`Recalled::choose`] picks a request's). Memories
    /// requiring a scope outside `scopes` are excluded by the store's
    /// query, before ranking.
    pub async fn recall(
        &self,
        spec: &RecallSpec,
        scopes: &[String],
        now_ms: i64,
    ) -> Result<Recalled, MemoryError> {
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
        Ok(Recalled {
            // All of them: a memory left out as a repeat leaves its place
            // to the next.
            ranked: rank::rank(candidates, now_ms, self.settings.half_life, usize::MAX),
            max: max as usize,
        })
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
    ) -> Result<Recalled, MemoryError> {
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
}

/// What a recall found, before it meets the request.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Recalled {
    /// Every candidate the store gave (up to `max` best matches and `max`
    /// newest), ranked best first.
    pub ranked: Vec<Ranked>,
    /// Most memories to recall.
    pub max: usize,
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
/// Returns the block's index in the request. A block of that name that is
/// not a MEMORY block is an error on `field`.
pub fn attach(
    request: &mut AssembleRequest,
    placement: &Placement,
    items: Vec<Item>,
    field: &str,
) -> Result<usize, FieldViolation> {
    let name = placement.name();
    match request.blocks.iter().position(|b| b.name == name) {
        Some(at) if request.blocks[at].kind == BlockKind::Memory => {
            request.blocks[at].items.extend(items);
            Ok(at)
        }
        Some(_) => Err(FieldViolation::new(
            format!("{field}.block"),
            "names a block of the request that is not a MEMORY block",
        )),
        None => {
            let mut block = Block::new(name, BlockKind::Memory, items);
            block.max_tokens = placement.max_tokens;
            block.priority = placement.priority;
            request.blocks.push(block);
            Ok(request.blocks.len() - 1)
        }
    }
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
            let content = match shown(c) {
                ["", body] => body.to_owned(),
                [title, body] => format!("{title}\n{body}"),
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

/// What a recalled memory's item shows: its title (empty when it has none
/// or its body starts with it) and its body, one line apart. The one
/// definition of a recalled memory's text, for its item and for
/// comparing it with others.
pub(super) fn shown(c: &Candidate) -> [&str; 2] {
    if c.title.is_empty() || c.body.starts_with(&c.title) {
        ["", &c.body]
    } else {
        [&c.title, &c.body]
    }
}

/// `YYYY-MM-DD` (UTC) of a time in ms since the Unix epoch.
pub fn date(ms: i64) -> String {
    let (year, month, day) = crate::vocab::date::civil_from_days(ms.div_euclid(86_400_000));
    format!("{year:04}-{month:02}-{day:02}")
}
