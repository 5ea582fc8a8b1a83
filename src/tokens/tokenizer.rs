//! Token counting: exact BPE for public OpenAI encodings, or an estimate with a
//! safety margin for models whose tokenizer is not public.
//!
//! Counting uses `bpe-openai`'s encoder rather than `tiktoken-rs`, after
//! [`super::pretok`]'s hand-written pre-tokenizer (bpe-openai's regex split,
//! without the regex engine): the same vocabularies and pieces, identical
//! counts (proved against tiktoken-rs in the tests), linear time on
//! pathological input (tiktoken-rs panics on 1 MB of spaces with o200k and
//! is super-linear on long runs), and faster on prose and code. Content is
//! always ordinary text: special-token text such as `<|endoftext|>` is
//! counted as the characters it is.
//!
//! Here: [`Tokenizer`], one model's counts and frames. Counting with a
//! public encoding is `bpe`'s; what an estimate counts with besides its
//! encoding, `estimated`'s; the run scan that proves a text too long
//! without counting it, `runs`'s.

use std::fmt;
use std::sync::Arc;

use self::runs::runs_past;
pub use super::encoding::Encoding;
use super::estimate::{Features, Snapshot};
use super::framing::{self, Framing};
use super::hf::HfModel;
use super::template::{ChatMessage, TemplateError};
use super::tools::{ToolsFormula, openai_tools_tokens};
use crate::vocab::{Role, saturating_u32};

pub use self::estimated::{ContentEstimate, MeasuredFrames};

/// What a tokenizer counts with.
#[derive(Clone)]
enum Kind {
    /// A public OpenAI encoding.
    Bpe(Encoding),
    /// A model folder's own tokenizer and template, with what its messages
    /// cost besides their contents.
    Hf(Arc<HfModel>, Arc<Framing>),
}

/// Counts tokens for one model: exactly, or as an estimate.
#[derive(Clone)]
pub struct Tokenizer {
    kind: Kind,
    /// 0 = exact; otherwise the percentage added to the base encoding's count.
    margin_percent: u32,
    /// An estimate's frames as its provider measured them (else the base
    /// encoding's chat formula, with the margin).
    frames: Option<MeasuredFrames>,
    /// An estimate's content-aware counts (else the base encoding's count
    /// with the margin).
    content: Option<Arc<ContentEstimate>>,
    /// blake3 of the tokenizer id (and a folder's files): the key of this
    /// tokenizer's cache hashes.
    cache_key: [u8; 32],
    /// The key of its texts' count keys: `cache_key`, but for a content
    /// estimate its generation's text key ([`Tokenizer::generation_text_key`]),
    /// the same whatever the calibrator's state, the model or its frames, so
    /// that a text's count key is the key its provider's count is learned
    /// under (a content estimate's counts are never cached by it).
    text_key: [u8; 32],
}

impl PartialEq for Tokenizer {
    fn eq(&self, other: &Self) -> bool {
        self.cache_key == other.cache_key
            && self.margin_percent == other.margin_percent
            && self.frames == other.frames
    }
}

impl Eq for Tokenizer {}

impl std::hash::Hash for Tokenizer {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.cache_key.hash(state);
        self.margin_percent.hash(state);
    }
}

impl fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tokenizer({self})")
    }
}

impl Tokenizer {
    /// An exact tokenizer for a public encoding.
    pub fn exact(encoding: Encoding) -> Self {
        Tokenizer::new(Kind::Bpe(encoding), 0)
    }

    /// The exact tokenizer of a loaded model folder; messages without a
    /// chat template cost their content plus `message_overhead` tokens.
    pub fn hf(model: Arc<HfModel>, message_overhead: u32) -> Self {
        let framing = Framing::of(&model, message_overhead);
        Tokenizer::new(Kind::Hf(model, Arc::new(framing)), 0)
    }

    fn new(kind: Kind, margin_percent: u32) -> Self {
        let mut t = Tokenizer {
            kind,
            margin_percent,
            frames: None,
            content: None,
            cache_key: [0; 32],
            text_key: [0; 32],
        };
        t.cache_key = t.identity();
        t.text_key = t.cache_key;
        t
    }

    /// The key of the count keys of texts counted by content for tokenizer
    /// `generation`: what a text is learned under, on every machine.
    pub fn generation_text_key(generation: &str) -> [u8; 32] {
        blake3::derive_key(
            "context-assembler content-estimate text key v1",
            generation.as_bytes(),
        )
    }

