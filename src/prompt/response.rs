//! The domain's output: the assembled prompt, its accounting and the decision report.

use super::request::{BlockKind, Thinking};
use crate::vocab::{Role, Warning};

/// One message of the assembled prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// Its role.
    pub role: Role,
    /// Its text.
    pub content: String,
    /// Calls an assistant turn makes.
    pub tool_call_ids: Vec<String>,
    /// The call a tool result answers.
    pub tool_call_id: String,
    /// An assistant turn's thinking, verbatim.
    pub thinking: Vec<Thinking>,
}

impl Message {
    /// A message without tool metadata.
    pub fn text(role: Role, content: String) -> Self {
        Message {
            role,
            content,
            tool_call_ids: Vec::new(),
            tool_call_id: String::new(),
            thinking: Vec::new(),
        }
    }
}

/// Token accounting under the chat formula.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Usage {
    /// The input budget applied.
    pub budget: u32,
    /// Tokens of the whole prompt: 3 + Σ (3 + role + content).
    pub total_tokens: u32,
    /// Tokens of the static prefix messages.
    pub static_tokens: u32,
    /// `total_tokens - static_tokens`.
    pub dynamic_tokens: u32,
    /// Tokenizer id, e.g. `o200k_base`.
    pub tokenizer: String,
    /// Whether counts are exact.
    pub exact: bool,
    /// Output reserve applied.
    pub output_reserve: u32,
    /// The model's context window.
    pub context_window: u32,
    /// Tokens of the tool definitions, reserved from the budget: what the
    /// provider bills for them when `tools_exact`, else their JSON text's
    /// count.
    pub tools_tokens: u32,
    /// Whether `tools_tokens` is what the provider bills (OpenAI's
    /// function-calling formula; a model folder's chat template).
    pub tools_exact: bool,
    /// Where `total_tokens` came from: counted by a public tokenizer, by
    /// the model's provider (pieces it counted, frames it measured), or
    /// estimated. They add up to `total_tokens`.
    pub sources: Sources,
}

/// Where a prompt's tokens came from (they add up to its total).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sources {
    /// Counted exactly by the model's public tokenizer.
    pub exact: u32,
    /// Counted by the model's provider: pieces it counted, frames it
    /// measured.
    pub provider: u32,
    /// Estimated.
    pub estimated: u32,
}

impl Sources {
    /// All of `total` counted by a public tokenizer, or all estimated.
    pub fn all(total: u32, exact: bool) -> Sources {
        match exact {
            true => Sources {
                exact: total,
                ..Sources::default()
            },
            false => Sources {
                estimated: total,
                ..Sources::default()
            },
        }
    }
}

/// Prompt-cache facts about the static prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheInfo {
    /// Lower-case hex blake3 of the rendered prefix.
    pub prefix_hash: String,
    /// Tokens of the prefix messages.
    pub prefix_tokens: u32,
    /// Bytes of the prefix contents.
    pub prefix_bytes: u64,
    /// Number of leading prefix messages.
    pub prefix_message_count: u32,
    /// Whether this prefix had been measured before.
    pub prefix_cache_hit: bool,
}

/// Where a prompt-cache breakpoint goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakpointKind {
    /// After the last tool definition (`index` into the tools).
    EndOfTools,
    /// After the last non-example static message (`index` into messages).
    EndOfSystem,
    /// After the last static examples message (`index` into messages).
    EndOfExamples,
    /// After the last conversation turn: stable in the session's next request.
    LastStableMessage,
}

/// An Anthropic/Bedrock-style cache breakpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Breakpoint {
    /// What it closes.
    pub kind: BreakpointKind,
    /// Index into the tools (`EndOfTools`) or the messages.
    pub index: u32,
}

/// Hints for provider, engine and router caches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheHints {
    /// The version of the rendering rules the prefix hash covers.
    pub prefix_version: String,
    /// At most 4, in prompt order.
    pub breakpoints: Vec<Breakpoint>,
    /// OpenAI `prompt_cache_key`: prefix hash plus a shard suffix.
    pub prompt_cache_key: String,
    /// A key for self-hosted cache-aware routers.
    pub affinity_key: String,
    /// Header names and values those routers read.
    pub routing_headers: Vec<(String, String)>,
    /// Prefix tokens floored to the engine's cache block size.
    pub engine_cacheable_tokens: u32,
    /// The provider's minimum cacheable prefix.
    pub provider_minimum_tokens: u32,
    /// Whether tools plus static prefix are below that minimum (nothing cached).
    pub below_provider_minimum: bool,
}

