//! Token counting: exact BPE for public OpenAI encodings, or an estimate with a
//! safety margin for models whose tokenizer is not public.
//!
//! Counting uses `bpe-openai`'s encoder rather than `tiktoken-rs`, after
//! [`pretok`]'s hand-written pre-tokenizer (bpe-openai's regex split, without
//! the regex engine): the same vocabularies and pieces, identical counts
//! (proved against tiktoken-rs in the tests), linear time on pathological
//! input (tiktoken-rs panics on 1 MB of spaces with o200k and is
//! super-linear on long runs), and faster on prose and code. Content is
//! always ordinary text: special-token text such as `<|endoftext|>` is
//! counted as the characters it is.

use std::fmt;
use std::sync::{Arc, OnceLock};

pub use super::encoding::Encoding;
use super::estimate::{Features, Snapshot};
use super::framing::{self, Framing};
use super::hf::HfModel;
use super::pretok;
use super::singles::Singles;
use super::template::{ChatMessage, TemplateError};
use super::tools::{ToolsFormula, openai_tools_tokens};
use crate::vocab::{Role, saturating_u32};

// How an encoding counts: its vocabulary, pre-tokenizer and BPE, and the
// tables built from them once.
impl Encoding {
    fn bpe(self) -> &'static bpe_openai::Tokenizer {
        match self {
            Encoding::Cl100kBase => bpe_openai::cl100k_base(),
            Encoding::O200kBase => bpe_openai::o200k_base(),
        }
    }

    /// The pre-tokenizer's pieces of `text`: [`pretok`]'s hand-written
    /// scan, the same pieces as bpe-openai's regex (which stays the
    /// fallback should the class tables not build). The OpenAI encodings do
    /// not normalize (bpe-openai's nfc is off for both, and its `normalize`
    /// then returns the text as it is), so the text is split as given.
    fn pieces(self, text: &str) -> Pieces<'_, impl Iterator<Item = &str>> {
        match pretok::split(self, text) {
            Some(pieces) => Pieces::Scan(pieces),
            None => Pieces::Regex(self.bpe().split(text)),
        }
    }

    /// Loads the vocabulary now rather than on the first request.
    pub fn warm(self) {
        let _ = self.role_tokens();
        let _ = self.singles();
    }

    /// The bytes of every token of the vocabulary, in id order.
    pub(crate) fn tokens(self) -> impl Iterator<Item = &'static [u8]> {
        let bpe = &self.bpe().bpe;
        (0..bpe.num_tokens()).map(|id| bpe.token_bytes(saturating_u32(id)))
    }

    /// The bytes of every token of the vocabulary, for the single-token
    /// fast path of [`Encoding::count`].
    pub(crate) fn singles(self) -> &'static Singles {
        static CL100K: OnceLock<Singles> = OnceLock::new();
        static O200K: OnceLock<Singles> = OnceLock::new();
        let cell = match self {
            Encoding::Cl100kBase => &CL100K,
            Encoding::O200kBase => &O200K,
        };
        cell.get_or_init(|| Singles::new(self.tokens()))
    }

    /// Tokens of `text` as ordinary text: the pre-tokenizer's pieces, each
    /// BPE-encoded, except that a piece which is itself a token of the
    /// vocabulary is that one token (as the reference encoder, tiktoken, does
    /// before it merges anything). Most pieces of prose and code are single
    /// tokens, so most skip the encoder and its allocations.
    fn count(self, text: &str) -> usize {
        // Each splitter in a loop of its own: no dispatch per piece.
        match pretok::split(self, text) {
            Some(pieces) => self.count_pieces(text, pieces),
            None => self.count_pieces(text, self.bpe().split(text)),
        }
    }

    /// [`Encoding::count`] of `text` split into `pieces` (slices of it).
    #[inline(always)]
    fn count_pieces<'t>(self, text: &'t str, pieces: impl Iterator<Item = &'t str>) -> usize {
        let tok = self.bpe();
        let singles = self.singles();
        pieces
            .map(|piece| {
                if singles.contains_in(text.as_bytes(), offset(text, piece), piece.len()) {
                    1
                } else {
                    tok.bpe.count(piece.as_bytes())
                }
            })
            .sum()
    }

    /// [`Encoding::count`] when it is at most `limit`, else `None`; stops
    /// at the first piece that goes past the limit (the single-token fast
    /// path included), so the work is bounded by what fits.
    fn count_till_limit(self, text: &str, limit: usize) -> Option<usize> {
        match pretok::split(self, text) {
            Some(pieces) => self.count_pieces_till_limit(text, pieces, limit),
            None => self.count_pieces_till_limit(text, self.bpe().split(text), limit),
        }
    }

    /// [`Encoding::count_till_limit`] of `text` split into `pieces`.
    #[inline(always)]
    fn count_pieces_till_limit<'t>(
        self,
        text: &'t str,
        mut pieces: impl Iterator<Item = &'t str>,
        limit: usize,
    ) -> Option<usize> {
        let singles = self.singles();
        pieces.try_fold(0usize, |used, piece| {
            let room = limit.checked_sub(used)?;
            Some(used + self.piece_within(singles, text, piece, room)?)
        })
    }

    /// One pre-tokenizer piece's count when it is at most `room`, else
    /// `None`, stopping past `room` (a long piece, a megabyte of blank lines,
    /// costs what fits, not what it holds); a piece that is a token is one.
    fn piece_within(self, singles: &Singles, text: &str, piece: &str, room: usize) -> Option<usize> {
        if singles.contains_in(text.as_bytes(), offset(text, piece), piece.len()) {
            Some(1).filter(|_| room > 0)
        } else {
            self.bpe().bpe.count_till_limit(piece.as_bytes(), room)
        }
    }

    /// How many of the ascending byte offsets `ends` (each at a character
    /// boundary of `text`) have an estimated prefix count `base + tokens of
    /// text[..end]` at most `limit`, in one pass over the pieces of `text`
    /// that stops past the limit. The pieces before an end are counted as
    /// [`Encoding::count`] counts them; the piece an end splits adds its own
    /// part's count (a long part: a quarter of its bytes). The count of the
    /// prefix itself can differ by the last piece or two (the pre-tokenizer
    /// looks one character ahead): an estimate for where to look first,
    /// never an answer.
    fn prefixes_within(self, text: &str, ends: &[usize], base: usize, limit: usize) -> usize {
        // The pieces are slices of `text` itself, and their offsets are
        // offsets into it.
        let singles = self.singles();
        // A piece's count, or `room + 1` once it is past `room`.
        let piece_count = |piece: &str, room: usize| {
            self.piece_within(singles, text, piece, room)
                .unwrap_or(room.saturating_add(1))
        };
        let mut counted = base;
        let mut next = 0;
        for piece in self.pieces(text) {
            let start = piece.as_ptr() as usize - text.as_ptr() as usize;
            let end = start + piece.len();
            while next < ends.len() && ends[next] <= end {
                let part = &piece[..ends[next].saturating_sub(start).min(piece.len())];
                let split = match part.len() {
                    0 => 0,
                    n if n == piece.len() => piece_count(piece, limit.saturating_sub(counted)),
                    n if n <= 64 => piece_count(part, limit.saturating_sub(counted)),
                    n => n / 4,
                };
                if counted + split > limit {
                    return next;
                }
                next += 1;
            }
            counted += piece_count(piece, limit.saturating_sub(counted));
            if counted > limit || next == ends.len() {
                break;
            }
        }
        next
    }

    /// The longest token's bytes: a text of `n` bytes is at least
    /// `n / longest` tokens (rounded up), since each token covers at most
    /// that many of its bytes.
    fn longest_token(self) -> usize {
        static CL100K: OnceLock<usize> = OnceLock::new();
        static O200K: OnceLock<usize> = OnceLock::new();
        let cell = match self {
            Encoding::Cl100kBase => &CL100K,
            Encoding::O200kBase => &O200K,
        };
        *cell.get_or_init(|| self.singles().longest().max(1))
    }

    /// Tokens of each role name, in [`Role::ALL`] order, counted once.
    fn role_tokens(self) -> [u32; 4] {
        static CL100K: OnceLock<[u32; 4]> = OnceLock::new();
        static O200K: OnceLock<[u32; 4]> = OnceLock::new();
        let cell = match self {
            Encoding::Cl100kBase => &CL100K,
            Encoding::O200kBase => &O200K,
        };
        *cell.get_or_init(|| Role::ALL.map(|r| saturating_u32(self.count(r.as_str()))))
    }
}