    /// blake3 of what this tokenizer counts by: its id, a folder's files and
    /// framing, measured frames.
    fn identity(&self) -> [u8; 32] {
        let mut h = blake3::Hasher::new();
        h.update(self.to_string().as_bytes());
        if let Some(f) = &self.frames {
            // Framed sums in the caches (the prefix facts) differ with them.
            h.update(format!("{f:?}").as_bytes());
        }
        if let Some(c) = &self.content {
            // A text's count follows the coefficients and the error.
            for v in c
                .snapshot
                .coefficients
                .0
                .iter()
                .chain(&c.snapshot.raise)
                .chain(&c.snapshot.scale)
            {
                h.update(&v.to_bits().to_le_bytes());
            }
        }
        if let Kind::Hf(model, framing) = &self.kind {
            h.update(model.digest());
            // What a message costs besides its content is part of every
            // count the caches keep (the prefix facts hold framed sums):
            // two entries on one folder with other overheads never share.
            h.update(format!("{framing:?}").as_bytes());
        }
        *h.finalize().as_bytes()
    }

    /// This estimate with the frames its provider measured (an exact
    /// tokenizer stays as it is: its frames are known).
    pub fn with_frames(&self, frames: MeasuredFrames) -> Self {
        if self.is_exact() || !matches!(self.kind, Kind::Bpe(_)) || self.frames == Some(frames) {
            return self.clone();
        }
        let mut t = self.clone();
        t.frames = Some(frames);
        t.cache_key = t.identity();
        t
    }

    /// This estimate counting by content with `estimate` (an exact
    /// tokenizer stays as it is).
    pub fn with_content(&self, estimate: Arc<ContentEstimate>) -> Self {
        if self.is_exact() || !matches!(self.kind, Kind::Bpe(_)) {
            return self.clone();
        }
        let mut t = self.clone();
        t.text_key = Tokenizer::generation_text_key(&estimate.generation);
        t.content = Some(estimate);
        t.cache_key = t.identity();
        t
    }

    /// The content-aware estimate counted with, if any.
    pub fn content_estimate(&self) -> Option<&ContentEstimate> {
        self.content.as_deref()
    }

    /// The frames measured by the provider, when this estimate has them.
    pub fn measured_frames(&self) -> Option<MeasuredFrames> {
        self.frames
    }

    /// A blake3 hasher keyed by this tokenizer's id: equal bytes counted by
    /// different tokenizers never share a cache key.
    pub fn hasher(&self) -> super::digest::Hasher {
        super::digest::Hasher::new_keyed(&self.cache_key)
    }

    /// What names the hash of this tokenizer's count keys: the key
    /// [`Tokenizer::text_hasher`] keys them by, and whether the hash is
    /// chosen by length alone (a content estimate's,
    /// [`super::digest::portable_text_key`]). Two tokenizers with the same
    /// name give a text the same count key. (Not `text_key` alone: a
    /// framed estimate keys by its own `cache_key` and keeps the unframed
    /// one's `text_key`.)
    pub fn text_key_name(&self) -> ([u8; 32], bool) {
        match self.content {
            Some(_) => (self.text_key, true),
            None => (self.cache_key, false),
        }
    }

    /// The hasher of the count key of a text of `len` bytes, keyed by this
    /// tokenizer's id ([`super::digest::TextHasher`]; a content estimate's
    /// by its generation, see `text_key`). Chosen by
    /// [`Tokenizer::text_key_name`], so the name a text's key is
    /// kept under ([`super::cache::KnownKeys`]) is always what keyed it.
    pub fn text_hasher(&self, len: usize) -> super::digest::TextHasher {
        match self.text_key_name() {
            // Learned counts are shared across a fleet: the same key on every CPU.
            (key, true) => super::digest::TextHasher::portable(&key, len),
            (key, false) => super::digest::TextHasher::new(&key, len),
        }
    }

    /// An estimating tokenizer: `ceil(count(base) * (100 + margin) / 100)` per
    /// part. Use for models whose tokenizer is not public; never reports exact.
    pub fn estimate(base: Encoding, margin_percent: u32) -> Self {
        Tokenizer::new(Kind::Bpe(base), margin_percent.max(1))
    }

