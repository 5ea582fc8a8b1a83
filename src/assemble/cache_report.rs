//! What an assembled prompt tells about provider caches beyond the hints,
//! computed once per request from the run's parts: the prompt's
//! fingerprint, where it first differs from the session's previous one
//! (when the request sent that one's fingerprint), and the cache plan in
//! the provider's own terms.

use super::error::AssembleError;
use super::layout::PartAt;
use super::pipeline::PartFacts;
use crate::prompt::{AssembleRequest, Divergence};
use crate::prompt_cache::fingerprint::{self, Part};

/// The fingerprint header: the model-table entry, the tokenizer and the
/// cache salt, length-framed. Another of any of them is another prompt for
/// every cache.
pub(super) fn header(model: &str, tokenizer: &str, salt: &str) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    for field in [model, tokenizer, salt] {
        h.update(&(field.len() as u64).to_le_bytes());
        h.update(field.as_bytes());
    }
    h.digest()
}

/// The id naming a part: its segment's or item's (tools, summary, query:
/// none).
fn id_of<'r>(req: &'r AssembleRequest, f: &PartFacts) -> &'r str {
    match (f.at, f.item) {
        (Some(PartAt::Static(i)), _) => req.static_segments.get(i).map_or("", |s| s.id.as_str()),
        (_, Some((b, i))) => req
            .blocks
            .get(b)
            .and_then(|block| block.items.get(i))
            .map_or("", |it| it.id.as_str()),
        _ => "",
    }
}

/// The fingerprint's view of the parts.
fn parts<'r>(req: &'r AssembleRequest, facts: &[PartFacts]) -> Vec<Part<'r>> {
    facts
        .iter()
        .map(|f| Part {
            kind: f.kind,
            id: id_of(req, f),
            hash: f.hash,
            tokens: f.tokens,
            message_index: f.message_index,
            volatile: f.volatile,
        })
        .collect()
}

/// The prompt's fingerprint and, when `req` sent the previous one, where
/// this prompt first differs from it (its `servable_tokens` left for the
/// plan to fill). A previous fingerprint that cannot be read is the
/// caller's error.
pub(super) fn fingerprint(
    req: &AssembleRequest,
    header: u64,
    facts: &[PartFacts],
) -> Result<(Vec<u8>, Option<Divergence>), AssembleError> {
    let parts = parts(req, facts);
    let divergence = if req.previous_fingerprint.is_empty() {
        None
    } else {
        let d = fingerprint::diverge(&req.previous_fingerprint, header, &parts)
            .map_err(|e| AssembleError::invalid("previous_fingerprint", e.to_string()))?;
        Some(Divergence {
            change: d.change,
            kind: d.kind,
            id: d.id,
            message_index: d.message_index,
            token_offset: d.token_offset,
            servable_tokens: 0,
        })
    };
    Ok((fingerprint::fingerprint(header, &parts), divergence))
}

#[cfg(test)]
mod tests;