/// Where `piece`, a slice of `text`, starts in it.
#[inline(always)]
fn offset(text: &str, piece: &str) -> usize {
    (piece.as_ptr() as usize).wrapping_sub(text.as_ptr() as usize)
}

/// Pieces from the hand-written pre-tokenizer, or from the regex.
enum Pieces<'a, R> {
    Scan(pretok::Pieces<'a>),
    Regex(R),
}

impl<'a, R: Iterator<Item = &'a str>> Iterator for Pieces<'a, R> {
    type Item = &'a str;

    #[inline]
    fn next(&mut self) -> Option<&'a str> {
        match self {
            Pieces::Scan(pieces) => pieces.next(),
            Pieces::Regex(pieces) => pieces.next(),
        }
    }
}

/// What a tokenizer counts with.
#[derive(Clone)]
enum Kind {
    /// A public OpenAI encoding.
    Bpe(Encoding),
    /// A model folder's own tokenizer and template, with what its messages
    /// cost besides their contents.
    Hf(Arc<HfModel>, Arc<Framing>),
}

/// What a provider's counting measured around the content of an estimated
/// model's messages (its counting endpoint, with a few one-message
/// requests): a prompt's fixed cost, and each message's by role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MeasuredFrames {
    /// Once per prompt (its first message's frame less a further one's).
    pub priming: u32,
    /// Each message that is not a system prompt.
    pub message: u32,
    /// A system prompt.
    pub system: u32,
}