    /// This estimate with another margin (an exact tokenizer stays as it is).
    pub fn with_margin_percent(&self, margin_percent: u32) -> Self {
        match &self.kind {
            Kind::Bpe(e) if !self.is_exact() => Tokenizer::estimate(*e, margin_percent),
            _ => self.clone(),
        }
    }

    /// Whether counts equal the model's own tokenizer.
    pub fn is_exact(&self) -> bool {
        self.margin_percent == 0
    }

    /// Whether a prompt's cost is exactly the sum of its contents' counts
    /// and [`Tokenizer::frame_tokens`] plus [`Tokenizer::priming_tokens`]
    /// (OpenAI's formula; a folder without a template). Under a chat
    /// template the frames are estimates and only the rendering is exact
    /// ([`Tokenizer::rendered_text`]).
    pub fn sums_exactly(&self) -> bool {
        self.is_exact() && self.hf_model().and_then(|m| m.template()).is_none()
    }

    /// The OpenAI encoding counted with, or `None` for a model folder.
    pub fn encoding(&self) -> Option<Encoding> {
        match &self.kind {
            Kind::Bpe(e) => Some(*e),
            Kind::Hf(..) => None,
        }
    }

    /// The model folder counted with, if any.
    pub fn hf_model(&self) -> Option<&Arc<HfModel>> {
        match &self.kind {
            Kind::Bpe(_) => None,
            Kind::Hf(m, _) => Some(m),
        }
    }

    /// The estimate margin in percent (0 when exact).
    pub fn margin_percent(&self) -> u32 {
        self.margin_percent
    }

    /// Counts `text` as ordinary text (for a model folder: as its tokenizer
    /// encodes it without added special tokens, so a special token's text
    /// is that token). Linear in the input on any input.
    pub fn count(&self, text: &str) -> u32 {
        if let Some(c) = &self.content {
            return c.count(text);
        }
        match &self.kind {
            Kind::Bpe(e) => self.with_margin(e.count(text) as u64),
            Kind::Hf(m, _) => m.count(text),
        }
    }

    /// [`Tokenizer::count`] when it is at most `limit`, else `None`; stops
    /// counting once past the limit, so the work is bounded by what fits
    /// rather than by the length of `text` (a model folder's tokenizer
    /// counts the whole text unless its length alone proves it too long).
    pub fn count_at_most(&self, text: &str, limit: u32) -> Option<u32> {
        if let Some(c) = &self.content {
            return Some(c.count(text)).filter(|&n| n <= limit);
        }
        match &self.kind {
            Kind::Bpe(e) => {
                // The margin only adds tokens: a base count past `limit` is past it too.
                let base = e.count_till_limit(text, limit as usize)?;
                Some(self.with_margin(base as u64)).filter(|&n| n <= limit)
            }
            Kind::Hf(m, _) => {
                if self.surely_over(text, limit) {
                    return None;
                }
                Some(m.count(text)).filter(|&n| n <= limit)
            }
        }
    }

    /// Whether `text` surely counts more than `limit` tokens, from a scan
    /// that counts none: a proof that it cannot fit, at the cost of reading
    /// its bytes (stopping once the proof is made). Every piece the cl100k
    /// and o200k pre-tokenizers cut holds the non-whitespace characters of
    /// at most one whitespace-separated run (a piece is whitespace, or at
    /// most one whitespace character and then non-whitespace ones), and
    /// counts at least one token, so a text counts at least as many tokens
    /// as it has runs (the margin only adds). Only ASCII whitespace
    /// separates runs here: other whitespace joins two runs into one, which
    /// keeps the bound a bound. And only a run that begins with an ASCII
    /// character that is not whitespace is counted: a run of other bytes
    /// may be all whitespace (a no-break space, an ideographic space), which
    /// the pre-tokenizers join with the whitespace around it. A model folder's tokenizer need not cut at
    /// whitespace (Gemma's merges cross it): there, only the length proves,
    /// each token covering at most the longest token's bytes.
    pub fn surely_over(&self, text: &str, limit: u32) -> bool {
        if let Some(c) = &self.content {
            return c.count_within_any(text) > limit;
        }
        match &self.kind {
            Kind::Bpe(_) => runs_past(text.as_bytes(), limit),
            Kind::Hf(m, _) => text.len() / m.longest_token() > limit as usize,
        }
    }

