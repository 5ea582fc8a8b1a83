//! The domain's input: what a gateway asks to have assembled, free of wire types.

use std::collections::HashSet;

use crate::vocab::Role;

/// Most `required_scopes` per item. Generous (an item names a few scopes);
/// the bound keeps permission checks and their error reports small.
pub const MAX_SCOPES_PER_ITEM: usize = 256;

/// Most scopes a principal may hold in one request.
pub const MAX_PRINCIPAL_SCOPES: usize = 4096;

/// Most `tool_call_ids` per item (calls one assistant turn makes).
pub const MAX_TOOL_CALL_IDS_PER_MESSAGE: usize = 4096;

/// Longest `tool_name` of an item (and of a policy's `exclude_tools`).
pub const MAX_TOOL_NAME_BYTES: usize = 256;

/// Most thinking blocks per assistant turn (interleaved thinking writes one
/// per step of a turn; a few dozen is generous).
pub const MAX_THINKING_PER_MESSAGE: usize = 256;

/// Reasoning an assistant turn carries: Anthropic's extended thinking with
/// its signature (or a redacted block), another provider's reasoning
/// content. Passed back verbatim, never escaped, clipped or summarized, and
/// always with the turn that holds it: dropped as a whole or kept as a
/// whole.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Thinking {
    /// The reasoning text; for a redacted block, its opaque data.
    pub text: String,
    /// The provider's signature over it (empty: none), passed back unchanged.
    pub signature: String,
    /// A redacted block (Anthropic's `redacted_thinking`): `text` is the
    /// provider's encrypted data, never counted as text the model reads.
    pub redacted: bool,
}

/// What a static segment holds (informational: all are rendered alike).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentKind {
    /// System instructions.
    System,
    /// Safety or business policy.
    Policy,
    /// Output schema or format spec.
    OutputSchema,
    /// Stable few-shot examples.
    Examples,
}

/// One part of the cacheable static prefix; never cut, rendered verbatim.
#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    /// Caller's id (not rendered).
    pub id: String,
    /// What it holds.
    pub kind: SegmentKind,
    /// The text, rendered byte for byte as one system message.
    pub content: String,
}

/// The kind of a variable block: chooses default priority, cuttability,
/// compaction rule and placement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BlockKind {
    /// Critical application state: priority 4, never cut by default.
    State,
    /// Retrieved evidence: priority 5, cut lowest-scored first.
    Evidence,
    /// Recalled memory / profile: priority 6, cut lowest-scored first.
    Memory,
    /// Conversation summary: priority 7, compact form, else sentence truncation.
    Summary,
    /// Recent verbatim turns: priority 8, cut oldest turn first.
    RecentTurns,
    /// Older verbatim turns: priority 9, cut oldest turn first.
    History,
}

impl BlockKind {
    /// Every kind, for metrics descriptions and tests.
    pub const ALL: [BlockKind; 6] = [
        BlockKind::State,
        BlockKind::Evidence,
        BlockKind::Memory,
        BlockKind::Summary,
        BlockKind::RecentTurns,
        BlockKind::History,
    ];

    /// The kind's default priority (lower is kept first).
    pub fn default_priority(self) -> u32 {
        match self {
            BlockKind::State => 4,
            BlockKind::Evidence => 5,
            BlockKind::Memory => 6,
            BlockKind::Summary => 7,
            BlockKind::RecentTurns => 8,
            BlockKind::History => 9,
        }
    }

    /// Whether blocks of this kind may be cut unless the caller says otherwise.
    pub fn default_cuttable(self) -> bool {
        !matches!(self, BlockKind::State)
    }

    /// Whether items of this kind are conversation turns (own messages, own roles).
    pub fn is_turns(self) -> bool {
        matches!(self, BlockKind::RecentTurns | BlockKind::History)
    }

    /// A stable lower-case name, used as a bounded metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            BlockKind::State => "state",
            BlockKind::Evidence => "evidence",
            BlockKind::Memory => "memory",
            BlockKind::Summary => "summary",
            BlockKind::RecentTurns => "recent_turns",
            BlockKind::History => "history",
        }
    }
}

