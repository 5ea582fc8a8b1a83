//! What an assembly kept, as texts a floor counts once.

use context_assembler::prompt::AssembleRequest;

/// The texts of `req` that its answer kept: the static segments, the query,
/// and each block's items whose ids `kept` (the blocks' decisions' kept
/// item ids, in block order) lists.
pub fn kept_texts<'a>(req: &AssembleRequest, kept: impl IntoIterator<Item = &'a [String]>) -> Vec<String> {
    let mut texts: Vec<String> = req.static_segments.iter().map(|s| s.content.clone()).collect();
    texts.push(req.query.clone());
    for (block, ids) in req.blocks.iter().zip(kept) {
        let items = block.items.iter().filter(|i| ids.contains(&i.id));
        texts.extend(items.map(|i| i.content.clone()));
    }
    texts
}