    /// How many of the ascending byte offsets `ends` into `text` probably
    /// leave a prefix that, with `extra` (a text counted beside it), counts
    /// at most `limit`: one pass that stops past the limit, so bounded by
    /// what fits. An estimate of where the last fitting prefix is (usually
    /// exact, off by a piece near an end); verify with
    /// [`Tokenizer::count_at_most`].
    pub fn prefixes_within(&self, text: &str, ends: &[usize], extra: &str, limit: u32) -> usize {
        if let Some(c) = &self.content {
            // Features add up but for a run cut at an end: the sum counts
            // it twice, so the estimate is high, never low; raised by the
            // most any class is, whatever the prefix's class.
            let most = c.snapshot.most_factor();
            let mut f = Features::of(extra);
            let mut start = 0;
            return ends
                .iter()
                .take_while(|&&end| {
                    let Some(piece) = text.get(start..end) else {
                        return false;
                    };
                    f += Features::of(piece);
                    start = end;
                    Snapshot::budget_of(c.snapshot.coefficients.estimate(&f), most) <= limit
                })
                .count();
        }
        match &self.kind {
            Kind::Bpe(e) => {
                // The margin multiplies the base count: the base limit it allows.
                let base_limit = if self.margin_percent == 0 {
                    u64::from(limit)
                } else {
                    u64::from(limit) * 100 / (100 + u64::from(self.margin_percent))
                };
                let base = e.count(extra);
                e.prefixes_within(
                    text,
                    ends,
                    base,
                    usize::try_from(base_limit).unwrap_or(usize::MAX),
                )
            }
            Kind::Hf(m, _) => {
                let base = m.count(extra);
                m.prefix_counts(text, ends)
                    .iter()
                    .take_while(|&&n| base.saturating_add(n) <= limit)
                    .count()
            }
        }
    }

    /// The most bytes a text counting at most `tokens` can hold (the
    /// margin only adds tokens): every token covers at most the longest
    /// token's bytes. A bound for cutting texts to a limit without looking
    /// past it.
    pub fn most_bytes_within(&self, tokens: u32) -> usize {
        if let Some(c) = &self.content {
            return c.most_bytes_within(tokens);
        }
        let longest = match &self.kind {
            Kind::Bpe(e) => e.longest_token(),
            Kind::Hf(m, _) => m.longest_token(),
        };
        usize::try_from(tokens)
            .unwrap_or(usize::MAX)
            .saturating_mul(longest)
    }

    /// Tokens of one message of `role` besides its content: for OpenAI's
    /// chat formula, the fixed overhead and the role's tokens; for a model
    /// folder, the frame its template puts around a message of that role
    /// (measured when the folder was loaded), or the configured overhead
    /// when it has no template.
    pub fn frame_tokens(&self, role: Role) -> u32 {
        match &self.kind {
            Kind::Bpe(_) if let Some(f) = &self.frames => match role {
                Role::System => f.system,
                _ => f.message,
            },
            Kind::Bpe(e) => framing::MESSAGE_OVERHEAD_TOKENS
                .saturating_add(self.with_margin(u64::from(e.role_tokens()[role as usize]))),
            Kind::Hf(_, f) => f.frames[role as usize],
        }
    }

    /// How a `role` message's content is joined into the piece of the
    /// rendering that holds it (opening the prompt when `first`), for a
    /// model folder whose template sets it in a piece of its own: the
    /// message then costs [`Tokenizer::glued_message_tokens`] of the count of
    /// [`framing::Glue::piece`], exactly (see [`framing::Glue`]). `None` for
    /// OpenAI's formula, a folder without a template, or a role the
    /// template frames otherwise.
    pub fn glue(&self, role: Role, first: bool) -> Option<&framing::Glue> {
        match &self.kind {
            Kind::Hf(_, f) => f.glue(role, first),
            Kind::Bpe(_) => None,
        }
    }

    /// Tokens of a `role` message (opening the prompt when `first`) whose
    /// content's piece ([`Tokenizer::glue`]) counts `piece`: the piece and
    /// the frame outside it. Where the role has no glue, `piece` is the
    /// content's count and the frame is [`Tokenizer::frame_tokens`].
    pub fn glued_message_tokens(&self, role: Role, first: bool, piece: u32) -> u32 {
        match &self.kind {
            Kind::Hf(_, f) if f.glue(role, first).is_some() => {
                u32::try_from((f.rest(role, first) + i64::from(piece)).max(0)).unwrap_or(u32::MAX)
            }
            _ => piece.saturating_add(self.frame_tokens(role)),
        }
    }

