"""Recount an OpenAI Chat Completions body with OpenAI's own tokenizer.

The encodings are built by tests/reference/tiktoken_check.py from the
vocabulary files vendored in the tiktoken-rs crate (hash-checked against the
ones tiktoken expects), so nothing is downloaded. The convention is the
sidecar's documented one:

    3 + sum over messages of (3 + tokens(role) + tokens(text)) + tools tokens

- a developer message counts as role "system";
- a message's text is its string content, or its text parts' `text` joined
  with "\\n";
- an assistant message with `tool_calls` has the text "\\n".join of the
  non-empty pieces of [content text, name1, arguments1, name2, ...];
- tools follow the OpenAI cookbook's `num_tokens_for_tools` for the 4o
  family (func_init 7, prop_init 3, prop_key 3, enum_init -3, enum_item 3,
  func_end 12; one trailing "." dropped from each description).
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "reference"))

import tiktoken_check  # noqa: E402  (tests/reference: the vendored encodings)

FUNC_INIT, PROP_INIT, PROP_KEY, ENUM_INIT, ENUM_ITEM, FUNC_END = 7, 3, 3, -3, 3, 12

_encoding = None


def encoding():
    global _encoding
    if _encoding is None:
        _encoding = tiktoken_check.openai_encodings()["o200k_base"]
    return _encoding


def count(text):
    return len(encoding().encode(text, disallowed_special=()))


def _text(content):
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")


def message_text(msg):
    text = _text(msg.get("content"))
    if msg.get("role") == "assistant" and msg.get("tool_calls"):
        pieces = [text]
        for call in msg["tool_calls"]:
            fn = call.get("function", {})
            pieces += [fn.get("name", ""), fn.get("arguments", "")]
        text = "\n".join(p for p in pieces if p)
    return text


def _desc(obj):
    d = obj.get("description", "")
    return d[:-1] if d.endswith(".") else d


def tools_tokens(tools):
    if not tools:
        return 0
    total = FUNC_END
    for tool in tools:
        fn = tool["function"]
        total += FUNC_INIT + count(f"{fn['name']}:{_desc(fn)}")
        props = fn.get("parameters", {}).get("properties", {})
        if props:
            total += PROP_INIT
            for key, prop in props.items():
                total += PROP_KEY
                if "enum" in prop:
                    total += ENUM_INIT
                    for item in prop["enum"]:
                        total += ENUM_ITEM + count(item)
                total += count(f"{key}:{prop['type']}:{_desc(prop)}")
    return total


def chat_tokens(body):
    """Prompt tokens of a parsed Chat Completions body."""
    total = 3
    for msg in body.get("messages", []):
        role = "system" if msg.get("role") == "developer" else msg.get("role", "")
        total += 3 + count(role) + count(message_text(msg))
    return total + tools_tokens(body.get("tools"))
