//! Retain's preparation: the CPU half (checks, `<private>` spans removed
//! from every field, the model output parsed, sizes bounded, NULs dropped)
//! that turns a call into one batch for the store, and the I/O half that
//! writes it.

use super::settings::{
    MAX_KEY_BYTES, MAX_MEMORIES_PER_RETAIN, MAX_NAME_BYTES, MAX_SCOPES, MAX_SUBJECT_BYTES,
};
use super::{Memories, MemoryError, check_name};
use crate::memory::model::{FieldRole, MemoryBody, MemoryId, NewMemory, Observation, SessionSummary};
use crate::memory::parse::{self, BlockProblem};
use crate::memory::store::RetainBatch;
use crate::vocab::FieldViolation;

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
    /// What the store writes.
    pub(super) batch: RetainBatch,
    /// The memories' types, in order.
    types: Vec<String>,
    /// Blocks of the model output not kept.
    problems: Vec<BlockProblem>,
    /// `<private>` spans removed.
    pub(super) private_spans: usize,
}

impl Memories {
    /// The CPU half of a Retain: checks, strips `<private>` spans and
    /// parses the model output (a caller may run it off its reactor).
    pub fn prepare_retain(&self, input: RetainInput, now_ms: i64) -> Result<PreparedRetain, MemoryError> {
        self.enabled()?;
        let mut violations = check_call(&input);
        let (mut contents, mut private_spans) =
            self.structured(input.observations, input.summaries, &mut violations);
        if !violations.is_empty() {
            return Err(MemoryError::Invalid(violations));
        }
        let (problems, spans) = self.model_output_memories(&input.model_output, &mut contents);
        private_spans += spans;
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
            problems,
            private_spans,
        })
    }

    /// The structured memories of a call, in order (observations, then
    /// summaries), with their `<private>` spans removed, and how many spans
    /// were; each unknown type, blank memory or memory over the size bound
    /// is a violation.
    fn structured(
        &self,
        observations: Vec<Observation>,
        summaries: Vec<SessionSummary>,
        violations: &mut Vec<FieldViolation>,
    ) -> (Vec<MemoryBody>, usize) {
        let max_bytes = self.settings.max_memory_bytes as usize;
        let mut private_spans = 0;
        let mut contents = Vec::with_capacity(observations.len() + summaries.len());
        for (i, mut o) in observations.into_iter().enumerate() {
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
            check_size(violations, &format!("observations[{i}]"), &content, max_bytes);
            contents.push(content);
        }
        for (i, s) in summaries.into_iter().enumerate() {
            let mut content = MemoryBody::Summary(s);
            private_spans += strip_private(&mut content);
            if content.is_blank() {
                violations.push(FieldViolation::new(
                    format!("summaries[{i}]"),
                    "every field is empty",
                ));
            }
            check_size(violations, &format!("summaries[{i}]"), &content, max_bytes);
            contents.push(content);
        }
        (contents, private_spans)
    }

    /// Parses `model_output` and appends each block that fits the size bound
    /// to `contents`; returns the blocks not kept (a block over the bound is
    /// reported as a malformed one is: the rest is stored), in text order,
    /// and how many `<private>` spans were removed.
    fn model_output_memories(
        &self,
        model_output: &str,
        contents: &mut Vec<MemoryBody>,
    ) -> (Vec<BlockProblem>, usize) {
        let max_bytes = self.settings.max_memory_bytes as usize;
        let mut parsed = parse::parse_model_output(model_output, &self.settings.types);
        for block in parsed.blocks {
            let bytes = block.content.bytes();
            if bytes > max_bytes {
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
        (parsed.problems, parsed.private_spans)
    }

    /// The I/O half of a Retain: stores everything
    /// [`Memories::prepare_retain`] made under the key, in one transaction.
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
}

/// The checks of a call as a whole: its key, subject and scopes, something
/// to retain, and no more structured memories than a call takes.
fn check_call(input: &RetainInput) -> Vec<FieldViolation> {
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
    if input.observations.len() + input.summaries.len() > MAX_MEMORIES_PER_RETAIN {
        violations.push(FieldViolation::new(
            "observations",
            format!("at most {MAX_MEMORIES_PER_RETAIN} observations and summaries per call"),
        ));
    }
    violations
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
