"""Client request bodies, serialized the way no JSON library would.

Byte identity is only meaningful when the client's bytes differ from what a
re-serializer would write: here keys keep the (non-alphabetical) order the
conversation is built in, the space around `:` and `,` varies from member to
member, every non-ASCII character is a `\\uXXXX` escape (emoji as surrogate
pairs), `/` is escaped as `\\/`, and some messages span several lines. A
sidecar that parses and re-serializes any of them changes their bytes.

Every builder takes a `random.Random` so a run is reproducible, and returns
plain Python values; `dump` turns them into bytes.
"""

import json

# Prose with non-ASCII letters, CJK, emoji, slashes and quotes: every message
# carries some, so every kept message has escapes to preserve.
WORDS = (
    "the gateway forwards each request to the model after the sidecar fits its prompt into the "
    "budget while the prefix stays byte identical for the provider cache and old tool results "
    "are cleared first then whole turns drop oldest first with a summary of what was dropped "
    "café naïve résumé Zürich 東京 データ 😀 🚀 a/b/c https://example.invalid/path \"quoted\" "
    "tab\there"
).split(" ")


def prose(rng, words):
    return " ".join(rng.choice(WORDS) for _ in range(words))


def _string(s, rng):
    text = json.dumps(s, ensure_ascii=True)
    return text.replace("/", "\\/") if rng.random() < 0.7 else text


_COLONS = (":", ": ", " : ", " :")
_COMMAS = (",", ", ", " ,", ",\n  ")


def dump(value, rng):
    """`value` as JSON bytes in an unusual but valid serialization. The
    outermost object always puts a space before its colons, which no common
    serializer does, so no message or top-level value is byte-identical to a
    re-serialization of it."""

    def emit(v, outer=False):
        if isinstance(v, dict):
            colon = rng.choice(_COLONS[2:] if outer else _COLONS)
            comma = rng.choice(_COMMAS)
            inner = comma.join(_string(k, rng) + colon + emit(x) for k, x in v.items())
            return "{" + inner + "}" if rng.random() < 0.8 else "{ " + inner + " }"
        if isinstance(v, list):
            comma = rng.choice(_COMMAS)
            return "[" + comma.join(emit(x, outer) for x in v) + "]"
        if isinstance(v, str):
            return _string(v, rng)
        if isinstance(v, bool) or v is None:
            return json.dumps(v)
        if isinstance(v, float):
            return repr(v)
        return str(v)

    out = emit(value, outer=True).encode("ascii")
    json.loads(out)  # the serialization is valid JSON
    return out


def dump_top(members, rng, sep=b" ,\n "):
    """A top-level object from (key, value bytes) pairs, the values already
    dumped: the runner keeps each message's own bytes to look for later."""
    parts = [_string(k, rng).encode() + b" : " + v for k, v in members]
    return b"{\n " + sep.join(parts) + b"\n}\n"


# --- OpenAI Chat Completions ---------------------------------------------------------------

CHAT_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search_docs",
            "description": "Search the product documentation. Returns passages.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What to look for."},
                    "limit": {"type": "integer", "description": "Most passages"},
                },
                "required": ["query"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name, e.g. Zürich"},
                    "unit": {"type": "string", "description": "Unit.", "enum": ["celsius", "fahrenheit"]},
                },
            },
        },
    },
]


def chat_messages(rng, turns, words=60, system_words=80, agent_tail=False, tool_turns=True):
    """A system and a developer message, then `turns` turns, the last a user
    message. Every third turn is an agent step: the assistant calls one or
    two tools (content null or text), each call gets its result, then the
    assistant answers (none without `tool_turns`: a text conversation). With
    `agent_tail`, the conversation ends in an agent loop instead: after the
    last user message the assistant calls two tools and the last two
    messages are their results."""
    msgs = [
        {"role": "system", "content": "You are a careful assistant. " + prose(rng, system_words)},
        {"content": [{"text": prose(rng, 20), "type": "text"}], "role": "developer"},
    ]
    call = 0
    for t in range(turns):
        msgs.append({"content": f"turn {t}: " + prose(rng, words), "role": "user"})
        if tool_turns and t % 3 == 1:
            calls = []
            for _ in range(1 + (t % 2)):
                call += 1
                calls.append({
                    "id": f"call_{call:03d}",
                    "type": "function",
                    "function": {"name": "search_docs", "arguments": json.dumps({"query": prose(rng, 4)})},
                })
            content = None if t % 2 else "Let me look that up."
            msgs.append({"role": "assistant", "content": content, "tool_calls": calls})
            for c in calls:
                msgs.append({
                    "tool_call_id": c["id"],
                    "role": "tool",
                    "content": "result: " + prose(rng, words * 2),
                })
        msgs.append({"role": "assistant", "content": prose(rng, words)})
    msgs.append({"role": "user", "content": "Now the final question: " + prose(rng, 20)})
    if agent_tail:
        calls = [{"id": f"call_tail{k}", "type": "function",
                  "function": {"name": "get_weather", "arguments": json.dumps({"city": "Zürich", "unit": "celsius"})}}
                 for k in range(2)]
        msgs.append({"tool_calls": calls, "role": "assistant", "content": ""})
        for c in calls:
            msgs.append({"role": "tool", "content": [{"type": "text", "text": "weather: " + prose(rng, words)}],
                         "tool_call_id": c["id"]})
    return msgs