    /// Tokens a prompt costs besides its messages: OpenAI's reply priming,
    /// or what a template adds once (the generation prompt, a BOS token, a
    /// default system header).
    pub fn priming_tokens(&self) -> u32 {
        match &self.kind {
            Kind::Bpe(_) => self.frames.map_or(framing::REPLY_PRIMING_TOKENS, |f| f.priming),
            Kind::Hf(_, f) => f.priming,
        }
    }

    /// How messages must be laid out for this model's template.
    pub fn layout_rules(&self) -> framing::LayoutRules {
        match &self.kind {
            Kind::Bpe(_) => framing::LayoutRules::default(),
            Kind::Hf(_, f) => f.rules,
        }
    }

    /// The text of a prompt of `messages` as the engine will tokenize it,
    /// where the per-message sum of counts and frames is only an estimate:
    /// the messages rendered with the model's chat template (and `tools`,
    /// each a tool definition's JSON value), generation prompt included.
    /// Its [`Tokenizer::count`] is what the engine bills. `None` where the
    /// sum is itself exact (OpenAI's formula; a folder without a template).
    pub fn rendered_text(
        &self,
        messages: &[ChatMessage<'_>],
        tools: Option<&[serde_json::Value]>,
    ) -> Option<Result<String, TemplateError>> {
        match &self.kind {
            Kind::Hf(m, _) => Some(m.template()?.render(messages, tools, true)),
            Kind::Bpe(_) => None,
        }
    }

    /// Tokens the tool definitions `tools` (each a definition's JSON text)
    /// cost, and whether that is what the provider bills: OpenAI's
    /// function-calling formula for its encodings; for a model folder with
    /// a chat template, what rendering them through the template adds to a
    /// one-message prompt. Otherwise (an estimate, a definition the formula
    /// cannot price, a template that refuses tools) their JSON texts'
    /// counts, not exact.
    pub fn tools_tokens(&self, tools: &[String]) -> (u32, bool) {
        if tools.is_empty() {
            return (0, true);
        }
        let measured = match &self.kind {
            Kind::Bpe(e) if self.is_exact() => {
                let formula = match e {
                    Encoding::O200kBase => ToolsFormula::O200K,
                    Encoding::Cl100kBase => ToolsFormula::CL100K,
                };
                openai_tools_tokens(formula, tools, |t| e.count(t) as u32)
            }
            Kind::Hf(m, _) => m.template().and_then(|t| {
                let values: Vec<serde_json::Value> = tools
                    .iter()
                    .map(|t| serde_json::from_str(t).ok())
                    .collect::<Option<_>>()?;
                let probe = [ChatMessage::new("user", "Hi")];
                let with = t.render(&probe, Some(&values), true).ok()?;
                let without = t.render(&probe, None, true).ok()?;
                Some(m.count(&with).saturating_sub(m.count(&without)))
            }),
            Kind::Bpe(_) => None,
        };
        match measured {
            Some(n) => (n, true),
            None => (
                tools.iter().map(|t| self.count(t)).fold(0, u32::saturating_add),
                false,
            ),
        }
    }

    /// Tokens of a role name (as [`Tokenizer::count`] would give, without
    /// running the encoder again).
    pub fn role_tokens(&self, role: Role) -> u32 {
        match &self.kind {
            Kind::Bpe(e) => self.with_margin(u64::from(e.role_tokens()[role as usize])),
            Kind::Hf(m, _) => m.count(role.as_str()),
        }
    }

    fn with_margin(&self, base: u64) -> u32 {
        let counted = if self.margin_percent == 0 {
            base
        } else {
            (base * (100 + u64::from(self.margin_percent))).div_ceil(100)
        };
        saturating_u32(counted)
    }
}

impl fmt::Display for Tokenizer {
    /// The id used in responses and cache keys: the encoding name,
    /// `estimate(<encoding>,+<margin>%)`, `estimate(content,<generation>)`,
    /// or `hf:<folder name>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Hf(m, _) => write!(f, "hf:{}", m.name()),
            Kind::Bpe(e) if self.is_exact() => f.write_str(e.name()),
            Kind::Bpe(_) if let Some(c) = &self.content => write!(f, "estimate(content,{})", c.generation),
            Kind::Bpe(e) => write!(f, "estimate({},+{}%)", e.name(), self.margin_percent),
        }
    }
}

mod bpe;
mod estimated;
mod runs;
#[cfg(test)]
pub(crate) mod tests;
