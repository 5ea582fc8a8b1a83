from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Role(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ROLE_UNSPECIFIED: _ClassVar[Role]
    ROLE_SYSTEM: _ClassVar[Role]
    ROLE_USER: _ClassVar[Role]
    ROLE_ASSISTANT: _ClassVar[Role]
    ROLE_TOOL: _ClassVar[Role]

class SegmentKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SEGMENT_KIND_UNSPECIFIED: _ClassVar[SegmentKind]
    SEGMENT_KIND_SYSTEM: _ClassVar[SegmentKind]
    SEGMENT_KIND_POLICY: _ClassVar[SegmentKind]
    SEGMENT_KIND_OUTPUT_SCHEMA: _ClassVar[SegmentKind]
    SEGMENT_KIND_EXAMPLES: _ClassVar[SegmentKind]

class BlockKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BLOCK_KIND_UNSPECIFIED: _ClassVar[BlockKind]
    BLOCK_KIND_STATE: _ClassVar[BlockKind]
    BLOCK_KIND_EVIDENCE: _ClassVar[BlockKind]
    BLOCK_KIND_MEMORY: _ClassVar[BlockKind]
    BLOCK_KIND_SUMMARY: _ClassVar[BlockKind]
    BLOCK_KIND_RECENT_TURNS: _ClassVar[BlockKind]
    BLOCK_KIND_HISTORY: _ClassVar[BlockKind]

class Outcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OUTCOME_UNSPECIFIED: _ClassVar[Outcome]
    OUTCOME_KEPT: _ClassVar[Outcome]
    OUTCOME_COMPACTED: _ClassVar[Outcome]
    OUTCOME_TRUNCATED: _ClassVar[Outcome]
    OUTCOME_DROPPED: _ClassVar[Outcome]
    OUTCOME_FILTERED: _ClassVar[Outcome]

class BreakpointKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BREAKPOINT_KIND_UNSPECIFIED: _ClassVar[BreakpointKind]
    BREAKPOINT_KIND_END_OF_TOOLS: _ClassVar[BreakpointKind]
    BREAKPOINT_KIND_END_OF_SYSTEM: _ClassVar[BreakpointKind]
    BREAKPOINT_KIND_END_OF_EXAMPLES: _ClassVar[BreakpointKind]
    BREAKPOINT_KIND_LAST_STABLE_MESSAGE: _ClassVar[BreakpointKind]

class MarkerIneffective(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MARKER_INEFFECTIVE_UNSPECIFIED: _ClassVar[MarkerIneffective]
    MARKER_INEFFECTIVE_BELOW_MINIMUM: _ClassVar[MarkerIneffective]
    MARKER_INEFFECTIVE_OVER_BREAKPOINT_LIMIT: _ClassVar[MarkerIneffective]
    MARKER_INEFFECTIVE_TTL_ORDER: _ClassVar[MarkerIneffective]
    MARKER_INEFFECTIVE_VOLATILE_BEFORE: _ClassVar[MarkerIneffective]
    MARKER_INEFFECTIVE_LOOKBACK_EXCEEDED: _ClassVar[MarkerIneffective]

class CacheChange(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CACHE_CHANGE_UNSPECIFIED: _ClassVar[CacheChange]
    CACHE_CHANGE_NONE: _ClassVar[CacheChange]
    CACHE_CHANGE_APPENDED: _ClassVar[CacheChange]
    CACHE_CHANGE_MODEL_CHANGED: _ClassVar[CacheChange]
    CACHE_CHANGE_TOOLS_CHANGED: _ClassVar[CacheChange]
    CACHE_CHANGE_SYSTEM_CHANGED: _ClassVar[CacheChange]
    CACHE_CHANGE_VOLATILE_VALUE: _ClassVar[CacheChange]
    CACHE_CHANGE_WINDOW_STEP: _ClassVar[CacheChange]
    CACHE_CHANGE_SUMMARY_CHANGED: _ClassVar[CacheChange]
    CACHE_CHANGE_TURN_CHANGED: _ClassVar[CacheChange]
    CACHE_CHANGE_ITEM_REORDERED: _ClassVar[CacheChange]
    CACHE_CHANGE_ITEM_REMOVED: _ClassVar[CacheChange]
    CACHE_CHANGE_ITEM_ADDED: _ClassVar[CacheChange]
    CACHE_CHANGE_QUERY_CHANGED: _ClassVar[CacheChange]

class PromptPart(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PROMPT_PART_UNSPECIFIED: _ClassVar[PromptPart]
    PROMPT_PART_TOOLS: _ClassVar[PromptPart]
    PROMPT_PART_SYSTEM: _ClassVar[PromptPart]
    PROMPT_PART_EXAMPLES: _ClassVar[PromptPart]
    PROMPT_PART_SUMMARY: _ClassVar[PromptPart]
    PROMPT_PART_TURN: _ClassVar[PromptPart]
    PROMPT_PART_EVIDENCE: _ClassVar[PromptPart]
    PROMPT_PART_MEMORY: _ClassVar[PromptPart]
    PROMPT_PART_STATE: _ClassVar[PromptPart]
    PROMPT_PART_QUERY: _ClassVar[PromptPart]

class CompactOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    COMPACT_OUTCOME_UNSPECIFIED: _ClassVar[CompactOutcome]
    COMPACT_OUTCOME_COMPACTED: _ClassVar[CompactOutcome]
    COMPACT_OUTCOME_COMPACTED_OVER_TARGET: _ClassVar[CompactOutcome]
    COMPACT_OUTCOME_BELOW_TRIGGER: _ClassVar[CompactOutcome]
    COMPACT_OUTCOME_NOTHING_TO_COMPACT: _ClassVar[CompactOutcome]
    COMPACT_OUTCOME_BREAKER_TRIMMED: _ClassVar[CompactOutcome]
    COMPACT_OUTCOME_EMERGENCY_TRIMMED: _ClassVar[CompactOutcome]
ROLE_UNSPECIFIED: Role
ROLE_SYSTEM: Role
ROLE_USER: Role
ROLE_ASSISTANT: Role
ROLE_TOOL: Role
SEGMENT_KIND_UNSPECIFIED: SegmentKind
SEGMENT_KIND_SYSTEM: SegmentKind
SEGMENT_KIND_POLICY: SegmentKind
SEGMENT_KIND_OUTPUT_SCHEMA: SegmentKind
SEGMENT_KIND_EXAMPLES: SegmentKind
BLOCK_KIND_UNSPECIFIED: BlockKind
BLOCK_KIND_STATE: BlockKind
BLOCK_KIND_EVIDENCE: BlockKind
BLOCK_KIND_MEMORY: BlockKind
BLOCK_KIND_SUMMARY: BlockKind
BLOCK_KIND_RECENT_TURNS: BlockKind
BLOCK_KIND_HISTORY: BlockKind
OUTCOME_UNSPECIFIED: Outcome
OUTCOME_KEPT: Outcome
OUTCOME_COMPACTED: Outcome
OUTCOME_TRUNCATED: Outcome
OUTCOME_DROPPED: Outcome
OUTCOME_FILTERED: Outcome
BREAKPOINT_KIND_UNSPECIFIED: BreakpointKind
BREAKPOINT_KIND_END_OF_TOOLS: BreakpointKind
BREAKPOINT_KIND_END_OF_SYSTEM: BreakpointKind
BREAKPOINT_KIND_END_OF_EXAMPLES: BreakpointKind
BREAKPOINT_KIND_LAST_STABLE_MESSAGE: BreakpointKind
MARKER_INEFFECTIVE_UNSPECIFIED: MarkerIneffective
MARKER_INEFFECTIVE_BELOW_MINIMUM: MarkerIneffective
MARKER_INEFFECTIVE_OVER_BREAKPOINT_LIMIT: MarkerIneffective
MARKER_INEFFECTIVE_TTL_ORDER: MarkerIneffective
MARKER_INEFFECTIVE_VOLATILE_BEFORE: MarkerIneffective
MARKER_INEFFECTIVE_LOOKBACK_EXCEEDED: MarkerIneffective
CACHE_CHANGE_UNSPECIFIED: CacheChange
CACHE_CHANGE_NONE: CacheChange
CACHE_CHANGE_APPENDED: CacheChange
CACHE_CHANGE_MODEL_CHANGED: CacheChange
CACHE_CHANGE_TOOLS_CHANGED: CacheChange
CACHE_CHANGE_SYSTEM_CHANGED: CacheChange
CACHE_CHANGE_VOLATILE_VALUE: CacheChange
CACHE_CHANGE_WINDOW_STEP: CacheChange
CACHE_CHANGE_SUMMARY_CHANGED: CacheChange
CACHE_CHANGE_TURN_CHANGED: CacheChange
CACHE_CHANGE_ITEM_REORDERED: CacheChange
CACHE_CHANGE_ITEM_REMOVED: CacheChange
CACHE_CHANGE_ITEM_ADDED: CacheChange
CACHE_CHANGE_QUERY_CHANGED: CacheChange
PROMPT_PART_UNSPECIFIED: PromptPart
PROMPT_PART_TOOLS: PromptPart
PROMPT_PART_SYSTEM: PromptPart
PROMPT_PART_EXAMPLES: PromptPart
PROMPT_PART_SUMMARY: PromptPart
PROMPT_PART_TURN: PromptPart
PROMPT_PART_EVIDENCE: PromptPart
PROMPT_PART_MEMORY: PromptPart
PROMPT_PART_STATE: PromptPart
PROMPT_PART_QUERY: PromptPart
COMPACT_OUTCOME_UNSPECIFIED: CompactOutcome
COMPACT_OUTCOME_COMPACTED: CompactOutcome
COMPACT_OUTCOME_COMPACTED_OVER_TARGET: CompactOutcome
COMPACT_OUTCOME_BELOW_TRIGGER: CompactOutcome
COMPACT_OUTCOME_NOTHING_TO_COMPACT: CompactOutcome
COMPACT_OUTCOME_BREAKER_TRIMMED: CompactOutcome
COMPACT_OUTCOME_EMERGENCY_TRIMMED: CompactOutcome

class Segment(_message.Message):
    __slots__ = ("id", "kind", "content")
    ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    id: str
    kind: SegmentKind
    content: str
    def __init__(self, id: _Optional[str] = ..., kind: _Optional[_Union[SegmentKind, str]] = ..., content: _Optional[str] = ...) -> None: ...

class Block(_message.Message):
    __slots__ = ("name", "kind", "priority", "cuttable", "min_tokens", "max_tokens", "items")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    CUTTABLE_FIELD_NUMBER: _ClassVar[int]
    MIN_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: BlockKind
    priority: int
    cuttable: bool
    min_tokens: int
    max_tokens: int
    items: _containers.RepeatedCompositeFieldContainer[Item]
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[_Union[BlockKind, str]] = ..., priority: _Optional[int] = ..., cuttable: _Optional[bool] = ..., min_tokens: _Optional[int] = ..., max_tokens: _Optional[int] = ..., items: _Optional[_Iterable[_Union[Item, _Mapping]]] = ...) -> None: ...

class Item(_message.Message):
    __slots__ = ("id", "content", "score", "source", "trusted", "required_scopes", "role", "tool_call_ids", "tool_call_id", "compact_form", "tool_name", "thinking")
    ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TRUSTED_FIELD_NUMBER: _ClassVar[int]
    REQUIRED_SCOPES_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_IDS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    COMPACT_FORM_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    THINKING_FIELD_NUMBER: _ClassVar[int]
    id: str
    content: str
    score: float
    source: str
    trusted: bool
    required_scopes: _containers.RepeatedScalarFieldContainer[str]
    role: Role
    tool_call_ids: _containers.RepeatedScalarFieldContainer[str]
    tool_call_id: str
    compact_form: str
    tool_name: str
    thinking: _containers.RepeatedCompositeFieldContainer[Thinking]
    def __init__(self, id: _Optional[str] = ..., content: _Optional[str] = ..., score: _Optional[float] = ..., source: _Optional[str] = ..., trusted: _Optional[bool] = ..., required_scopes: _Optional[_Iterable[str]] = ..., role: _Optional[_Union[Role, str]] = ..., tool_call_ids: _Optional[_Iterable[str]] = ..., tool_call_id: _Optional[str] = ..., compact_form: _Optional[str] = ..., tool_name: _Optional[str] = ..., thinking: _Optional[_Iterable[_Union[Thinking, _Mapping]]] = ...) -> None: ...

class Thinking(_message.Message):
    __slots__ = ("text", "signature", "redacted")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    REDACTED_FIELD_NUMBER: _ClassVar[int]
    text: str
    signature: str
    redacted: bool
    def __init__(self, text: _Optional[str] = ..., signature: _Optional[str] = ..., redacted: _Optional[bool] = ...) -> None: ...

class Principal(_message.Message):
    __slots__ = ("id", "scopes")
    ID_FIELD_NUMBER: _ClassVar[int]
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    id: str
    scopes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, id: _Optional[str] = ..., scopes: _Optional[_Iterable[str]] = ...) -> None: ...

class AssembleRequest(_message.Message):
    __slots__ = ("request_id", "model", "max_input_tokens", "output_reserve", "static_segments", "blocks", "query", "principal", "session_id", "policy", "tools", "cache_salt", "prefix_family", "recall", "return_token_ids", "previous_fingerprint", "cache_ttl")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MAX_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_RESERVE_FIELD_NUMBER: _ClassVar[int]
    STATIC_SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    CACHE_SALT_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FAMILY_FIELD_NUMBER: _ClassVar[int]
    RECALL_FIELD_NUMBER: _ClassVar[int]
    RETURN_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    CACHE_TTL_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    model: str
    max_input_tokens: int
    output_reserve: int
    static_segments: _containers.RepeatedCompositeFieldContainer[Segment]
    blocks: _containers.RepeatedCompositeFieldContainer[Block]
    query: str
    principal: Principal
    session_id: str
    policy: str
    tools: _containers.RepeatedScalarFieldContainer[str]
    cache_salt: str
    prefix_family: str
    recall: Recall
    return_token_ids: bool
    previous_fingerprint: bytes
    cache_ttl: str
    def __init__(self, request_id: _Optional[str] = ..., model: _Optional[str] = ..., max_input_tokens: _Optional[int] = ..., output_reserve: _Optional[int] = ..., static_segments: _Optional[_Iterable[_Union[Segment, _Mapping]]] = ..., blocks: _Optional[_Iterable[_Union[Block, _Mapping]]] = ..., query: _Optional[str] = ..., principal: _Optional[_Union[Principal, _Mapping]] = ..., session_id: _Optional[str] = ..., policy: _Optional[str] = ..., tools: _Optional[_Iterable[str]] = ..., cache_salt: _Optional[str] = ..., prefix_family: _Optional[str] = ..., recall: _Optional[_Union[Recall, _Mapping]] = ..., return_token_ids: _Optional[bool] = ..., previous_fingerprint: _Optional[bytes] = ..., cache_ttl: _Optional[str] = ...) -> None: ...

class Recall(_message.Message):
    __slots__ = ("subject", "query", "max_memories", "types", "block", "max_tokens", "priority")
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    MAX_MEMORIES_FIELD_NUMBER: _ClassVar[int]
    TYPES_FIELD_NUMBER: _ClassVar[int]
    BLOCK_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    subject: str
    query: str
    max_memories: int
    types: _containers.RepeatedScalarFieldContainer[str]
    block: str
    max_tokens: int
    priority: int
    def __init__(self, subject: _Optional[str] = ..., query: _Optional[str] = ..., max_memories: _Optional[int] = ..., types: _Optional[_Iterable[str]] = ..., block: _Optional[str] = ..., max_tokens: _Optional[int] = ..., priority: _Optional[int] = ...) -> None: ...

class RecallReport(_message.Message):
    __slots__ = ("block", "recalled_ids", "kept_ids", "dropped_ids")
    BLOCK_FIELD_NUMBER: _ClassVar[int]
    RECALLED_IDS_FIELD_NUMBER: _ClassVar[int]
    KEPT_IDS_FIELD_NUMBER: _ClassVar[int]
    DROPPED_IDS_FIELD_NUMBER: _ClassVar[int]
    block: str
    recalled_ids: _containers.RepeatedScalarFieldContainer[str]
    kept_ids: _containers.RepeatedScalarFieldContainer[str]
    dropped_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, block: _Optional[str] = ..., recalled_ids: _Optional[_Iterable[str]] = ..., kept_ids: _Optional[_Iterable[str]] = ..., dropped_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class Message(_message.Message):
    __slots__ = ("role", "content", "tool_call_ids", "tool_call_id", "thinking")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_IDS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    THINKING_FIELD_NUMBER: _ClassVar[int]
    role: Role
    content: str
    tool_call_ids: _containers.RepeatedScalarFieldContainer[str]
    tool_call_id: str
    thinking: _containers.RepeatedCompositeFieldContainer[Thinking]
    def __init__(self, role: _Optional[_Union[Role, str]] = ..., content: _Optional[str] = ..., tool_call_ids: _Optional[_Iterable[str]] = ..., tool_call_id: _Optional[str] = ..., thinking: _Optional[_Iterable[_Union[Thinking, _Mapping]]] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("budget", "total_tokens", "static_tokens", "dynamic_tokens", "tokenizer", "exact", "output_reserve", "context_window", "tools_tokens", "tools_exact", "tokens_exact", "tokens_provider", "tokens_estimated")
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STATIC_TOKENS_FIELD_NUMBER: _ClassVar[int]
    DYNAMIC_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_FIELD_NUMBER: _ClassVar[int]
    EXACT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_RESERVE_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_WINDOW_FIELD_NUMBER: _ClassVar[int]
    TOOLS_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOOLS_EXACT_FIELD_NUMBER: _ClassVar[int]
    TOKENS_EXACT_FIELD_NUMBER: _ClassVar[int]
    TOKENS_PROVIDER_FIELD_NUMBER: _ClassVar[int]
    TOKENS_ESTIMATED_FIELD_NUMBER: _ClassVar[int]
    budget: int
    total_tokens: int
    static_tokens: int
    dynamic_tokens: int
    tokenizer: str
    exact: bool
    output_reserve: int
    context_window: int
    tools_tokens: int
    tools_exact: bool
    tokens_exact: int
    tokens_provider: int
    tokens_estimated: int
    def __init__(self, budget: _Optional[int] = ..., total_tokens: _Optional[int] = ..., static_tokens: _Optional[int] = ..., dynamic_tokens: _Optional[int] = ..., tokenizer: _Optional[str] = ..., exact: _Optional[bool] = ..., output_reserve: _Optional[int] = ..., context_window: _Optional[int] = ..., tools_tokens: _Optional[int] = ..., tools_exact: _Optional[bool] = ..., tokens_exact: _Optional[int] = ..., tokens_provider: _Optional[int] = ..., tokens_estimated: _Optional[int] = ...) -> None: ...

class CacheInfo(_message.Message):
    __slots__ = ("prefix_hash", "prefix_tokens", "prefix_bytes", "prefix_message_count", "prefix_cache_hit")
    PREFIX_HASH_FIELD_NUMBER: _ClassVar[int]
    PREFIX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PREFIX_BYTES_FIELD_NUMBER: _ClassVar[int]
    PREFIX_MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    PREFIX_CACHE_HIT_FIELD_NUMBER: _ClassVar[int]
    prefix_hash: str
    prefix_tokens: int
    prefix_bytes: int
    prefix_message_count: int
    prefix_cache_hit: bool
    def __init__(self, prefix_hash: _Optional[str] = ..., prefix_tokens: _Optional[int] = ..., prefix_bytes: _Optional[int] = ..., prefix_message_count: _Optional[int] = ..., prefix_cache_hit: _Optional[bool] = ...) -> None: ...

class BlockDecision(_message.Message):
    __slots__ = ("name", "kind", "priority", "outcome", "tokens_offered", "tokens_kept", "kept_item_ids", "dropped_item_ids", "filtered_item_ids", "compacted_item_ids", "reason", "summarized_item_ids", "tokens_window_unused", "tokens_offered_is_lower_bound", "cleared_item_ids", "thinking_dropped_item_ids", "tokens_cleared")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    TOKENS_OFFERED_FIELD_NUMBER: _ClassVar[int]
    TOKENS_KEPT_FIELD_NUMBER: _ClassVar[int]
    KEPT_ITEM_IDS_FIELD_NUMBER: _ClassVar[int]
    DROPPED_ITEM_IDS_FIELD_NUMBER: _ClassVar[int]
    FILTERED_ITEM_IDS_FIELD_NUMBER: _ClassVar[int]
    COMPACTED_ITEM_IDS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SUMMARIZED_ITEM_IDS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_WINDOW_UNUSED_FIELD_NUMBER: _ClassVar[int]
    TOKENS_OFFERED_IS_LOWER_BOUND_FIELD_NUMBER: _ClassVar[int]
    CLEARED_ITEM_IDS_FIELD_NUMBER: _ClassVar[int]
    THINKING_DROPPED_ITEM_IDS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_CLEARED_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: BlockKind
    priority: int
    outcome: Outcome
    tokens_offered: int
    tokens_kept: int
    kept_item_ids: _containers.RepeatedScalarFieldContainer[str]
    dropped_item_ids: _containers.RepeatedScalarFieldContainer[str]
    filtered_item_ids: _containers.RepeatedScalarFieldContainer[str]
    compacted_item_ids: _containers.RepeatedScalarFieldContainer[str]
    reason: str
    summarized_item_ids: _containers.RepeatedScalarFieldContainer[str]
    tokens_window_unused: int
    tokens_offered_is_lower_bound: bool
    cleared_item_ids: _containers.RepeatedScalarFieldContainer[str]
    thinking_dropped_item_ids: _containers.RepeatedScalarFieldContainer[str]
    tokens_cleared: int
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[_Union[BlockKind, str]] = ..., priority: _Optional[int] = ..., outcome: _Optional[_Union[Outcome, str]] = ..., tokens_offered: _Optional[int] = ..., tokens_kept: _Optional[int] = ..., kept_item_ids: _Optional[_Iterable[str]] = ..., dropped_item_ids: _Optional[_Iterable[str]] = ..., filtered_item_ids: _Optional[_Iterable[str]] = ..., compacted_item_ids: _Optional[_Iterable[str]] = ..., reason: _Optional[str] = ..., summarized_item_ids: _Optional[_Iterable[str]] = ..., tokens_window_unused: _Optional[int] = ..., tokens_offered_is_lower_bound: _Optional[bool] = ..., cleared_item_ids: _Optional[_Iterable[str]] = ..., thinking_dropped_item_ids: _Optional[_Iterable[str]] = ..., tokens_cleared: _Optional[int] = ...) -> None: ...

class Warning(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class AssembleResponse(_message.Message):
    __slots__ = ("request_id", "model", "messages", "usage", "cache", "decisions", "warnings", "tools", "hints", "recall", "token_ids", "cache_plan", "fingerprint", "divergence")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    CACHE_FIELD_NUMBER: _ClassVar[int]
    DECISIONS_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    HINTS_FIELD_NUMBER: _ClassVar[int]
    RECALL_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    CACHE_PLAN_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    DIVERGENCE_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    model: str
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    usage: Usage
    cache: CacheInfo
    decisions: _containers.RepeatedCompositeFieldContainer[BlockDecision]
    warnings: _containers.RepeatedCompositeFieldContainer[Warning]
    tools: _containers.RepeatedScalarFieldContainer[str]
    hints: CacheHints
    recall: RecallReport
    token_ids: TokenIds
    cache_plan: CachePlan
    fingerprint: bytes
    divergence: Divergence
    def __init__(self, request_id: _Optional[str] = ..., model: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., cache: _Optional[_Union[CacheInfo, _Mapping]] = ..., decisions: _Optional[_Iterable[_Union[BlockDecision, _Mapping]]] = ..., warnings: _Optional[_Iterable[_Union[Warning, _Mapping]]] = ..., tools: _Optional[_Iterable[str]] = ..., hints: _Optional[_Union[CacheHints, _Mapping]] = ..., recall: _Optional[_Union[RecallReport, _Mapping]] = ..., token_ids: _Optional[_Union[TokenIds, _Mapping]] = ..., cache_plan: _Optional[_Union[CachePlan, _Mapping]] = ..., fingerprint: _Optional[bytes] = ..., divergence: _Optional[_Union[Divergence, _Mapping]] = ...) -> None: ...

class TokenIds(_message.Message):
    __slots__ = ("ids", "block_keys", "block_tokens")
    IDS_FIELD_NUMBER: _ClassVar[int]
    BLOCK_KEYS_FIELD_NUMBER: _ClassVar[int]
    BLOCK_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[int]
    block_keys: _containers.RepeatedScalarFieldContainer[int]
    block_tokens: int
    def __init__(self, ids: _Optional[_Iterable[int]] = ..., block_keys: _Optional[_Iterable[int]] = ..., block_tokens: _Optional[int] = ...) -> None: ...

class Breakpoint(_message.Message):
    __slots__ = ("kind", "index")
    KIND_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    kind: BreakpointKind
    index: int
    def __init__(self, kind: _Optional[_Union[BreakpointKind, str]] = ..., index: _Optional[int] = ...) -> None: ...

class RoutingHeader(_message.Message):
    __slots__ = ("name", "value")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: str
    def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class CacheHints(_message.Message):
    __slots__ = ("prefix_version", "breakpoints", "prompt_cache_key", "affinity_key", "routing_headers", "engine_cacheable_tokens", "provider_minimum_tokens", "below_provider_minimum")
    PREFIX_VERSION_FIELD_NUMBER: _ClassVar[int]
    BREAKPOINTS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_CACHE_KEY_FIELD_NUMBER: _ClassVar[int]
    AFFINITY_KEY_FIELD_NUMBER: _ClassVar[int]
    ROUTING_HEADERS_FIELD_NUMBER: _ClassVar[int]
    ENGINE_CACHEABLE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_MINIMUM_TOKENS_FIELD_NUMBER: _ClassVar[int]
    BELOW_PROVIDER_MINIMUM_FIELD_NUMBER: _ClassVar[int]
    prefix_version: str
    breakpoints: _containers.RepeatedCompositeFieldContainer[Breakpoint]
    prompt_cache_key: str
    affinity_key: str
    routing_headers: _containers.RepeatedCompositeFieldContainer[RoutingHeader]
    engine_cacheable_tokens: int
    provider_minimum_tokens: int
    below_provider_minimum: bool
    def __init__(self, prefix_version: _Optional[str] = ..., breakpoints: _Optional[_Iterable[_Union[Breakpoint, _Mapping]]] = ..., prompt_cache_key: _Optional[str] = ..., affinity_key: _Optional[str] = ..., routing_headers: _Optional[_Iterable[_Union[RoutingHeader, _Mapping]]] = ..., engine_cacheable_tokens: _Optional[int] = ..., provider_minimum_tokens: _Optional[int] = ..., below_provider_minimum: _Optional[bool] = ...) -> None: ...

class CachePlan(_message.Message):
    __slots__ = ("provider", "markers", "request_fields", "cacheable_tokens")
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    MARKERS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELDS_FIELD_NUMBER: _ClassVar[int]
    CACHEABLE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    provider: str
    markers: _containers.RepeatedCompositeFieldContainer[CacheMarker]
    request_fields: _containers.RepeatedCompositeFieldContainer[ProviderField]
    cacheable_tokens: int
    def __init__(self, provider: _Optional[str] = ..., markers: _Optional[_Iterable[_Union[CacheMarker, _Mapping]]] = ..., request_fields: _Optional[_Iterable[_Union[ProviderField, _Mapping]]] = ..., cacheable_tokens: _Optional[int] = ...) -> None: ...

class ProviderField(_message.Message):
    __slots__ = ("name", "json")
    NAME_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    name: str
    json: str
    def __init__(self, name: _Optional[str] = ..., json: _Optional[str] = ...) -> None: ...

class CacheMarker(_message.Message):
    __slots__ = ("tool_index", "message_index", "field", "ttl", "prefix_tokens", "effective", "reason", "kind")
    TOOL_INDEX_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_INDEX_FIELD_NUMBER: _ClassVar[int]
    FIELD_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    PREFIX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    EFFECTIVE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    tool_index: int
    message_index: int
    field: ProviderField
    ttl: str
    prefix_tokens: int
    effective: bool
    reason: MarkerIneffective
    kind: BreakpointKind
    def __init__(self, tool_index: _Optional[int] = ..., message_index: _Optional[int] = ..., field: _Optional[_Union[ProviderField, _Mapping]] = ..., ttl: _Optional[str] = ..., prefix_tokens: _Optional[int] = ..., effective: _Optional[bool] = ..., reason: _Optional[_Union[MarkerIneffective, str]] = ..., kind: _Optional[_Union[BreakpointKind, str]] = ...) -> None: ...

class Divergence(_message.Message):
    __slots__ = ("change", "part", "id", "message_index", "token_offset", "servable_tokens")
    CHANGE_FIELD_NUMBER: _ClassVar[int]
    PART_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_INDEX_FIELD_NUMBER: _ClassVar[int]
    TOKEN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SERVABLE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    change: CacheChange
    part: PromptPart
    id: str
    message_index: int
    token_offset: int
    servable_tokens: int
    def __init__(self, change: _Optional[_Union[CacheChange, str]] = ..., part: _Optional[_Union[PromptPart, str]] = ..., id: _Optional[str] = ..., message_index: _Optional[int] = ..., token_offset: _Optional[int] = ..., servable_tokens: _Optional[int] = ...) -> None: ...

class CountTokensRequest(_message.Message):
    __slots__ = ("model", "encoding", "text")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ENCODING_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    model: str
    encoding: str
    text: str
    def __init__(self, model: _Optional[str] = ..., encoding: _Optional[str] = ..., text: _Optional[str] = ...) -> None: ...

class CountTokensResponse(_message.Message):
    __slots__ = ("tokens", "tokenizer", "exact", "tokens_exact", "tokens_provider", "tokens_estimated")
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_FIELD_NUMBER: _ClassVar[int]
    EXACT_FIELD_NUMBER: _ClassVar[int]
    TOKENS_EXACT_FIELD_NUMBER: _ClassVar[int]
    TOKENS_PROVIDER_FIELD_NUMBER: _ClassVar[int]
    TOKENS_ESTIMATED_FIELD_NUMBER: _ClassVar[int]
    tokens: int
    tokenizer: str
    exact: bool
    tokens_exact: int
    tokens_provider: int
    tokens_estimated: int
    def __init__(self, tokens: _Optional[int] = ..., tokenizer: _Optional[str] = ..., exact: _Optional[bool] = ..., tokens_exact: _Optional[int] = ..., tokens_provider: _Optional[int] = ..., tokens_estimated: _Optional[int] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ModelInfo(_message.Message):
    __slots__ = ("name", "encoding", "context_window", "default_output_reserve", "exact", "estimate_margin_percent", "prefix", "tokenizer", "chat_template", "tokenizer_generation")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ENCODING_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_WINDOW_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_OUTPUT_RESERVE_FIELD_NUMBER: _ClassVar[int]
    EXACT_FIELD_NUMBER: _ClassVar[int]
    ESTIMATE_MARGIN_PERCENT_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_FIELD_NUMBER: _ClassVar[int]
    CHAT_TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_GENERATION_FIELD_NUMBER: _ClassVar[int]
    name: str
    encoding: str
    context_window: int
    default_output_reserve: int
    exact: bool
    estimate_margin_percent: int
    prefix: bool
    tokenizer: str
    chat_template: bool
    tokenizer_generation: str
    def __init__(self, name: _Optional[str] = ..., encoding: _Optional[str] = ..., context_window: _Optional[int] = ..., default_output_reserve: _Optional[int] = ..., exact: _Optional[bool] = ..., estimate_margin_percent: _Optional[int] = ..., prefix: _Optional[bool] = ..., tokenizer: _Optional[str] = ..., chat_template: _Optional[bool] = ..., tokenizer_generation: _Optional[str] = ...) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ("models",)
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[ModelInfo]
    def __init__(self, models: _Optional[_Iterable[_Union[ModelInfo, _Mapping]]] = ...) -> None: ...

class AssembleBatchRequest(_message.Message):
    __slots__ = ("requests",)
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[AssembleRequest]
    def __init__(self, requests: _Optional[_Iterable[_Union[AssembleRequest, _Mapping]]] = ...) -> None: ...

class BudgetOverflowDetail(_message.Message):
    __slots__ = ("model", "budget", "non_cuttable_tokens", "static_prefix_tokens", "tools_tokens", "query_tokens", "framing_tokens", "blocks", "more_blocks", "template_tokens")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    NON_CUTTABLE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STATIC_PREFIX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOOLS_TOKENS_FIELD_NUMBER: _ClassVar[int]
    QUERY_TOKENS_FIELD_NUMBER: _ClassVar[int]
    FRAMING_TOKENS_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    MORE_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    model: str
    budget: int
    non_cuttable_tokens: int
    static_prefix_tokens: int
    tools_tokens: int
    query_tokens: int
    framing_tokens: int
    blocks: _containers.RepeatedCompositeFieldContainer[BlockNeed]
    more_blocks: int
    template_tokens: int
    def __init__(self, model: _Optional[str] = ..., budget: _Optional[int] = ..., non_cuttable_tokens: _Optional[int] = ..., static_prefix_tokens: _Optional[int] = ..., tools_tokens: _Optional[int] = ..., query_tokens: _Optional[int] = ..., framing_tokens: _Optional[int] = ..., blocks: _Optional[_Iterable[_Union[BlockNeed, _Mapping]]] = ..., more_blocks: _Optional[int] = ..., template_tokens: _Optional[int] = ...) -> None: ...

class BlockNeed(_message.Message):
    __slots__ = ("name", "index", "kind", "tokens", "cuttable")
    NAME_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    CUTTABLE_FIELD_NUMBER: _ClassVar[int]
    name: str
    index: int
    kind: BlockKind
    tokens: int
    cuttable: bool
    def __init__(self, name: _Optional[str] = ..., index: _Optional[int] = ..., kind: _Optional[_Union[BlockKind, str]] = ..., tokens: _Optional[int] = ..., cuttable: _Optional[bool] = ...) -> None: ...

class RequestError(_message.Message):
    __slots__ = ("code", "message", "status_details")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STATUS_DETAILS_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    status_details: bytes
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ..., status_details: _Optional[bytes] = ...) -> None: ...

class AssembleResult(_message.Message):
    __slots__ = ("response", "error")
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    response: AssembleResponse
    error: RequestError
    def __init__(self, response: _Optional[_Union[AssembleResponse, _Mapping]] = ..., error: _Optional[_Union[RequestError, _Mapping]] = ...) -> None: ...

class BatchGroup(_message.Message):
    __slots__ = ("model", "tokenizer", "cache_salt", "prefix_hash", "members", "warmup", "shared_prefix_tokens", "tokens_saved")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_FIELD_NUMBER: _ClassVar[int]
    CACHE_SALT_FIELD_NUMBER: _ClassVar[int]
    PREFIX_HASH_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    WARMUP_FIELD_NUMBER: _ClassVar[int]
    SHARED_PREFIX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_SAVED_FIELD_NUMBER: _ClassVar[int]
    model: str
    tokenizer: str
    cache_salt: str
    prefix_hash: str
    members: _containers.RepeatedScalarFieldContainer[int]
    warmup: int
    shared_prefix_tokens: int
    tokens_saved: int
    def __init__(self, model: _Optional[str] = ..., tokenizer: _Optional[str] = ..., cache_salt: _Optional[str] = ..., prefix_hash: _Optional[str] = ..., members: _Optional[_Iterable[int]] = ..., warmup: _Optional[int] = ..., shared_prefix_tokens: _Optional[int] = ..., tokens_saved: _Optional[int] = ...) -> None: ...

class AssembleBatchResponse(_message.Message):
    __slots__ = ("results", "groups", "order")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[AssembleResult]
    groups: _containers.RepeatedCompositeFieldContainer[BatchGroup]
    order: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, results: _Optional[_Iterable[_Union[AssembleResult, _Mapping]]] = ..., groups: _Optional[_Iterable[_Union[BatchGroup, _Mapping]]] = ..., order: _Optional[_Iterable[int]] = ...) -> None: ...

class AssembleStreamResponse(_message.Message):
    __slots__ = ("index", "request_id", "result")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    index: int
    request_id: str
    result: AssembleResult
    def __init__(self, index: _Optional[int] = ..., request_id: _Optional[str] = ..., result: _Optional[_Union[AssembleResult, _Mapping]] = ...) -> None: ...

class ReportUsageRequest(_message.Message):
    __slots__ = ("request_id", "provider", "prompt_tokens", "cached_tokens", "cache_read_tokens", "cache_creation_tokens", "cache_write_tokens", "diagnostic", "answer")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHE_READ_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHE_CREATION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHE_WRITE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    DIAGNOSTIC_FIELD_NUMBER: _ClassVar[int]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    provider: str
    prompt_tokens: int
    cached_tokens: int
    cache_read_tokens: int
    cache_creation_tokens: int
    cache_write_tokens: int
    diagnostic: str
    answer: str
    def __init__(self, request_id: _Optional[str] = ..., provider: _Optional[str] = ..., prompt_tokens: _Optional[int] = ..., cached_tokens: _Optional[int] = ..., cache_read_tokens: _Optional[int] = ..., cache_creation_tokens: _Optional[int] = ..., cache_write_tokens: _Optional[int] = ..., diagnostic: _Optional[str] = ..., answer: _Optional[str] = ...) -> None: ...

class ReportUsageResponse(_message.Message):
    __slots__ = ("matched", "sidecar_tokens", "relative_error", "expected_cached_tokens", "cached_tokens", "missed_expected", "prefix_flagged")
    MATCHED_FIELD_NUMBER: _ClassVar[int]
    SIDECAR_TOKENS_FIELD_NUMBER: _ClassVar[int]
    RELATIVE_ERROR_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MISSED_EXPECTED_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FLAGGED_FIELD_NUMBER: _ClassVar[int]
    matched: bool
    sidecar_tokens: int
    relative_error: float
    expected_cached_tokens: int
    cached_tokens: int
    missed_expected: bool
    prefix_flagged: bool
    def __init__(self, matched: _Optional[bool] = ..., sidecar_tokens: _Optional[int] = ..., relative_error: _Optional[float] = ..., expected_cached_tokens: _Optional[int] = ..., cached_tokens: _Optional[int] = ..., missed_expected: _Optional[bool] = ..., prefix_flagged: _Optional[bool] = ...) -> None: ...

class ToolUse(_message.Message):
    __slots__ = ("id", "name", "input")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    input: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., input: _Optional[str] = ...) -> None: ...

class ToolResult(_message.Message):
    __slots__ = ("tool_use_id", "output", "is_error")
    TOOL_USE_ID_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    IS_ERROR_FIELD_NUMBER: _ClassVar[int]
    tool_use_id: str
    output: str
    is_error: bool
    def __init__(self, tool_use_id: _Optional[str] = ..., output: _Optional[str] = ..., is_error: _Optional[bool] = ...) -> None: ...

class ContentBlock(_message.Message):
    __slots__ = ("text", "tool_use", "tool_result", "thinking")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOOL_USE_FIELD_NUMBER: _ClassVar[int]
    TOOL_RESULT_FIELD_NUMBER: _ClassVar[int]
    THINKING_FIELD_NUMBER: _ClassVar[int]
    text: str
    tool_use: ToolUse
    tool_result: ToolResult
    thinking: Thinking
    def __init__(self, text: _Optional[str] = ..., tool_use: _Optional[_Union[ToolUse, _Mapping]] = ..., tool_result: _Optional[_Union[ToolResult, _Mapping]] = ..., thinking: _Optional[_Union[Thinking, _Mapping]] = ...) -> None: ...

class ConversationMessage(_message.Message):
    __slots__ = ("id", "role", "content")
    ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    id: str
    role: Role
    content: _containers.RepeatedCompositeFieldContainer[ContentBlock]
    def __init__(self, id: _Optional[str] = ..., role: _Optional[_Union[Role, str]] = ..., content: _Optional[_Iterable[_Union[ContentBlock, _Mapping]]] = ...) -> None: ...

class PinnedItem(_message.Message):
    __slots__ = ("id", "kind", "content")
    ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    id: str
    kind: str
    content: str
    def __init__(self, id: _Optional[str] = ..., kind: _Optional[str] = ..., content: _Optional[str] = ...) -> None: ...

class CompactRequest(_message.Message):
    __slots__ = ("request_id", "model", "session_id", "messages", "trigger_tokens", "target_tokens", "preserve_recent", "pinned", "context_length_exceeded", "cache_salt")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TARGET_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PRESERVE_RECENT_FIELD_NUMBER: _ClassVar[int]
    PINNED_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_LENGTH_EXCEEDED_FIELD_NUMBER: _ClassVar[int]
    CACHE_SALT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    model: str
    session_id: str
    messages: _containers.RepeatedCompositeFieldContainer[ConversationMessage]
    trigger_tokens: int
    target_tokens: int
    preserve_recent: int
    pinned: _containers.RepeatedCompositeFieldContainer[PinnedItem]
    context_length_exceeded: bool
    cache_salt: str
    def __init__(self, request_id: _Optional[str] = ..., model: _Optional[str] = ..., session_id: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[ConversationMessage, _Mapping]]] = ..., trigger_tokens: _Optional[int] = ..., target_tokens: _Optional[int] = ..., preserve_recent: _Optional[int] = ..., pinned: _Optional[_Iterable[_Union[PinnedItem, _Mapping]]] = ..., context_length_exceeded: _Optional[bool] = ..., cache_salt: _Optional[str] = ...) -> None: ...

