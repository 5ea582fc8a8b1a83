//! Counting with a public encoding: [`pretok`]'s pieces, each one token
//! when the vocabulary holds it whole, else bpe-openai's encoder; and the
//! tables of each encoding (its single tokens, longest token, role names'
//! counts), built once.

use std::sync::OnceLock;

use crate::tokens::encoding::Encoding;
use crate::tokens::pretok;
use crate::tokens::singles::Singles;
use crate::vocab::{Role, saturating_u32};

impl Encoding {
    /// bpe-openai's tokenizer of the encoding: its vocabulary, regex split
    /// and encoder.
    pub(super) fn bpe(self) -> &'static bpe_openai::Tokenizer {
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
    pub(super) fn count(self, text: &str) -> usize {
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
    pub(super) fn count_till_limit(self, text: &str, limit: usize) -> Option<usize> {
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
    pub(super) fn prefixes_within(self, text: &str, ends: &[usize], base: usize, limit: usize) -> usize {
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
    pub(super) fn longest_token(self) -> usize {
        static CL100K: OnceLock<usize> = OnceLock::new();
        static O200K: OnceLock<usize> = OnceLock::new();
        let cell = match self {
            Encoding::Cl100kBase => &CL100K,
            Encoding::O200kBase => &O200K,
        };
        *cell.get_or_init(|| self.singles().longest().max(1))
    }

    /// Tokens of each role name, in [`Role::ALL`] order, counted once.
    pub(super) fn role_tokens(self) -> [u32; 4] {
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
