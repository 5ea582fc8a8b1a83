"""What a fitted request must look like when it reaches the upstream.

Each `check_*` function takes a `Check` (which collects every problem it
finds, so a failing check names all of them at once), the exchange, and the
client's own bytes, and adds a problem for every rule the upstream body
breaks. The rules are the sidecar's contract in the gateway's path:

- the system prompt (leading system/developer messages, Anthropic `system`,
  Responses `instructions`) and `tools` are never cut and keep their bytes;
- every message the upstream receives is the client's own bytes for that
  message, in the client's order, except: a tool result kept with its
  content replaced by a placeholder starting `[tool result cleared` (same
  call id), and at most one inserted user message starting
  `<summary id="compacted-turns"`, right after the system messages;
- the client's last message is there, and last;
- tool calls and their results stay together;
- other top-level members keep their bytes; on OpenAI paths the sidecar may
  add `prompt_cache_key`, on Anthropic paths `cache_control` markers (at
  most 4 in the request, the caller's own included).
"""

import json
import re

import jsonspan

PLACEHOLDER = "[tool result cleared"
SUMMARY = '<summary id="compacted-turns"'
ADDED_OPENAI = "prompt_cache_key"
MARKER = "cache_control"


class Check:
    """A named check: the problems found, none when it passes."""

    def __init__(self, name):
        self.name = name
        self.problems = []
        self.notes = []

    def expect(self, condition, problem):
        if not condition:
            self.problems.append(problem)
        return bool(condition)

    def note(self, text):
        self.notes.append(text)


def short(raw, n=160):
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    return text if len(text) <= n else text[:n] + "..."


def parse_body(c, raw, what):
    try:
        return jsonspan.parse(raw)
    except ValueError as e:
        c.expect(False, f"{what} is not JSON ({e}): {short(raw)}")
        return None


def check_top_level(c, client, upstream, skip, may_add=()):
    """Every client member but `skip` reaches the upstream with its value's
    exact bytes; the upstream has no member the client lacked except those in
    `may_add`."""
    for m in client.members:
        if m.key in skip:
            continue
        got = upstream.member(m.key)
        if got is None:
            c.expect(False, f"top-level {m.key!r} is missing upstream")
        else:
            c.expect(got.bytes == m.value.bytes,
                     f"top-level {m.key!r} changed: client {short(m.value.bytes, 80)} upstream {short(got.bytes, 80)}")
    client_keys = set(client.keys())
    for key in upstream.keys():
        c.expect(key in client_keys or key in may_add, f"upstream has a top-level {key!r} the client did not send")


def _text_of(content, part_types=("text", "input_text")):
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") in part_types)
    return ""