class CompactProvenance(_message.Message):
    __slots__ = ("message_ids", "start", "end", "merged_summary_index")
    MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    MERGED_SUMMARY_INDEX_FIELD_NUMBER: _ClassVar[int]
    message_ids: _containers.RepeatedScalarFieldContainer[str]
    start: int
    end: int
    merged_summary_index: int
    def __init__(self, message_ids: _Optional[_Iterable[str]] = ..., start: _Optional[int] = ..., end: _Optional[int] = ..., merged_summary_index: _Optional[int] = ...) -> None: ...

class TrimStep(_message.Message):
    __slots__ = ("message_ids", "start", "end", "tokens_after")
    MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    TOKENS_AFTER_FIELD_NUMBER: _ClassVar[int]
    message_ids: _containers.RepeatedScalarFieldContainer[str]
    start: int
    end: int
    tokens_after: int
    def __init__(self, message_ids: _Optional[_Iterable[str]] = ..., start: _Optional[int] = ..., end: _Optional[int] = ..., tokens_after: _Optional[int] = ...) -> None: ...

class BreakerState(_message.Message):
    __slots__ = ("consecutive_failures", "open", "opened_now")
    CONSECUTIVE_FAILURES_FIELD_NUMBER: _ClassVar[int]
    OPEN_FIELD_NUMBER: _ClassVar[int]
    OPENED_NOW_FIELD_NUMBER: _ClassVar[int]
    consecutive_failures: int
    open: bool
    opened_now: bool
    def __init__(self, consecutive_failures: _Optional[int] = ..., open: _Optional[bool] = ..., opened_now: _Optional[bool] = ...) -> None: ...

