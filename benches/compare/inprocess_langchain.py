"""Path (a): the assembly done in-process in Python, the way a Python developer would with OpenAI's
tiktoken and LangChain's `trim_messages`.

  1. The static segments (one system message each) and the query (a user message) are never cut.
  2. Evidence by descending score: an item is kept in full if it fits the room left (and its
     block's `max_tokens`, when set: the wrapped documents kept from one block stay under it, the
     context message's own framing aside), else in its `compact_form` if it has one and that fits,
     else dropped; the next item is tried either way (the sidecar's rule). Kept items are wrapped
     as the sidecar wraps them and joined into one user context message (best first).
  3. The conversation turns get what is left: `trim_messages(strategy="last", start_on="human",
     include_system=False, token_counter=<tiktoken per message>)`.
  4. Order: system, policy, kept turns, context, query (the sidecar's order). The reported total
     is the chat formula over the output, counted with tiktoken.

Turns become LangChain messages as a LangChain agent holds them: a user turn a `HumanMessage`; an
assistant turn an `AIMessage` whose `tool_calls` name its calls (the tool named by the result that
answers each), and whose thinking, when it has some, is kept as Anthropic's own content blocks
(`{"type": "thinking", "thinking", "signature"}` or `{"type": "redacted_thinking", "data"}`) before
a text block, the form `langchain_anthropic` passes back to Claude with the signatures intact (and
that `content_blocks` reads as standard reasoning blocks); a tool result a `ToolMessage` with its
`tool_call_id` and the tool's `name`. Tokens are counted as the sidecar counts the request's model
(`common.counting`): for Claude, cl100k_base with the table's 20% margin, thinking included.
`start_on="human"` (LangChain's advice for a valid history) means an agent's history is kept from
a user turn on: the task, or a later word from the user.

Not done here, unlike the sidecar: permission filtering (`required_scopes`), tool-call pairing
beyond `start_on`, clearing old tool results or dropping closed cycles' thinking, summary/memory/
state blocks, the compact-before-drop summary of dropped turns, the prefix hash and cache hints,
volatile-prefix detection, the decision report. tiktoken has no cache, so a "warm" pass encodes
every text again.
"""

import time

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage, trim_messages

from common import EVIDENCE, PER_MESSAGE, Result, blocks_of, counting, document_unit, ranked_evidence, turns_of

NAME = "(a) langchain+tiktoken"

_ROLE = {"system": "system", "human": "user", "ai": "assistant", "tool": "tool"}


def parts(message: BaseMessage) -> tuple:
    """(role, content, thinking texts read) of a message: a list content's text blocks joined, its
    non-redacted thinking blocks' texts."""
    if isinstance(message.content, str):
        return _ROLE[message.type], message.content, ()
    text = "".join(b["text"] for b in message.content if b.get("type") == "text")
    thinking = tuple(b["thinking"] for b in message.content if b.get("type") == "thinking")
    return _ROLE[message.type], text, thinking


def _turn(item: dict, tool_names: dict) -> BaseMessage:
    content, role, ident = item.get("content", ""), item.get("role"), item.get("id")
    if role == "ROLE_ASSISTANT":
        calls = [{"name": tool_names.get(c) or "tool", "args": {}, "id": c, "type": "tool_call"}
                 for c in item.get("toolCallIds", [])]
        thinking = [{"type": "redacted_thinking", "data": t.get("text", "")} if t.get("redacted") else
                    {"type": "thinking", "thinking": t.get("text", ""), "signature": t.get("signature", "")}
                    for t in item.get("thinking", [])]
        if thinking:
            content = [*thinking, {"type": "text", "text": content}]
        return AIMessage(content, id=ident, tool_calls=calls)
    if role == "ROLE_TOOL":
        return ToolMessage(content, id=ident, tool_call_id=item.get("toolCallId", ""),
                           name=item.get("toolName") or None)
    return HumanMessage(content, id=ident)


def history(req: dict) -> list:
    """The request's conversation turns as LangChain messages, chronological."""
    turns = turns_of(req)
    tool_names = {t["toolCallId"]: t.get("toolName", "") for t in turns if t.get("toolCallId")}
    return [_turn(t, tool_names) for t in turns]


def assemble(req: dict) -> Result:
    budget, model = req["maxInputTokens"], req.get("model", "")
    counter = counting(model)

    def message_tokens(message: BaseMessage) -> int:
        """Tokens of one message. The `BaseMessage` annotation makes trim_messages call it once per
        message and sum."""
        return counter.message(*parts(message))

    static = [SystemMessage(s.get("content", "")) for s in req.get("staticSegments", [])]
    query = HumanMessage(req["query"])
    used = counter.chat(parts(m) for m in [*static, query])
    if used > budget:
        raise ValueError(f"static prefix and query ({used} tokens) exceed the budget ({budget})")

    context_open = PER_MESSAGE + counter.role_tokens["user"]
    block_of = {id(it): i for i, b in enumerate(blocks_of(req, (EVIDENCE,))) for it in b.get("items", [])}
    ceilings = [b.get("maxTokens") or float("inf") for b in blocks_of(req, (EVIDENCE,))]
    kept_in = [0] * len(ceilings)
    units, forms = [], {}
    for item in ranked_evidence(req):
        opening = 0 if units else context_open
        b = block_of[id(item)]

        def fits(cost):
            return used + opening + cost <= budget and kept_in[b] + cost <= ceilings[b]

        unit = document_unit(item)
        cost = counter.count(unit)
        form = "full"
        if not fits(cost) and "compactForm" in item:
            unit = document_unit(item, compact=True)
            cost = counter.count(unit)
            form = "compact"
        if fits(cost):
            units.append(unit)
            forms[item["id"]] = form
            used += opening + cost
            kept_in[b] += cost

    turns = history(req)
    kept = trim_messages(
        turns,
        max_tokens=budget - used,
        strategy="last",
        token_counter=message_tokens,
        start_on="human",
        include_system=False,
    ) if turns else []
    used += sum(message_tokens(m) for m in kept)

    messages = static + kept + ([HumanMessage("".join(units))] if units else []) + [query]
    return Result(
        request_id=req.get("requestId", ""),
        budget=budget,
        messages=[parts(m) for m in messages],
        evidence=forms,
        turns=[m.id for m in kept],
        reported_tokens=used,
        model=model,
    )


def run_pass(requests) -> list:
    """One pass over `requests` ((line, dict) pairs), timing each request."""
    out = []
    for _, req in requests:
        started = time.perf_counter()
        result = assemble(req)
        result.seconds = time.perf_counter() - started
        out.append(result)
    return out
