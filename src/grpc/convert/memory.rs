//! Wire <-> domain conversions of the memory RPCs and of recall.

use super::pb;
use crate::memory::keeper::{Placement, RecallReport, RecallSpec, RetainInput, RetainOutput};
use crate::memory::store::{ForgetFilter, Forgotten, Page};
use crate::memory::{Memory, MemoryBody, MemoryId, Observation, SessionSummary};
use crate::vocab::{FieldViolation, saturating_u32};

impl From<pb::Observation> for Observation {
    fn from(o: pb::Observation) -> Self {
        Observation {
            kind: o.r#type,
            title: o.title,
            text: o.text,
            facts: o.facts,
            files_read: o.files_read,
            files_modified: o.files_modified,
        }
    }
}

fn observation_to_wire(o: Observation) -> pb::Observation {
    pb::Observation {
        r#type: o.kind,
        title: o.title,
        text: o.text,
        facts: o.facts,
        files_read: o.files_read,
        files_modified: o.files_modified,
    }
}

/// Moves a session summary's fields between the wire and the domain, which
/// name them alike.
macro_rules! session_summary {
    ($to:path, $s:expr) => {{
        let s = $s;
        $to {
            request: s.request,
            investigated: s.investigated,
            learned: s.learned,
            completed: s.completed,
            next_steps: s.next_steps,
            files_read: s.files_read,
            files_edited: s.files_edited,
            notes: s.notes,
        }
    }};
}

fn summary(s: pb::SessionSummary) -> SessionSummary {
    session_summary!(SessionSummary, s)
}

fn summary_to_wire(s: SessionSummary) -> pb::SessionSummary {
    session_summary!(pb::SessionSummary, s)
}

impl From<pb::RetainRequest> for RetainInput {
    fn from(r: pb::RetainRequest) -> Self {
        RetainInput {
            key: r.idempotency_key,
            subject: r.subject,
            required_scopes: r.required_scopes,
            request_id: r.request_id,
            turn: r.turn,
            model_output: r.model_output,
            observations: r.observations.into_iter().map(Observation::from).collect(),
            summaries: r.summaries.into_iter().map(summary).collect(),
        }
    }
}

impl From<RetainOutput> for pb::RetainResponse {
    fn from(o: RetainOutput) -> Self {
        pb::RetainResponse {
            memory_ids: o.ids.iter().map(MemoryId::to_string).collect(),
            replayed: o.replayed,
            problems: o
                .problems
                .into_iter()
                .map(|p| pb::RetainProblem {
                    element: p.element.as_str().to_owned(),
                    index: p.index,
                    offset: p.offset as u64,
                    reason: p.reason,
                })
                .collect(),
            private_spans_removed: saturating_u32(o.private_spans),
            evicted: o.evicted,
        }
    }
}

/// Most ids one Forget names.
pub const MAX_FORGET_IDS: usize = 10_000;

/// What a ForgetRequest names: always a subject, with ids, or a type, or
/// neither.
pub fn forget_filter(r: pb::ForgetRequest) -> Result<ForgetFilter, Vec<FieldViolation>> {
    let mut bad = Vec::new();
    if r.subject.is_empty() {
        bad.push(FieldViolation::new("subject", "required"));
    }
    if !r.ids.is_empty() && !r.r#type.is_empty() {
        bad.push(FieldViolation::new("type", "give ids or a type, not both"));
    }
    if r.ids.len() > MAX_FORGET_IDS {
        bad.push(FieldViolation::new("ids", format!("at most {MAX_FORGET_IDS}")));
        return Err(bad);
    }
    let mut ids = Vec::with_capacity(r.ids.len());
    for (i, id) in r.ids.iter().enumerate() {
        match MemoryId::parse(id) {
            Some(id) => ids.push(id),
            None => bad.push(FieldViolation::new(format!("ids[{i}]"), "not a memory id")),
        }
    }
    if !bad.is_empty() {
        return Err(bad);
    }
    Ok(match (ids.is_empty(), r.r#type.is_empty()) {
        (false, _) => ForgetFilter::Ids(r.subject, ids),
        (true, true) => ForgetFilter::Subject(r.subject),
        (true, false) => ForgetFilter::SubjectType(r.subject, r.r#type),
    })
}

impl From<Forgotten> for pb::ForgetResponse {
    fn from(f: Forgotten) -> Self {
        pb::ForgetResponse {
            deleted: f.deleted,
            not_found: f.not_found,
        }
    }
}

/// The page cursor a ListMemoriesRequest continues from (a position in the
/// store's order of writes; no id Forget accepts).
pub fn page_token(token: &str) -> Result<Option<i64>, FieldViolation> {
    if token.is_empty() {
        return Ok(None);
    }
    token
        .parse::<i64>()
        .ok()
        .filter(|&n| n > 0)
        .map(Some)
        .ok_or_else(|| FieldViolation::new("page_token", "not a page token"))
}

/// The scopes a ListMemoriesRequest's principal holds (none without one).
pub fn list_scopes(principal: Option<pb::Principal>) -> Vec<String> {
    principal.map(|p| p.scopes).unwrap_or_default()
}

fn memory_to_wire(m: Memory) -> pb::StoredMemory {
    let title = m.memory.content.title();
    let memory_type = m.memory.content.memory_type().to_owned();
    pb::StoredMemory {
        id: m.id.to_string(),
        subject: m.memory.subject,
        r#type: memory_type,
        title,
        content: Some(match m.memory.content {
            MemoryBody::Observation(o) => pb::stored_memory::Content::Observation(observation_to_wire(o)),
            MemoryBody::Summary(s) => pb::stored_memory::Content::Summary(summary_to_wire(s)),
        }),
        required_scopes: m.memory.required_scopes,
        request_id: m.memory.request_id,
        turn: m.memory.turn,
        created_at_unix_ms: m.created_at_ms,
    }
}

impl From<Page> for pb::ListMemoriesResponse {
    fn from(p: Page) -> Self {
        pb::ListMemoriesResponse {
            memories: p.memories.into_iter().map(memory_to_wire).collect(),
            next_page_token: p.next.map(|id| id.to_string()).unwrap_or_default(),
            hidden: p.hidden,
        }
    }
}

/// A request's recall: what to fetch (the query defaulting to the request's
/// `query`) and where to put it.
pub fn recall(r: pb::Recall, request_query: &str) -> (RecallSpec, Placement) {
    let query = if r.query.is_empty() {
        request_query.to_owned()
    } else {
        r.query
    };
    (
        RecallSpec {
            subject: r.subject,
            query,
            max_memories: r.max_memories,
            types: r.types,
        },
        Placement {
            block: r.block,
            max_tokens: r.max_tokens,
            priority: r.priority,
        },
    )
}

impl From<RecallReport> for pb::RecallReport {
    fn from(r: RecallReport) -> Self {
        let ids = |v: Vec<MemoryId>| v.iter().map(MemoryId::to_string).collect();
        pb::RecallReport {
            block: r.block,
            recalled_ids: ids(r.recalled),
            kept_ids: ids(r.kept),
            dropped_ids: ids(r.dropped),
        }
    }
}