class CompactResponse(_message.Message):
    __slots__ = ("request_id", "model", "messages", "compacted", "outcome", "reason", "tokens_before", "tokens_after", "trigger_tokens", "target_tokens", "preserve_recent", "tokenizer", "exact", "provenance", "summary_index", "trim_steps", "breaker", "warnings")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    COMPACTED_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    TOKENS_BEFORE_FIELD_NUMBER: _ClassVar[int]
    TOKENS_AFTER_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TARGET_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PRESERVE_RECENT_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_FIELD_NUMBER: _ClassVar[int]
    EXACT_FIELD_NUMBER: _ClassVar[int]
    PROVENANCE_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_INDEX_FIELD_NUMBER: _ClassVar[int]
    TRIM_STEPS_FIELD_NUMBER: _ClassVar[int]
    BREAKER_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    model: str
    messages: _containers.RepeatedCompositeFieldContainer[ConversationMessage]
    compacted: bool
    outcome: CompactOutcome
    reason: str
    tokens_before: int
    tokens_after: int
    trigger_tokens: int
    target_tokens: int
    preserve_recent: int
    tokenizer: str
    exact: bool
    provenance: CompactProvenance
    summary_index: int
    trim_steps: _containers.RepeatedCompositeFieldContainer[TrimStep]
    breaker: BreakerState
    warnings: _containers.RepeatedCompositeFieldContainer[Warning]
    def __init__(self, request_id: _Optional[str] = ..., model: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[ConversationMessage, _Mapping]]] = ..., compacted: _Optional[bool] = ..., outcome: _Optional[_Union[CompactOutcome, str]] = ..., reason: _Optional[str] = ..., tokens_before: _Optional[int] = ..., tokens_after: _Optional[int] = ..., trigger_tokens: _Optional[int] = ..., target_tokens: _Optional[int] = ..., preserve_recent: _Optional[int] = ..., tokenizer: _Optional[str] = ..., exact: _Optional[bool] = ..., provenance: _Optional[_Union[CompactProvenance, _Mapping]] = ..., summary_index: _Optional[int] = ..., trim_steps: _Optional[_Iterable[_Union[TrimStep, _Mapping]]] = ..., breaker: _Optional[_Union[BreakerState, _Mapping]] = ..., warnings: _Optional[_Iterable[_Union[Warning, _Mapping]]] = ...) -> None: ...

