//! Anthropic's cache markers: where the cache plan says a `cache_control`
//! takes effect and the caller placed none, as edits of the caller's bytes.

use super::body::{Edit, Fate, Parsed};
use crate::prompt::{Assembly, MarkerTarget};

/// The cache markers the plan says take effect, where the caller placed
/// none, at most the provider's four counting the caller's own: as edits of
/// the caller's bytes, and the marker of the summary message when it gets
/// one. A marker goes on a message only when the message is sent as the
/// caller wrote it.
pub(super) fn markers(
    text: &str,
    parsed: &Parsed,
    assembly: &Assembly,
    fates: &[Fate],
    summarized: bool,
) -> (Vec<Edit>, Option<String>) {
    let marks = &parsed.marks;
    let mut room = MAX_MARKERS.saturating_sub(marks.caller);
    let statics = assembly.cache.prefix_message_count as usize;
    let kept: Vec<usize> = (0..fates.len()).filter(|&t| fates[t].kept).collect();
    // Elements sent exactly as the caller wrote them.
    let mut touched = vec![false; parsed.elements.len()];
    for (t, turn) in parsed.turns.iter().enumerate() {
        let f = &fates[t];
        if !f.kept || f.cleared.is_some() || f.thinking_dropped {
            for p in &turn.parts {
                if let Some(e) = touched.get_mut(p.element) {
                    *e = true;
                }
            }
        }
    }
    let mut edits = Vec::new();
    let mut summary_marker = None;
    for m in assembly
        .cache_plan
        .markers
        .iter()
        .filter(|m| m.effective && m.field.name == "cache_control")
    {
        if room == 0 {
            break;
        }
        let spot = match m.target {
            MarkerTarget::Tool(i) => marks.tools.get(i as usize),
            MarkerTarget::Message(i) if (i as usize) < statics => marks.system.as_ref(),
            MarkerTarget::Message(i) if summarized && i as usize == statics => {
                summary_marker = Some(m.field.json.clone());
                room -= 1;
                continue;
            }
            MarkerTarget::Message(i) => {
                let k = (i as usize).saturating_sub(statics + usize::from(summarized));
                let element = kept
                    .get(k)
                    .and_then(|&t| parsed.turns[t].parts.last())
                    .map(|p| p.element)
                    .filter(|&e| !touched.get(e).copied().unwrap_or(true));
                element
                    .and_then(|e| marks.elements.get(e))
                    .and_then(Option::as_ref)
            }
        };
        if let Some(spot) = spot.filter(|s| !s.marked) {
            edits.push(spot.mark(text, &m.field.json));
            room -= 1;
        }
    }
    edits.sort_by_key(|(r, _)| (r.start, r.end));
    (edits, summary_marker)
}

/// Anthropic's limit of cache markers per request (the caller's included).
const MAX_MARKERS: usize = 4;
