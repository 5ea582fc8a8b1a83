//! Stage 1, admit: the request checked against the catalog, its special
//! tokens' spellings neutralized as its policy says, its static prefix
//! keyed, and (as configured) the provider's count of that prefix awaited.

use std::sync::Arc;
use std::time::Instant;

use super::super::policy::{Catalog, Policy};
use super::super::validate::{self, Budget, Resolved};
use super::{Attempt, Options, Shared};
use crate::assemble::AssembleError;
use crate::prompt::AssembleRequest;
use crate::prompt_cache::prefix::PrefixKey;
use crate::tokens::hf::HfModel;
use crate::tokens::{ModelSpec, Tokenizer};

/// A request admitted: valid, with what the catalog resolved for it.
pub(in crate::assemble) struct Admitted {
    /// The request (special-token spellings neutralized, as its policy says).
    pub req: AssembleRequest,
    /// The model table entry.
    pub spec: Arc<ModelSpec>,
    /// The policy.
    pub policy: Arc<Policy>,
    /// The budget.
    pub budget: Budget,
    /// The tool definitions as canonical JSON.
    pub tools: Vec<String>,
    /// The static prefix's key.
    pub key: PrefixKey,
    /// What counts its texts: the model's tokenizer, or its estimate
    /// learning from the provider's counts.
    pub tokenizer: Tokenizer,
    /// When the request's first phase began.
    pub started: Instant,
}

/// Admits `req` under `catalog`, or answers it (boxed: the answer is the
/// rare way out, and much larger than the way on): refused (invalid,
/// cancelled), or handed back from an inline try that cannot finish on the
/// reactor (token ids asked, the provider's count awaited).
pub(in crate::assemble) fn admit(
    shared: Shared<'_>,
    catalog: &Catalog,
    mut req: AssembleRequest,
    options: &Options<'_>,
) -> Result<Admitted, Box<Attempt>> {
    let inline = options.inline.is_some();
    // A batch cancelled midway hands every later request over at once.
    if options.cancel.is_cancelled() {
        return Err(Box::new(Attempt::Done(Err(AssembleError::Cancelled), None)));
    }
    // Token ids tokenize the whole prompt: never on an inline try.
    if inline && req.return_token_ids {
        return Err(Box::new(Attempt::Cold(req, None)));
    }
    let started = Instant::now();
    let Resolved {
        spec,
        policy,
        budget,
        tools,
    } = match validate::validate(&req, catalog) {
        Ok(r) => r,
        Err(e) => {
            return Err(Box::new(Attempt::Done(
                Err(AssembleError::InvalidArgument(e)),
                None,
            )));
        }
    };
    if let Some(model) = spec.tokenizer.hf_model()
        && policy.neutralize_special_tokens
    {
        neutralize(&mut req, model);
    }
    let key = options
        .prefix
        .cloned()
        .unwrap_or_else(|| PrefixKey::of(&tools, &req.static_segments));
    // A request may wait, as configured, for its provider to count its
    // static prefix at first sight; an inline try (on the reactor, where
    // nothing may block) hands such a request over instead.
    if let Some(scope) = shared.learning.scope(&spec, &req.model) {
        let texts: Vec<&str> = req.static_segments.iter().map(|s| s.content.as_str()).collect();
        // Keyed as the answer's sources key them; the request's tokenizer is
        // taken after the wait, which may learn its frames.
        let keying = || shared.learning.tokenizer(&spec, &req.model);
        if let Some(keys) = scope.should_wait(&texts, keying, &shared.caches.keys) {
            if inline {
                return Err(Box::new(Attempt::Cold(req, Some(key))));
            }
            scope.wait_for(&keys);
        }
    }
    let tokenizer = shared.learning.tokenizer(&spec, &req.model);
    Ok(Admitted {
        req,
        spec,
        policy,
        budget,
        tools,
        key,
        tokenizer,
        started,
    })
}

/// Breaks the spellings of `model`'s special tokens in the items and the
/// query of `req` (never its static prefix); a text that spells none is
/// not copied.
fn neutralize(req: &mut AssembleRequest, model: &HfModel) {
    let fix = |text: &mut String| {
        if let Some(t) = model.neutralize(text) {
            *text = t;
        }
    };
    fix(&mut req.query);
    for item in req.blocks.iter_mut().flat_map(|b| b.items.iter_mut()) {
        fix(&mut item.content);
        if let Some(c) = item.compact_form.as_mut() {
            fix(c);
        }
    }
}