class Observation(_message.Message):
    __slots__ = ("type", "title", "text", "facts", "files_read", "files_modified")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    FACTS_FIELD_NUMBER: _ClassVar[int]
    FILES_READ_FIELD_NUMBER: _ClassVar[int]
    FILES_MODIFIED_FIELD_NUMBER: _ClassVar[int]
    type: str
    title: str
    text: str
    facts: _containers.RepeatedScalarFieldContainer[str]
    files_read: _containers.RepeatedScalarFieldContainer[str]
    files_modified: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, type: _Optional[str] = ..., title: _Optional[str] = ..., text: _Optional[str] = ..., facts: _Optional[_Iterable[str]] = ..., files_read: _Optional[_Iterable[str]] = ..., files_modified: _Optional[_Iterable[str]] = ...) -> None: ...

class SessionSummary(_message.Message):
    __slots__ = ("request", "investigated", "learned", "completed", "next_steps", "files_read", "files_edited", "notes")
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    INVESTIGATED_FIELD_NUMBER: _ClassVar[int]
    LEARNED_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_FIELD_NUMBER: _ClassVar[int]
    NEXT_STEPS_FIELD_NUMBER: _ClassVar[int]
    FILES_READ_FIELD_NUMBER: _ClassVar[int]
    FILES_EDITED_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    request: str
    investigated: str
    learned: str
    completed: str
    next_steps: str
    files_read: _containers.RepeatedScalarFieldContainer[str]
    files_edited: _containers.RepeatedScalarFieldContainer[str]
    notes: str
    def __init__(self, request: _Optional[str] = ..., investigated: _Optional[str] = ..., learned: _Optional[str] = ..., completed: _Optional[str] = ..., next_steps: _Optional[str] = ..., files_read: _Optional[_Iterable[str]] = ..., files_edited: _Optional[_Iterable[str]] = ..., notes: _Optional[str] = ...) -> None: ...