class Matcher:
    """Maps upstream items onto client items, in order.

    `client_raw` are the client's items' bytes, `normalize` turns an item's
    node into what is compared (its bytes, or its bytes with added markers
    cut out); `placeholder(item) -> client index or None` and
    `is_summary(item)` say what the two allowed rewrites look like for this
    provider."""

    def __init__(self, c, client_raw, normalize, placeholder, is_summary, kind="message", explain=None):
        self.c = c
        self.explain = explain
        self.client_norm = [normalize(jsonspan.parse(r)) for r in client_raw]
        self.normalize = normalize
        self.placeholder = placeholder
        self.is_summary = is_summary
        self.kind = kind

    def map(self, items):
        """[(client index or None, how)] per upstream item, `how` one of
        "same" (the client's bytes), "cleared" (a placeholder result),
        "summary" or None (no rule allows it: a problem)."""
        out = []
        next_j = 0
        for i, node in enumerate(items):
            norm = self.normalize(node)
            j = next((k for k in range(next_j, len(self.client_norm)) if self.client_norm[k] == norm), None)
            how = "same"
            if j is None:
                value = node.value
                if self.is_summary(value):
                    out.append((None, "summary"))
                    continue
                j, how = self.placeholder(value), "cleared"
                if j is not None and j < next_j:
                    self.c.expect(False, f"upstream {self.kind} #{i} (a cleared tool result) is out of the client's order")
            if j is None:
                hint = self.explain(node.value) if self.explain else None
                self.c.expect(False, f"upstream {self.kind} #{i} is not byte-identical to any client {self.kind} "
                              f"(at or after client #{next_j}){'; ' + hint if hint else ''}: {short(node.bytes)}")
                how = None
            else:
                next_j = max(next_j, j + 1)
            out.append((j, how))
        return out

    def check_shape(self, mapping, n_system, n_client, n_newest=1):
        """The system items first, the summary (at most one) right after
        them, the newest turn (the client's last `n_newest` items) last and
        unchanged, and something actually cut or cleared."""
        c = self.c
        for s in range(n_system):
            c.expect(s < len(mapping) and mapping[s] == (s, "same"),
                     f"system {self.kind} #{s} is not byte-identical at position {s} upstream")
        summaries = [i for i, (_, how) in enumerate(mapping) if how == "summary"]
        c.expect(len(summaries) <= 1, f"{len(summaries)} summary messages upstream (at most one)")
        for i in summaries:
            c.expect(i == n_system, f"the summary message is at position {i}, not right after the {n_system} system messages")
        tail = mapping[-n_newest:] if len(mapping) >= n_newest else []
        expected = [(j, "same") for j in range(n_client - n_newest, n_client)]
        if n_newest == 1:
            c.expect(tail == expected, f"the client's last {self.kind} is not last upstream, byte-identical")
        else:
            c.expect(tail == expected, f"the newest turn (the client's last {n_newest} {self.kind}s: the call and "
                     f"its results) is not last upstream, byte-identical: upstream ends with {tail}")
        c.expect(len(mapping) < n_client or any(how != "same" for _, how in mapping),
                 "nothing was cut or cleared although the client's body is over the budget")


def openai_placeholder(client_items, id_key, match):
    """A placeholder finder: the client index of the item whose `id_key`
    equals the upstream item's, when `match(item)` says it is a cleared
    result."""
    index = {}
    for j, item in enumerate(client_items):
        if isinstance(item, dict) and id_key in item:
            index.setdefault(item[id_key], j)

    def find(item):
        if isinstance(item, dict) and match(item) and item.get(id_key) in index:
            return index[item[id_key]]
        return None

    return find


def check_chat_pairs(c, messages):
    """No tool message without its call right before; no call without all
    its results right after."""
    i = 0
    while i < len(messages):
        m = messages[i]
        if m.get("role") == "assistant" and m.get("tool_calls"):
            ids = [t.get("id") for t in m["tool_calls"]]
            k = i + 1
            seen = []
            while k < len(messages) and messages[k].get("role") == "tool":
                seen.append(messages[k].get("tool_call_id"))
                k += 1
            c.expect(sorted(seen) == sorted(ids), f"assistant message #{i} calls {ids} but is followed by results {seen}")
            i = k
            continue
        c.expect(m.get("role") != "tool", f"tool message #{i} ({m.get('tool_call_id')}) has no call right before it")
        i += 1


def check_chat(c, client_raw, client_msgs_raw, upstream_raw, n_newest=1):
    """An OpenAI Chat body fitted by the sidecar (see the module doc).
    Returns the parsed upstream body, or None."""
    client = jsonspan.parse(client_raw)
    up = parse_body(c, upstream_raw, "the upstream body")
    if up is None or not c.expect(up.kind == "object", "upstream body is not an object"):
        return None
    check_top_level(c, client, up, skip={"messages"}, may_add={ADDED_OPENAI})
    msgs = up.member("messages")
    if not c.expect(msgs is not None and msgs.kind == "array", "upstream has no messages array"):
        return None
    client_msgs = [json.loads(r) for r in client_msgs_raw]
    n_system = 0
    while n_system < len(client_msgs) and client_msgs[n_system]["role"] in ("system", "developer"):
        n_system += 1

    def cleared(item):
        return item.get("role") == "tool" and _text_of(item.get("content")).startswith(PLACEHOLDER)

    matcher = Matcher(
        c, client_msgs_raw, normalize=lambda n: n.bytes,
        placeholder=openai_placeholder(client_msgs, "tool_call_id", cleared),
        is_summary=lambda m: m.get("role") == "user" and _text_of(m.get("content")).startswith(SUMMARY),
    )
    matcher.check_shape(matcher.map(msgs.items), n_system, len(client_msgs), n_newest)
    check_chat_pairs(c, [n.value for n in msgs.items])
    return json.loads(upstream_raw)


