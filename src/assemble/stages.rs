//! The stages of one assembly, in order. [`Assembler::run`] is this list;
//! each stage is a file that takes the product of the stage before it and
//! returns its own, and none calls back into an earlier one. What several
//! stages need (the caches, the learned counts, the trackers) is handed
//! down as [`Shared`].
//!
//! 1. [`admit`]: validate the request against the catalog, neutralize
//!    special-token spellings, key its static prefix, wait (as configured)
//!    for the provider to count that prefix. Product: [`admit::Admitted`].
//! 2. [`fit`]: measure, lighten and window, allocate, lay out and render,
//!    again under a lower budget while a chat template's render goes over
//!    (one try is a [`Pipeline`](super::pipeline::Pipeline) run). Product:
//!    [`fit::Fitted`].
//! 3. [`account`]: the provider's cache plan, the fingerprint and its
//!    divergence from the previous prompt, what the provider should serve
//!    from its cache. Product: [`account::Accounted`].
//! 4. [`answer`]: the messages moved out of the request, usage by source,
//!    token ids when asked: the [`Assembly`](crate::prompt::Assembly).
//!
//! [`Assembler::run`]: super::Assembler::run

pub(super) mod account;
pub(super) mod admit;
pub(super) mod answer;
pub(super) mod fit;

use super::caches::Caches;
use super::error::AssembleError;
use super::learned::Learning;
use crate::prompt::{AssembleRequest, Assembly};
use crate::prompt_cache::families::FamilyTracker;
use crate::prompt_cache::feedback::Feedback;
use crate::prompt_cache::prefix::PrefixKey;
use crate::tokens::RequestKeys;
use crate::vocab::Cancel;

/// What every request's stages share, handed down by the assembler.
#[derive(Clone, Copy)]
pub(super) struct Shared<'a> {
    /// The count, prefix and summary caches.
    pub caches: &'a Caches,
    /// What providers counted.
    pub learning: &'a Learning,
    /// The prefix families seen.
    pub families: &'a FamilyTracker,
    /// The prompts remembered for usage reports.
    pub feedback: &'a Feedback,
}

/// How [`Assembler::run`](super::Assembler::run) assembles a request.
#[derive(Debug, Clone, Copy)]
pub struct Options<'a> {
    /// Stops the run once set (a deadline passed, the caller went away): no
    /// further text is tokenized and nothing half-counted is cached.
    pub cancel: &'a Cancel,
    /// The prefix key already made for identical static parts: a batch
    /// hashes each prefix once, a warm try hands its key to the full run.
    pub prefix: Option<&'a PrefixKey>,
    /// An inline try (`Some(bytes)`): the assembly when what it needs is
    /// cached (counts, the static prefix's facts, the turn summary) but for
    /// at most `bytes` of new text to count or summarize, or the request
    /// handed back ([`Attempt::Cold`]) at the first thing that would go past
    /// that. The work is hashing, lookups and a bounded count, so a server
    /// may run it where it received the request instead of handing it to a
    /// pool of threads that may block. Nothing is recorded for a try handed
    /// back; what it counted stays cached for the full run.
    pub inline: Option<usize>,
    /// The count keys the request made: an inline try keeps them here for
    /// the full run it may give up to (see [`RequestKeys`]). Without them, a
    /// run keeps its own.
    pub keys: Option<&'a RequestKeys>,
}

impl<'a> Options<'a> {
    /// A full run that stops once `cancel` is set.
    pub fn new(cancel: &'a Cancel) -> Self {
        Options {
            cancel,
            prefix: None,
            inline: None,
            keys: None,
        }
    }
}

/// What a run came to.
#[derive(Debug)]
pub enum Attempt {
    /// Assembled, or refused (an invalid request, a budget overflow, a
    /// cancellation); with the prefix key it used, when it got that far.
    Done(Result<Assembly, AssembleError>, Option<PrefixKey>),
    /// A warm try met something not cached: the request, back, with its
    /// prefix key, for a full run.
    Cold(AssembleRequest, Option<PrefixKey>),
}

impl Attempt {
    /// The assembly or the error; a warm try that missed is
    /// [`AssembleError::Cancelled`] (only a warm try misses).
    pub fn done(self) -> Result<Assembly, AssembleError> {
        match self {
            Attempt::Done(done, _) => done,
            Attempt::Cold(..) => Err(AssembleError::Cancelled),
        }
    }
}