def chat_body(rng, messages, model="gpt-4o", tools=True, extra=()):
    """A Chat Completions body: (bytes, [bytes of each message]).

    The top-level members come in an unusual order, with the raw number
    text `0.50` for temperature (a re-serializer writes 0.5)."""
    msg_bytes = [dump(m, rng) for m in messages]
    array = b"[\n  " + b" ,\n  ".join(msg_bytes) + b"\n ]"
    members = [
        ("messages", array),
        ("temperature", b"0.50"),
        ("model", dump(model, rng)),
    ]
    if tools:
        members.append(("tools", dump(CHAT_TOOLS, rng)))
        members.append(("tool_choice", b'"auto"'))
    members.append(("metadata", dump({"trace": "t/1", "who": "Zoë"}, rng)))
    members.append(("max_completion_tokens", b"512"))
    members.extend(extra)
    return dump_top(members, rng), msg_bytes


# --- OpenAI Responses ----------------------------------------------------------------------

RESPONSES_TOOLS = [
    {
        "type": "function",
        "name": "search_docs",
        "description": "Search the product documentation.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "What to look for"}},
            "required": ["query"],
        },
        "strict": False,
    },
]


def responses_items(rng, turns, words=60, tool_turns=True):
    """Input items: user and assistant messages (string and part-list
    content), and every third turn a reasoning item, one or two
    function_call items and their function_call_output items (none without
    `tool_turns`). The last item is a user message."""
    items = []
    call = 0
    for t in range(turns):
        if t % 2:
            items.append({"role": "user", "content": f"turn {t}: " + prose(rng, words)})
        else:
            items.append({"type": "message", "role": "user",
                          "content": [{"type": "input_text", "text": f"turn {t}: " + prose(rng, words)}]})
        if tool_turns and t % 3 == 1:
            items.append({"type": "reasoning", "id": f"rs_{t:03d}",
                          "summary": [{"type": "summary_text", "text": prose(rng, 15)}]})
            ids = []
            for _ in range(1 + (t % 2)):
                call += 1
                ids.append(f"call_{call:03d}")
                items.append({"arguments": json.dumps({"query": prose(rng, 4)}), "call_id": ids[-1],
                              "name": "search_docs", "type": "function_call"})
            for cid in ids:
                items.append({"type": "function_call_output", "call_id": cid,
                              "output": "result: " + prose(rng, words * 2)})
        items.append({"type": "message", "role": "assistant", "status": "completed",
                      "content": [{"type": "output_text", "text": prose(rng, words), "annotations": []}]})
    items.append({"role": "user", "content": "Final question: " + prose(rng, 20)})
    return items


def responses_body(rng, items, model="gpt-4o", extra=()):
    """A Responses body: (bytes, [bytes of each input item])."""
    item_bytes = [dump(i, rng) for i in items]
    members = [
        ("model", dump(model, rng)),
        ("instructions", dump("Answer briefly. " + prose(rng, 60), rng)),
        ("store", b"false"),
        ("input", b"[" + b",\n".join(item_bytes) + b"]"),
        ("tools", dump(RESPONSES_TOOLS, rng)),
        ("max_output_tokens", b"800"),
        ("reasoning", dump({"effort": "low", "summary": "auto"}, rng)),
    ]
    members.extend(extra)
    return dump_top(members, rng), item_bytes


# --- Anthropic Messages --------------------------------------------------------------------

ANTHROPIC_TOOLS = [
    {
        "name": "search_docs",
        "description": "Search the product documentation.",
        "input_schema": {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "What to look for"}},
            "required": ["query"],
        },
    },
    {
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
        "name": "get_weather",
        "description": "Weather for a city.",
    },
]


def anthropic_messages(rng, turns, words=60):
    """User and assistant messages; every third turn the assistant thinks
    (a thinking block with a signature), says a word and calls one or two
    tools, and the next user message carries the tool_result blocks. The
    last message is a user text message."""
    msgs = []
    call = 0
    for t in range(turns):
        if t % 2:
            msgs.append({"content": f"turn {t}: " + prose(rng, words), "role": "user"})
        else:
            msgs.append({"role": "user", "content": [{"type": "text", "text": f"turn {t}: " + prose(rng, words)}]})
        if t % 3 == 1:
            blocks = [
                {"type": "thinking", "thinking": prose(rng, 30), "signature": f"c2lnbmF0dXJl{t:04d}=="},
                {"type": "text", "text": "Let me check."},
            ]
            ids = []
            for _ in range(1 + (t % 2)):
                call += 1
                ids.append(f"toolu_{call:03d}")
                blocks.append({"type": "tool_use", "id": ids[-1], "name": "search_docs",
                               "input": {"query": prose(rng, 4)}})
            msgs.append({"role": "assistant", "content": blocks})
            msgs.append({"role": "user", "content": [
                {"tool_use_id": cid, "type": "tool_result", "content": "result: " + prose(rng, words * 2)}
                for cid in ids
            ]})
        msgs.append({"role": "assistant", "content": [{"type": "text", "text": prose(rng, words)}]})
    msgs.append({"role": "user", "content": "Final question: " + prose(rng, 20)})
    return msgs


def anthropic_body(rng, messages, system=None, tools=None, model="claude-sonnet-4-5", extra=()):
    """A Messages body: (bytes, [bytes of each message])."""
    if system is None:
        system = [{"type": "text", "text": "You are a careful assistant. " + prose(rng, 80)}]
    msg_bytes = [dump(m, rng) for m in messages]
    members = [
        ("max_tokens", b"1024"),
        ("system", dump(system, rng)),
        ("messages", b"[" + b", ".join(msg_bytes) + b"]"),
        ("model", dump(model, rng)),
        ("tools", dump(ANTHROPIC_TOOLS if tools is None else tools, rng)),
        ("temperature", b"1.0"),
        ("metadata", dump({"user_id": "u-42"}, rng)),
    ]
    members.extend(extra)
    return dump_top(members, rng), msg_bytes