def check_responses(c, client_raw, client_items_raw, upstream_raw):
    """An OpenAI Responses body fitted by the sidecar."""
    client = jsonspan.parse(client_raw)
    up = parse_body(c, upstream_raw, "the upstream body")
    if up is None or not c.expect(up.kind == "object", "upstream body is not an object"):
        return None
    check_top_level(c, client, up, skip={"input"}, may_add={ADDED_OPENAI})
    items = up.member("input")
    if not c.expect(items is not None and items.kind == "array", "upstream has no input array"):
        return None
    client_items = [json.loads(r) for r in client_items_raw]

    def cleared(item):
        out = item.get("output")
        return item.get("type") == "function_call_output" and _text_of(out).startswith(PLACEHOLDER)

    def is_summary(item):
        return (item.get("role") == "user" and item.get("type", "message") == "message"
                and _text_of(item.get("content")).startswith(SUMMARY))

    matcher = Matcher(c, client_items_raw, normalize=lambda n: n.bytes,
                      placeholder=openai_placeholder(
                          [i if i.get("type") == "function_call_output" else {} for i in client_items],
                          "call_id", cleared),
                      is_summary=is_summary, kind="input item")
    matcher.check_shape(matcher.map(items.items), 0, len(client_items))
    values = [n.value for n in items.items]
    calls = [v.get("call_id") for v in values if v.get("type") == "function_call"]
    outputs = [v.get("call_id") for v in values if v.get("type") == "function_call_output"]
    for cid in outputs:
        c.expect(cid in calls, f"function_call_output {cid} upstream without its function_call")
    for cid in calls:
        c.expect(cid in outputs, f"function_call {cid} upstream without its function_call_output")
    for pos, v in enumerate(values):
        if v.get("type") == "function_call_output":
            before = [w.get("call_id") for w in values[:pos] if w.get("type") == "function_call"]
            c.expect(v.get("call_id") in before, f"function_call_output {v.get('call_id')} comes before its call")
    return json.loads(upstream_raw)


# A string content the sidecar wrapped as one text block to mark it, once
# the marker is cut out: `[{"type":"text","text":"..."}]` exactly as it
# writes it, the string's own bytes inside.
WRAPPED = re.compile(rb'\[\{"type":"text","text":("(?:[^"\\]|\\.)*")\}\]')


def strip_markers(node):
    """A node's bytes with every cache_control member cut out, and a string
    content wrapped to carry one unwrapped to the caller's bytes."""
    return WRAPPED.sub(lambda m: m.group(1), jsonspan.strip_key_everywhere(node, MARKER)[0])


def count_markers(node):
    return jsonspan.strip_key_everywhere(node, MARKER)[1]


def check_anthropic_top(c, client, up):
    """Top-level members: system and tools equal up to added cache_control
    markers (the caller's own kept), the rest byte-identical, at most 4
    markers in the whole request."""
    for key in ("system", "tools"):
        cm, um = client.member(key), up.member(key)
        if cm is None:
            continue
        if not c.expect(um is not None, f"{key!r} is missing upstream"):
            continue
        c.expect(strip_markers(um) == strip_markers(cm),
                 f"{key!r} changed beyond added cache_control markers: upstream {short(um.bytes, 120)}")
        c.expect(count_markers(um) >= count_markers(cm), f"the caller's cache_control markers in {key!r} were removed")
    check_top_level(c, client, up, skip={"messages", "system", "tools"})
    total = count_markers(up)
    c.expect(total <= 4, f"{total} cache_control markers upstream (at most 4)")


def check_anthropic_pairs(c, messages):
    """Every tool_use answered by a tool_result in the very next message,
    every tool_result answering a tool_use of the message right before."""

    def blocks(m, kind):
        content = m.get("content")
        return [b for b in content if isinstance(b, dict) and b.get("type") == kind] if isinstance(content, list) else []

    for i, m in enumerate(messages):
        uses = [b.get("id") for b in blocks(m, "tool_use")]
        if uses:
            nxt = messages[i + 1] if i + 1 < len(messages) else {}
            results = [b.get("tool_use_id") for b in blocks(nxt, "tool_result")]
            c.expect(sorted(results) == sorted(uses), f"message #{i} uses tools {uses}, the next message answers {results}")
        for b in blocks(m, "tool_result"):
            prev = messages[i - 1] if i > 0 else {}
            c.expect(b.get("tool_use_id") in [u.get("id") for u in blocks(prev, "tool_use")],
                     f"tool_result {b.get('tool_use_id')} in message #{i} has no tool_use right before it")


