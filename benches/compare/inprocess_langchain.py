"""Path (a): the assembly done in-process in Python, the way a Python developer would with OpenAI's
tiktoken and LangChain's `trim_messages`.

  1. The static segments (one system message each) and the query (a user message) are never cut.
  2. Evidence by descending score: an item is kept in full if it fits the room left, else in its
     `compact_form` if it has one and that fits, else dropped; the next item is tried either way
     (the sidecar's rule). Kept items are wrapped as the sidecar wraps them and joined into one
     user context message (best first).
  3. The conversation turns get what is left: `trim_messages(strategy="last", start_on="human",
     include_system=False, token_counter=<tiktoken per message>)`.
  4. Order: system, policy, kept turns, context, query (the sidecar's order). The reported total
     is the chat formula over the output, counted with tiktoken.

Not done here, unlike the sidecar: permission filtering (`required_scopes`), tool-call pairing,
summary/memory/state blocks, the compact-before-drop summary of dropped turns, the prefix hash and
cache hints, volatile-prefix detection, the decision report. tiktoken has no cache, so a "warm"
pass encodes every text again.
"""

import time

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, trim_messages

from common import ROLE_TOKENS, PER_MESSAGE, REPLY_PRIMING, Result, count, document_unit, ranked_evidence, turns_of

NAME = "(a) langchain+tiktoken"

_ROLE = {"system": "system", "human": "user", "ai": "assistant"}


def message_tokens(message: BaseMessage) -> int:
    """Tokens of one message (3 + role + content). The `BaseMessage` annotation makes
    trim_messages call it once per message and sum."""
    return PER_MESSAGE + ROLE_TOKENS[_ROLE[message.type]] + count(message.content)


def _turn(item: dict) -> BaseMessage:
    if item.get("role") == "ROLE_ASSISTANT":
        return AIMessage(item.get("content", ""), id=item.get("id"))
    return HumanMessage(item.get("content", ""), id=item.get("id"))


def assemble(req: dict) -> Result:
    budget = req["maxInputTokens"]
    static = [SystemMessage(s.get("content", "")) for s in req.get("staticSegments", [])]
    query = HumanMessage(req["query"])
    used = REPLY_PRIMING + sum(message_tokens(m) for m in static) + message_tokens(query)
    if used > budget:
        raise ValueError(f"static prefix and query ({used} tokens) exceed the budget ({budget})")

    context_open = PER_MESSAGE + ROLE_TOKENS["user"]
    units, forms = [], {}
    for item in ranked_evidence(req):
        opening = 0 if units else context_open
        unit = document_unit(item)
        cost = count(unit)
        form = "full"
        if used + opening + cost > budget and "compactForm" in item:
            unit = document_unit(item, compact=True)
            cost = count(unit)
            form = "compact"
        if used + opening + cost <= budget:
            units.append(unit)
            forms[item["id"]] = form
            used += opening + cost

    history = [_turn(t) for t in turns_of(req)]
    kept = trim_messages(
        history,
        max_tokens=budget - used,
        strategy="last",
        token_counter=message_tokens,
        start_on="human",
        include_system=False,
    ) if history else []
    used += sum(message_tokens(m) for m in kept)

    messages = static + kept + ([HumanMessage("".join(units))] if units else []) + [query]
    return Result(
        request_id=req.get("requestId", ""),
        budget=budget,
        messages=[(_ROLE[m.type], m.content) for m in messages],
        evidence=forms,
        turns=[m.id for m in kept],
        reported_tokens=used,
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
