//! What the response says about provider caches beyond the hints: the cache
//! plan in the provider's own terms, and where a prompt first differs from
//! the previous one of its session. Plain values; `crate::prompt_cache`
//! computes them.

/// A prompt's cache plan in its provider's own terms.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CachePlan {
    /// The provider or engine (`openai`, `anthropic`, `bedrock`, `gemini`,
    /// `vllm`, `sglang`, `trtllm`).
    pub provider: &'static str,
    /// The markers, in prompt order (tools first).
    pub markers: Vec<Marker>,
    /// Request-level fields (e.g. OpenAI's `prompt_cache_options`).
    pub request_fields: Vec<ProviderField>,
    /// Tokens a repeat of this prefix can read from the provider's cache.
    pub cacheable_tokens: u32,
}

/// Where a marker goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerTarget {
    /// On the tool definition of this index (the last one).
    Tool(u32),
    /// On the message of this index (its last content block).
    Message(u32),
}

/// A field of the provider's request, in the provider's own terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderField {
    /// The field's name (`cache_control`, `cachePoint`,
    /// `prompt_cache_breakpoint`, `prompt_cache_options`,
    /// `prompt_cache_retention`).
    pub name: String,
    /// Its value, as compact JSON.
    pub json: String,
}

/// One cache marker of a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    /// Which of the hints' breakpoints it is.
    pub kind: super::BreakpointKind,
    /// Where it goes.
    pub target: MarkerTarget,
    /// What to set there.
    pub field: ProviderField,
    /// Its lifetime in seconds, when the provider takes one.
    pub ttl_seconds: Option<u32>,
    /// Tokens of the prompt through the marked place.
    pub prefix_tokens: u32,
    /// Whether it takes effect (its field is to be sent).
    pub effective: bool,
    /// Why it does not take effect, or, on an effective marker,
    /// [`Ineffective::TtlOrder`] when its lifetime was lowered.
    pub reason: Option<Ineffective>,
}

/// Why a marker does not take effect as asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ineffective {
    /// Its prefix is below the provider's minimum: nothing is cached.
    BelowMinimum,
    /// More markers than the provider takes; this one is left out.
    OverBreakpointLimit,
    /// A longer lifetime may not follow a shorter one: this marker's was
    /// lowered to the one before it (the marker still takes effect).
    TtlOrder,
    /// A volatile value lies at or before it: its prefix changes every
    /// request, so it never hits.
    VolatileBefore,
    /// On the last turn's marker, after an append: more blocks were added
    /// since the session's previous request than the provider looks back
    /// over, so that request's entry is not found (the marker still takes
    /// effect: it writes the entry the next request reads).
    LookbackExceeded,
}

impl std::fmt::Display for Ineffective {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Ineffective {
    /// A stable lower-case name (a bounded metric label).
    pub fn as_str(self) -> &'static str {
        match self {
            Ineffective::BelowMinimum => "below_minimum",
            Ineffective::OverBreakpointLimit => "over_breakpoint_limit",
            Ineffective::TtlOrder => "ttl_order",
            Ineffective::VolatileBefore => "volatile_before",
            Ineffective::LookbackExceeded => "lookback_exceeded",
        }
    }
}

/// The kinds of part of an assembled prompt, in prompt order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PartKind {
    /// The tool definitions, as one part.
    Tools,
    /// A static system segment.
    System,
    /// A static examples segment.
    Examples,
    /// The summary message.
    Summary,
    /// A conversation turn (or a call and its results, kept together).
    Turn,
    /// An evidence item of the context message.
    Evidence,
    /// A memory item of the context message.
    Memory,
    /// A state item of the context message.
    State,
    /// The query.
    Query,
}

impl PartKind {
    /// Every kind, in prompt order.
    pub const ALL: [PartKind; 9] = [
        PartKind::Tools,
        PartKind::System,
        PartKind::Examples,
        PartKind::Summary,
        PartKind::Turn,
        PartKind::Evidence,
        PartKind::Memory,
        PartKind::State,
        PartKind::Query,
    ];

    /// A stable lower-case name (a bounded metric label).
    pub fn as_str(self) -> &'static str {
        match self {
            PartKind::Tools => "tools",
            PartKind::System => "system",
            PartKind::Examples => "examples",
            PartKind::Summary => "summary",
            PartKind::Turn => "turn",
            PartKind::Evidence => "evidence",
            PartKind::Memory => "memory",
            PartKind::State => "state",
            PartKind::Query => "query",
        }
    }
}

/// What kind of change a divergence is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Change {
    /// The prompts are identical.
    None,
    /// The previous conversation is kept whole and new turns follow it.
    Appended,
    /// Another model, tokenizer or cache salt.
    ModelChanged,
    /// The tool definitions changed.
    ToolsChanged,
    /// A static segment changed.
    SystemChanged,
    /// A static segment holding a volatile value changed.
    VolatileValue,
    /// The conversation window moved: the previous prompt's leading turns
    /// are gone or summarized.
    WindowStep,
    /// The summary message changed.
    SummaryChanged,
    /// An earlier turn was edited, inserted or removed.
    TurnChanged,
    /// Context items in another order.
    ItemReordered,
    /// A context item of the previous prompt is gone.
    ItemRemoved,
    /// A new memory, evidence or state item in the context (an edited item
    /// is a new one).
    ItemAdded,
    /// Only the query differs.
    QueryChanged,
}

impl Change {
    /// Every change, for metric descriptions.
    pub const ALL: [Change; 13] = [
        Change::None,
        Change::Appended,
        Change::ModelChanged,
        Change::ToolsChanged,
        Change::SystemChanged,
        Change::VolatileValue,
        Change::WindowStep,
        Change::SummaryChanged,
        Change::TurnChanged,
        Change::ItemReordered,
        Change::ItemRemoved,
        Change::ItemAdded,
        Change::QueryChanged,
    ];

    /// A stable lower-case name (a bounded metric label).
    pub fn as_str(self) -> &'static str {
        match self {
            Change::None => "none",
            Change::Appended => "appended",
            Change::ModelChanged => "model_changed",
            Change::ToolsChanged => "tools_changed",
            Change::SystemChanged => "system_changed",
            Change::VolatileValue => "volatile_value",
            Change::WindowStep => "window_step",
            Change::SummaryChanged => "summary_changed",
            Change::TurnChanged => "turn_changed",
            Change::ItemReordered => "item_reordered",
            Change::ItemRemoved => "item_removed",
            Change::ItemAdded => "item_added",
            Change::QueryChanged => "query_changed",
        }
    }

    /// Whether the change breaks what a provider cache had of the previous
    /// prompt's prefix (identical prompts, appended turns and a new query
    /// break nothing a cache holds).
    pub fn breaks_prefix(self) -> bool {
        !matches!(self, Change::None | Change::Appended | Change::QueryChanged)
    }
}

/// Where a prompt first differs from the previous one of its session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Divergence {
    /// What changed.
    pub change: Change,
    /// The kind of part where they first differ (none when identical).
    pub kind: Option<PartKind>,
    /// That part's id in the new prompt ("" for tools, summary, query).
    pub id: String,
    /// The index of the message holding it (0 when identical).
    pub message_index: u32,
    /// Its index among the new prompt's parts; the number of parts when the
    /// prompts are identical or the new prompt ends there.
    pub part_index: u32,
    /// Tokens both prompts share before the first difference: never more
    /// than the true offset, and exact unless the difference is inside a
    /// group.
    pub token_offset: u32,
    /// Of those, what the provider's cache can still serve (set by the
    /// caller of the comparison, from the plan's rules).
    pub servable_tokens: u32,
}