def check_anthropic(c, client_raw, client_msgs_raw, upstream_raw):
    """An Anthropic Messages body fitted by the sidecar."""
    client = jsonspan.parse(client_raw)
    up = parse_body(c, upstream_raw, "the upstream body")
    if up is None or not c.expect(up.kind == "object", "upstream body is not an object"):
        return None
    check_anthropic_top(c, client, up)
    msgs = up.member("messages")
    if not c.expect(msgs is not None and msgs.kind == "array", "upstream has no messages array"):
        return None
    client_msgs = [json.loads(r) for r in client_msgs_raw]
    by_results = {}
    for j, m in enumerate(client_msgs):
        ids = tuple(b.get("tool_use_id") for b in m["content"] if b.get("type") == "tool_result") \
            if isinstance(m["content"], list) else ()
        if ids:
            by_results[ids] = j

    thinking_kinds = ("thinking", "redacted_thinking")

    def without_thinking(m):
        """The client message this assistant message is, less its thinking
        blocks (a closed tool cycle's thinking is dropped whole), every other
        block and member unchanged."""
        content = m.get("content")
        for j, cm in enumerate(client_msgs):
            cc = cm.get("content")
            if not isinstance(cc, list) or not any(b.get("type") in thinking_kinds for b in cc):
                continue
            rest = [b for b in cc if b.get("type") not in thinking_kinds]
            others = {k: v for k, v in cm.items() if k != "content"}
            if rest == content and others == {k: v for k, v in m.items() if k != "content"}:
                return j
        return None

    def placeholder(m):
        content = m.get("content")
        if m.get("role") == "assistant" and isinstance(content, list):
            return without_thinking(m)
        if m.get("role") != "user" or not isinstance(content, list):
            return None
        results = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
        j = by_results.get(tuple(b.get("tool_use_id") for b in results))
        if j is None or not any(_text_of(b.get("content")).startswith(PLACEHOLDER) for b in results):
            return None
        original = {b["tool_use_id"]: b for b in client_msgs[j]["content"] if b.get("type") == "tool_result"}
        for b in results:
            if not _text_of(b.get("content")).startswith(PLACEHOLDER):
                c.expect(b.get("content") == original[b["tool_use_id"]].get("content"),
                         f"tool_result {b['tool_use_id']} is neither the client's nor a placeholder")
        return j

    def is_summary(m):
        return m.get("role") == "user" and _text_of(m.get("content"), ("text",)).startswith(SUMMARY)

    def explain(m):
        """Which client message this one came from (by its tool ids), and
        how its blocks differ."""
        content = m.get("content")
        ids = {b.get("id") or b.get("tool_use_id") for b in content if isinstance(b, dict)} - {None} \
            if isinstance(content, list) else set()
        for j, cm in enumerate(client_msgs):
            blocks = cm["content"] if isinstance(cm["content"], list) else []
            if ids and ids <= {b.get("id") or b.get("tool_use_id") for b in blocks}:
                kinds = [b.get("type") for b in blocks]
                got = [b.get("type") for b in content]
                if kinds != got:
                    return f"it is client message #{j} with blocks {kinds} arriving as {got}"
                return f"it is client message #{j} with its bytes changed"
        return None

    matcher = Matcher(c, client_msgs_raw, normalize=strip_markers, placeholder=placeholder, is_summary=is_summary,
                      explain=explain)
    mapping = matcher.map(msgs.items)
    matcher.check_shape(mapping, 0, len(client_msgs))
    for node, (j, how) in zip(msgs.items, mapping):
        if how == "same":
            c.expect(count_markers(node) >= count_markers(jsonspan.parse(client_msgs_raw[j])),
                     f"the caller's cache_control markers in message #{j} were removed")
    check_anthropic_pairs(c, [n.value for n in msgs.items])
    return json.loads(upstream_raw)