class RetainRequest(_message.Message):
    __slots__ = ("idempotency_key", "subject", "required_scopes", "request_id", "turn", "model_output", "observations", "summaries")
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    REQUIRED_SCOPES_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_FIELD_NUMBER: _ClassVar[int]
    MODEL_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    OBSERVATIONS_FIELD_NUMBER: _ClassVar[int]
    SUMMARIES_FIELD_NUMBER: _ClassVar[int]
    idempotency_key: str
    subject: str
    required_scopes: _containers.RepeatedScalarFieldContainer[str]
    request_id: str
    turn: int
    model_output: str
    observations: _containers.RepeatedCompositeFieldContainer[Observation]
    summaries: _containers.RepeatedCompositeFieldContainer[SessionSummary]
    def __init__(self, idempotency_key: _Optional[str] = ..., subject: _Optional[str] = ..., required_scopes: _Optional[_Iterable[str]] = ..., request_id: _Optional[str] = ..., turn: _Optional[int] = ..., model_output: _Optional[str] = ..., observations: _Optional[_Iterable[_Union[Observation, _Mapping]]] = ..., summaries: _Optional[_Iterable[_Union[SessionSummary, _Mapping]]] = ...) -> None: ...

class RetainProblem(_message.Message):
    __slots__ = ("element", "index", "offset", "reason")
    ELEMENT_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    element: str
    index: int
    offset: int
    reason: str
    def __init__(self, element: _Optional[str] = ..., index: _Optional[int] = ..., offset: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class RetainResponse(_message.Message):
    __slots__ = ("memory_ids", "replayed", "problems", "private_spans_removed", "evicted")
    MEMORY_IDS_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    PROBLEMS_FIELD_NUMBER: _ClassVar[int]
    PRIVATE_SPANS_REMOVED_FIELD_NUMBER: _ClassVar[int]
    EVICTED_FIELD_NUMBER: _ClassVar[int]
    memory_ids: _containers.RepeatedScalarFieldContainer[str]
    replayed: bool
    problems: _containers.RepeatedCompositeFieldContainer[RetainProblem]
    private_spans_removed: int
    evicted: int
    def __init__(self, memory_ids: _Optional[_Iterable[str]] = ..., replayed: _Optional[bool] = ..., problems: _Optional[_Iterable[_Union[RetainProblem, _Mapping]]] = ..., private_spans_removed: _Optional[int] = ..., evicted: _Optional[int] = ...) -> None: ...

class ForgetRequest(_message.Message):
    __slots__ = ("ids", "subject", "type")
    IDS_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[str]
    subject: str
    type: str
    def __init__(self, ids: _Optional[_Iterable[str]] = ..., subject: _Optional[str] = ..., type: _Optional[str] = ...) -> None: ...

class ForgetResponse(_message.Message):
    __slots__ = ("deleted", "not_found")
    DELETED_FIELD_NUMBER: _ClassVar[int]
    NOT_FOUND_FIELD_NUMBER: _ClassVar[int]
    deleted: int
    not_found: int
    def __init__(self, deleted: _Optional[int] = ..., not_found: _Optional[int] = ...) -> None: ...

class StoredMemory(_message.Message):
    __slots__ = ("id", "subject", "type", "title", "observation", "summary", "required_scopes", "request_id", "turn", "created_at_unix_ms")
    ID_FIELD_NUMBER: _ClassVar[int]
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    REQUIRED_SCOPES_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    id: str
    subject: str
    type: str
    title: str
    observation: Observation
    summary: SessionSummary
    required_scopes: _containers.RepeatedScalarFieldContainer[str]
    request_id: str
    turn: int
    created_at_unix_ms: int
    def __init__(self, id: _Optional[str] = ..., subject: _Optional[str] = ..., type: _Optional[str] = ..., title: _Optional[str] = ..., observation: _Optional[_Union[Observation, _Mapping]] = ..., summary: _Optional[_Union[SessionSummary, _Mapping]] = ..., required_scopes: _Optional[_Iterable[str]] = ..., request_id: _Optional[str] = ..., turn: _Optional[int] = ..., created_at_unix_ms: _Optional[int] = ...) -> None: ...

class ListMemoriesRequest(_message.Message):
    __slots__ = ("subject", "page_size", "page_token", "principal")
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    subject: str
    page_size: int
    page_token: str
    principal: Principal
    def __init__(self, subject: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., principal: _Optional[_Union[Principal, _Mapping]] = ...) -> None: ...

class ListMemoriesResponse(_message.Message):
    __slots__ = ("memories", "next_page_token", "hidden")
    MEMORIES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    HIDDEN_FIELD_NUMBER: _ClassVar[int]
    memories: _containers.RepeatedCompositeFieldContainer[StoredMemory]
    next_page_token: str
    hidden: int
    def __init__(self, memories: _Optional[_Iterable[_Union[StoredMemory, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., hidden: _Optional[int] = ...) -> None: ...
