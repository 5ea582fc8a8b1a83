//! The public BPE encodings by name: the word [`super::pretok`] splits by
//! and [`super::tokenizer`] counts with. How an encoding counts (its
//! vocabulary, pre-tokenizer and BPE) is the tokenizer's, above the
//! pre-tokenizer: this module names nothing of the room, so both can.

/// A public BPE encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// gpt-4, gpt-3.5-turbo.
    Cl100kBase,
    /// gpt-4o, gpt-4.1, o-series, gpt-5.
    O200kBase,
}

impl Encoding {
    /// Every encoding.
    pub const ALL: [Encoding; 2] = [Encoding::Cl100kBase, Encoding::O200kBase];

    /// The encoding's name as OpenAI spells it.
    pub fn name(self) -> &'static str {
        match self {
            Encoding::Cl100kBase => "cl100k_base",
            Encoding::O200kBase => "o200k_base",
        }
    }

    /// Parses an encoding name.
    pub fn from_name(name: &str) -> Option<Self> {
        Encoding::ALL.into_iter().find(|e| e.name() == name)
    }
}