/// One item of a block: a document, memory, fact or conversation turn.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Item {
    /// Unique within its block.
    pub id: String,
    /// The text.
    pub content: String,
    /// Relevance, higher is better.
    pub score: f64,
    /// Where it came from (rendered as an attribute when not empty).
    pub source: String,
    /// Whether the application vouches for the content.
    pub trusted: bool,
    /// Scopes the principal must all hold, or the item is filtered.
    pub required_scopes: Vec<String>,
    /// Turn role (turn kinds only).
    pub role: Option<Role>,
    /// Calls an assistant turn makes.
    pub tool_call_ids: Vec<String>,
    /// The call a tool result answers.
    pub tool_call_id: String,
    /// A shorter text used before the item is dropped.
    pub compact_form: Option<String>,
    /// The tool that produced a tool result (for the policy's
    /// `exclude_tools`; empty: not named).
    pub tool_name: String,
    /// An assistant turn's thinking, in order.
    pub thinking: Vec<Thinking>,
}

/// A variable block, with caller options not yet resolved against its kind.
#[derive(Debug, Clone, PartialEq)]
pub struct Block {
    /// Unique name within the request.
    pub name: String,
    /// What it holds.
    pub kind: BlockKind,
    /// 1 = highest; 0 = the kind's default.
    pub priority: u32,
    /// `None` = the kind's default.
    pub cuttable: Option<bool>,
    /// Floor below which a cut block is dropped entirely.
    pub min_tokens: u32,
    /// Ceiling on the block's kept tokens; 0 = none.
    pub max_tokens: u32,
    /// Items in caller order (chronological for turns).
    pub items: Vec<Item>,
}

impl Block {
    /// A block with the kind's defaults (priority, cuttability, no limits).
    pub fn new(name: impl Into<String>, kind: BlockKind, items: Vec<Item>) -> Self {
        Block {
            name: name.into(),
            kind,
            priority: 0,
            cuttable: None,
            min_tokens: 0,
            max_tokens: 0,
            items,
        }
    }

    /// Whether the block may be cut, after applying the kind's default.
    pub fn effective_cuttable(&self) -> bool {
        self.cuttable.unwrap_or_else(|| self.kind.default_cuttable())
    }

    /// The block's token ceiling, if any.
    pub fn max_tokens(&self) -> Option<u32> {
        (self.max_tokens > 0).then_some(self.max_tokens)
    }
}

/// Who is asking.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Principal {
    /// Caller's id (never rendered).
    pub id: String,
    /// Scopes held.
    pub scopes: Vec<String>,
}

impl Principal {
    /// The scopes held, as a set: build it once per request, so that checking
    /// an item costs its own required scopes, not their product with these.
    pub fn held(&self) -> HeldScopes<'_> {
        HeldScopes(self.scopes.iter().map(String::as_str).collect())
    }
}

/// The scopes a [`Principal`] holds, for membership tests.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HeldScopes<'a>(HashSet<&'a str>);

impl HeldScopes<'_> {
    /// Whether every scope in `required` is held.
    pub fn permit(&self, required: &[String]) -> bool {
        required.iter().all(|r| self.0.contains(r.as_str()))
    }
}

/// A request to assemble one prompt.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AssembleRequest {
    /// Echoed back and logged.
    pub request_id: String,
    /// Model name or a known prefix of one.
    pub model: String,
    /// Input budget override.
    pub max_input_tokens: Option<u32>,
    /// Output reserve override.
    pub output_reserve: Option<u32>,
    /// The static prefix, in order.
    pub static_segments: Vec<Segment>,
    /// The variable blocks.
    pub blocks: Vec<Block>,
    /// The current question; rendered last.
    pub query: String,
    /// Who is asking.
    pub principal: Principal,
    /// Logged, never rendered.
    pub session_id: String,
    /// Named policy (empty = `default`).
    pub policy: String,
    /// Tool definitions, one JSON object each, in the order to send them.
    pub tools: Vec<String>,
    /// Partitions provider and engine caches (e.g. per tenant): requests
    /// with different salts are never grouped together.
    pub cache_salt: String,
    /// The prefix family the request belongs to (for cache-busting metrics).
    pub prefix_family: String,
    /// Whether the answer carries the prompt's token ids and engine block
    /// keys ([`super::TokenIds`]).
    pub return_token_ids: bool,
    /// The fingerprint of the session's previous answer (empty: none): the
    /// answer then says where this prompt first differs from that one.
    pub previous_fingerprint: Vec<u8>,
    /// The cache lifetime asked of the provider ("5m", "1h"; empty: its
    /// default).
    pub cache_ttl: String,
    /// The prompt ends with its conversation's newest turn instead of a
    /// query: an edge fitting a provider's request (which may end with tool
    /// results or an assistant prefill) pins that turn in a block that may
    /// not be cut, and leaves `query` empty. No query message is rendered.
    pub no_query: bool,
}