/// A content-aware estimate ([`super::estimate`]) as one request counts
/// with it: a tokenizer generation's calibrated coefficients and error,
/// frozen, so that every text of the request is estimated alike. A text
/// costs [`Snapshot::budget_tokens`] of its [`Features`]: the estimate
/// raised by the generation's recent 99th percentile error.
#[derive(Debug, Clone, PartialEq)]
pub struct ContentEstimate {
    /// The tokenizer generation's label.
    pub generation: Arc<str>,
    /// Its calibrator's state when frozen.
    pub snapshot: Snapshot,
}

impl ContentEstimate {
    fn count(&self, text: &str) -> u32 {
        self.snapshot.budget_tokens(&Features::of(text))
    }

    /// A lower bound of the count of any text holding `text` whole (a unit
    /// rendered around it): joining texts merges at most one run (of
    /// [`Features::RUNS`]) at each of the two joins.
    fn count_within_any(&self, text: &str) -> u32 {
        let c = &self.snapshot.coefficients.0;
        let merged = 2.0 * Features::RUNS.iter().map(|&i| c[i]).fold(0.0, f64::max);
        let estimate = self.snapshot.coefficients.estimate(&Features::of(text)) - merged;
        Snapshot::budget_of(estimate, self.snapshot.least_factor())
    }

    /// The most bytes a text counting at most `tokens` can hold: every
    /// character costs at least the smallest character coefficient (none
    /// when one is zero), and holds at most 4 bytes.
    fn most_bytes_within(&self, tokens: u32) -> usize {
        let c = &self.snapshot.coefficients.0;
        let least = [c[0], c[1], c[3], c[4], c[5], c[6]]
            .into_iter()
            .fold(f64::INFINITY, f64::min);
        if least <= 0.0 || !least.is_finite() {
            return usize::MAX;
        }
        let chars = (f64::from(tokens) / (least * self.snapshot.least_factor())).floor() + 1.0;
        // `as` saturates; the bound is finite and positive.
        (chars * 4.0).min(usize::MAX as f64) as usize
    }
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

    /// The hasher of the count key of a text of `len` bytes, keyed by this
    /// tokenizer's id ([`super::digest::TextHasher`]; a content estimate's
    /// by its generation, see `text_key`).
    pub fn text_hasher(&self, len: usize) -> super::digest::TextHasher {
        match self.content {
            // Learned counts are shared across a fleet: the same key on every CPU.
            Some(_) => super::digest::TextHasher::portable(&self.text_key, len),
            None => super::digest::TextHasher::new(&self.cache_key, len),
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

/// Whether `bytes` holds more than `limit` runs of non-whitespace (ASCII
/// whitespace separates them), eight bytes at a time: each byte's top bit
/// says whether it is not whitespace, computed for the eight at once
/// without carries between them, and a run starts at a set bit of an ASCII
/// byte whose byte before (the word before's last byte carried in) is
/// clear (see [`Tokenizer::surely_over`] for why ASCII). Stops in the word
/// where the count passes the limit.
fn runs_past(bytes: &[u8], limit: u32) -> bool {
    const LOW7: u64 = 0x7F7F_7F7F_7F7F_7F7F;
    const TOP: u64 = 0x8080_8080_8080_8080;
    const fn splat(b: u8) -> u64 {
        u64::from_le_bytes([b; 8])
    }
    /// The top bit of each byte that is not ASCII whitespace.
    fn not_space(word: u64) -> u64 {
        // Bytes of 0x80 and more are not whitespace; below it, adding to
        // the low seven bits never carries out of a byte.
        let low = word & LOW7;
        let at_least_tab = low + splat(0x80 - b'\t');
        let past_cr = low + splat(0x80 - (b'\r' + 1));
        let control = at_least_tab & !past_cr;
        let blank = !((low ^ splat(b' ')) + LOW7);
        let space = (control | blank) & !word & TOP;
        !space & TOP
    }
    let mut runs = 0u64;
    // The top bit of the byte before the word, when it is not whitespace.
    let mut carry = 0u64;
    let mut words = bytes.chunks_exact(8);
    for chunk in words.by_ref() {
        let mut le = [0u8; 8];
        le.copy_from_slice(chunk);
        let word = u64::from_le_bytes(le);
        let flags = not_space(word);
        // A start: an ASCII byte that is not whitespace after whitespace.
        let starts = flags & !word & !((flags << 8) | carry);
        runs += u64::from(starts.count_ones());
        if runs > u64::from(limit) {
            return true;
        }
        carry = flags >> 56;
    }
    let mut in_run = carry != 0;
    for &b in words.remainder() {
        let space = b == b' ' || b.wrapping_sub(b'\t') < 5;
        runs += u64::from(b.is_ascii() && !space && !in_run);
        in_run = !space;
    }
    runs > u64::from(limit)
}

#[cfg(test)]
pub(crate) mod tests;