/// What happened to a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Every candidate kept in full.
    Kept,
    /// Some items compacted or dropped.
    Compacted,
    /// An item's text truncated at a sentence boundary.
    Truncated,
    /// Nothing kept.
    Dropped,
    /// Every item filtered by permission.
    Filtered,
}

impl Outcome {
    /// A stable lower-case name, used as a bounded metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Kept => "kept",
            Outcome::Compacted => "compacted",
            Outcome::Truncated => "truncated",
            Outcome::Dropped => "dropped",
            Outcome::Filtered => "filtered",
        }
    }
}

/// The decision for one block.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockDecision {
    /// Block name.
    pub name: String,
    /// Block kind.
    pub kind: BlockKind,
    /// Effective priority.
    pub priority: u32,
    /// What happened.
    pub outcome: Outcome,
    /// Tokens of all candidates in full form; a lower bound when
    /// `tokens_offered_is_lower_bound` (a context item counted only until
    /// it passed the room it was offered).
    pub tokens_offered: u32,
    /// Whether `tokens_offered` is a lower bound.
    pub tokens_offered_is_lower_bound: bool,
    /// Tokens of what was kept.
    pub tokens_kept: u32,
    /// Kept items, in block order.
    pub kept_item_ids: Vec<String>,
    /// Dropped candidates, in block order.
    pub dropped_item_ids: Vec<String>,
    /// Filtered items, in block order.
    pub filtered_item_ids: Vec<String>,
    /// Items kept in compact form.
    pub compacted_item_ids: Vec<String>,
    /// Dropped turns covered by the compaction summary (a subset of
    /// `dropped_item_ids`).
    pub summarized_item_ids: Vec<String>,
    /// Tokens of turns the room had space for but the conversation window
    /// gave up, so that the conversation is cut where the session's next
    /// requests cut it too (room left unused for the provider cache).
    pub tokens_window_unused: u32,
    /// Tool results kept with their content cleared (a placeholder, or the
    /// item's compact form, in its place; a subset of `kept_item_ids`).
    pub cleared_item_ids: Vec<String>,
    /// Assistant turns kept without their thinking (a closed tool cycle's,
    /// dropped as a whole; a subset of `kept_item_ids`).
    pub thinking_dropped_item_ids: Vec<String>,
    /// Tokens saved by clearing those results and dropping that thinking.
    pub tokens_cleared: u32,
    /// Why, in a few words.
    pub reason: String,
}

/// The assembled prompt and everything said about it.
#[derive(Debug, Clone, PartialEq)]
pub struct Assembly {
    /// Echo of the request id.
    pub request_id: String,
    /// The model table entry used.
    pub model: String,
    /// Messages in final order.
    pub messages: Vec<Message>,
    /// Accounting.
    pub usage: Usage,
    /// Static-prefix cache facts.
    pub cache: CacheInfo,
    /// One per block, in request order.
    pub decisions: Vec<BlockDecision>,
    /// Observations.
    pub warnings: Vec<Warning>,
    /// The tool definitions as canonical JSON, in the given order.
    pub tools: Vec<String>,
    /// Cache hints.
    pub hints: CacheHints,
    /// The prompt's token ids and engine block keys, when asked for and
    /// the model has a folder.
    pub token_ids: Option<TokenIds>,
    /// The cache plan in the provider's own terms (boxed, as is the
    /// divergence: an assembly travels by value through the pipeline).
    pub cache_plan: Box<super::CachePlan>,
    /// The prompt's fingerprint (hashes and counts of its parts).
    pub fingerprint: Vec<u8>,
    /// Where the prompt first differs from the previous one, when the
    /// request sent that one's fingerprint.
    pub divergence: Option<Box<super::Divergence>>,
}

/// The assembled prompt as the engine tokenizes it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TokenIds {
    /// The messages (and tools) rendered with the chat template and
    /// tokenized, as the engine does.
    pub ids: Vec<u32>,
    /// The key of each full block of `block_tokens` ids (llm-d's scheme).
    pub block_keys: Vec<u64>,
    /// The engine's cache block size.
    pub block_tokens: u32,
}
