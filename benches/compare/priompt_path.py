"""Path (b): the same request expressed for `priomptipy` (a Python port of Priompt: prompt
components with priorities, rendered under a token limit by searching for the lowest priority
cutoff whose prompt fits).

The tree:

  SystemMessage(system), SystemMessage(policy)        no scope: always kept
  Scope(p = H + j, UserMessage|AssistantMessage)      turn j (newer = higher), below all evidence
  UserMessage([                                       the context message
      First([Scope(p = E - 2r - 1, full unit),        evidence of rank r (best r = 0): full form,
             Scope(p = E - 2r,     compact unit)])    else its compact form (First takes the first
      ...                                             child above the cutoff), else nothing
  ])
  UserMessage(query)                                  always kept

Where the model fits: priorities by score and recency, the compact form as a `First` fallback, one
limit, whole messages. Where it does not: a priority cutoff is global, so once an item of some
priority does not fit, nothing below it is kept even if it would fit (the sidecar and path (a) go on
to the next item); it has no notion of tool-call pairs, permissions, per-block min/max tokens, a
summary of dropped turns, or cache-stable ordering; and it counts chat framing as
`4 (n - 1) + 3` over the contents, 4 tokens less than the chat formula (`3 + sum of 3 + role`).
It is async and re-encodes the whole prompt with tiktoken for each candidate cutoff.
"""

import asyncio
import time

from priomptipy import AssistantMessage, First, Scope, SystemMessage, UserMessage, render

from common import ENCODING, Result, document_unit, ranked_evidence, turns_of

NAME = "(b) priomptipy"

EVIDENCE_PRIORITY = 1_000_000
TURN_PRIORITY = 1_000


def element(req: dict, evidence: dict, turns: list):
    """The prompt tree; kept ids are recorded into `evidence` and `turns` by on_include."""
    tree = [SystemMessage(s.get("content", "")) for s in req.get("staticSegments", [])]
    for j, item in enumerate(turns_of(req)):
        if item.get("thinking"):
            raise SystemExit("path (b): priomptipy has no thinking blocks to carry an agent's turns; "
                             "run the agent workload with --paths a,c")
        make = AssistantMessage if item.get("role") == "ROLE_ASSISTANT" else UserMessage
        tree.append(Scope(
            children=[make(item.get("content", ""))],
            absolute_priority=TURN_PRIORITY + j,
            on_include=lambda i=item["id"]: turns.append(i),
        ))
    context = []
    for r, item in enumerate(ranked_evidence(req)):
        def mark(form, i=item["id"]):
            return lambda: evidence.__setitem__(i, form)

        full = Scope(children=[document_unit(item)], absolute_priority=EVIDENCE_PRIORITY - 2 * r - 1,
                     on_include=mark("full"))
        if "compactForm" in item:
            compact = Scope(children=[document_unit(item, compact=True)],
                            absolute_priority=EVIDENCE_PRIORITY - 2 * r, on_include=mark("compact"))
            context.append(First(children=[full, compact]))
        else:
            context.append(full)
    tree.append(UserMessage(context))
    tree.append(UserMessage(req["query"]))
    return tree


async def assemble(req: dict) -> Result:
    evidence, turns = {}, []
    out = await render(element(req, evidence, turns), {"token_limit": req["maxInputTokens"], "tokenizer": ENCODING})
    messages = [(m["role"], m["content"]) for m in out["prompt"]["messages"]]
    return Result(
        request_id=req.get("requestId", ""),
        budget=req["maxInputTokens"],
        # An empty context message (every item dropped) is rendered by priompt; keep it as is.
        messages=messages,
        evidence=evidence,
        turns=turns,
        reported_tokens=out["token_count"],
    )


async def _run_pass(requests) -> list:
    out = []
    for _, req in requests:
        started = time.perf_counter()
        result = await assemble(req)
        result.seconds = time.perf_counter() - started
        out.append(result)
    return out


def run_pass(requests) -> list:
    """One pass over `requests` ((line, dict) pairs) on one event loop, timing each request."""
    return asyncio.run(_run_pass(requests))
