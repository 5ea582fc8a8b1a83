"""Cross-check of the render node (vLLM's render contract) against Python transformers.

The sidecar serves the four tokenizer folders of hf_check.py (Qwen 3, Llama 3.1, Gemma 3, DeepSeek V3),
one `[[models]]` entry per folder, with its render node on loopback. For random conversations of each
family (system prompts, alternating turns, tool calls with their results where the family's template
takes them, tool definitions, text parts, a last message to continue) and random texts:

- POST /v1/chat/completions/render: token_ids equal transformers'
  apply_chat_template(messages, tools=..., add_generation_prompt=..., continue_final_message=...,
  tokenize=True) of the messages as vLLM hands them to the template (text parts joined with newlines,
  a tool call's `arguments` JSON string parsed into an object); where transformers' template raises,
  the node answers 400 with an OpenAI error body;
- POST /tokenize with the same conversation: count and tokens the same ids;
- POST /v1/completions/render of a list of texts: each element's token_ids equal tok.encode(text)
  (special tokens added), and /tokenize of a text with add_special_tokens=false equals
  tok.encode(text, add_special_tokens=False).

The last line is `render reference: N passed, M failed`; a failure names the family, the case and the
first differing position.

Usage: python3 tests/reference/render_check.py BINARY VOCAB_DIR CASES
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hf_check  # noqa: E402  (sets transformers offline before importing it)

import copy  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import urllib.error  # noqa: E402
import urllib.request  # noqa: E402

SEED = 20261127
# Families whose templates take tool calls and tool results (Gemma 3's insists on alternating
# user and assistant turns; Llama 3.1's takes one call per assistant message).
TOOL_FAMILIES = {"qwen3": 2, "llama3_1": 1, "deepseek_v3": 2}


def post(port, path, body, timeout=60):
    data = json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data,
                                 headers={"content-type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def conversation(rng, vocab, family):
    """(reference messages, wire messages, tools, continue_final_message)."""
    text = lambda n=20: hf_check.text(rng, vocab, n)  # noqa: E731
    ref = []
    if rng.random() < 0.6:
        ref.append({"role": "system", "content": text()})
    calls_per = TOOL_FAMILIES.get(family, 0)
    for n in range(rng.randrange(0, 4)):
        ref.append({"role": "user", "content": text()})
        if calls_per and rng.random() < 0.4:
            calls = [{"id": f"call_{n}_{k}", "type": "function",
                      "function": {"name": f"lookup_{k}", "arguments": {"id": text(3), "limit": rng.choice([1, 5])}}}
                     for k in range(rng.randrange(1, calls_per + 1))]
            ref.append({"role": "assistant", "content": "", "tool_calls": calls})
            for c in calls:
                ref.append({"role": "tool", "content": text(), "tool_call_id": c["id"]})
            ref.append({"role": "assistant", "content": text()})
        else:
            ref.append({"role": "assistant", "content": text()})
    ref.append({"role": "user", "content": text()})
    cont = rng.random() < 0.15
    if cont:
        ref.append({"role": "assistant", "content": "Sure, " + text(5)})
    wire = copy.deepcopy(ref)
    for m in wire:
        if rng.random() < 0.3 and m["content"]:
            # Text parts, split at a newline-free point, joined back with "\n" by the node.
            m["content"] = [{"type": "text", "text": part} for part in m["content"].split("\n")]
        elif m["content"] == "" and m["role"] == "assistant" and rng.random() < 0.5:
            m["content"] = None
        for c in m.get("tool_calls", []):
            if rng.random() < 0.5:
                c["function"]["arguments"] = json.dumps(c["function"]["arguments"])
    tools = None
    if calls_per and rng.random() < 0.5:
        tools = [json.loads(hf_check.tool(rng, i)) for i in range(rng.randrange(1, 3))]
    return ref, wire, tools, cont


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def main():
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    binary, vocab_dir, cases = sys.argv[1], sys.argv[2], int(sys.argv[3])
    vocabs = hf_check.load_vocabs(vocab_dir)
    rng = random.Random(SEED)
    passed, failed, lines = 0, 0, []

    def fail(what):
        nonlocal failed
        failed += 1
        if len(lines) < hf_check.MAX_FAILURE_LINES:
            lines.append(what)

    with tempfile.TemporaryDirectory() as tmp:
        config = os.path.join(tmp, "sidecar.toml")
        hf_check.write_config(vocab_dir, config)
        port, grpc_port = hf_check.free_port(), hf_check.free_port()
        log = os.path.join(tmp, "sidecar.log")
        with open(log, "w") as out:
            server = subprocess.Popen([binary, "--config", config, "--listen", f"127.0.0.1:{grpc_port}",
                                       "--metrics-listen", "off", "--render-listen", f"127.0.0.1:{port}"],
                                      stdout=out, stderr=subprocess.STDOUT)
        try:
            start = time.monotonic()
            while True:
                if server.poll() is not None:
                    raise SystemExit(f"the server exited ({server.returncode}); its log:\n{hf_check.tail(log)}")
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
                if time.monotonic() - start > hf_check.READY_TIMEOUT_SECS:
                    raise SystemExit(f"no render node after {hf_check.READY_TIMEOUT_SECS}s:\n{hf_check.tail(log)}")
                time.sleep(0.2)

            for n in range(cases):
                family = hf_check.FAMILIES[n % len(hf_check.FAMILIES)]
                vocab = vocabs[family]
                ref, wire, tools, cont = conversation(rng, vocab, family)
                try:
                    expected = vocab.tok.apply_chat_template(ref, tools=tools, add_generation_prompt=not cont,
                                                             continue_final_message=cont, tokenize=True)
                    expected = list(expected["input_ids"] if hasattr(expected, "keys") else expected)
                except Exception as e:  # the template refused: so must the node
                    expected = e
                body = {"model": family, "messages": wire, "stream": False, "temperature": 0.7}
                if tools:
                    body["tools"] = tools
                if cont:
                    body["add_generation_prompt"] = False
                    body["continue_final_message"] = True
                status, answer = post(port, "/v1/chat/completions/render", body)
                if isinstance(expected, Exception):
                    if status == 400 and "error" in answer:
                        passed += 1
                    else:
                        fail(f"{family} case {n}: transformers refused ({expected}), the node answered {status}")
                    continue
                got = answer.get("token_ids")
                if status != 200 or got != expected:
                    at = first_difference(got or [], expected)
                    fail(f"{family} case {n}: status {status}, {len(got or [])} ids against {len(expected)}, "
                         f"first difference at {at}: {(got or [])[at:at + 5]} against {expected[at:at + 5]}"
                         f" {answer.get('error', '')}")
                    continue
                status, counted = post(port, "/tokenize", body)
                if status != 200 or counted.get("tokens") != expected or counted.get("count") != len(expected):
                    fail(f"{family} case {n}: /tokenize answered {status} with {counted.get('count')} tokens")
                    continue
                texts = [hf_check.text(rng, vocab) for _ in range(3)]
                status, rendered = post(port, "/v1/completions/render", {"model": family, "prompt": texts})
                want = [vocab.tok.encode(t) for t in texts]
                if status != 200 or [r.get("token_ids") for r in rendered] != want:
                    fail(f"{family} case {n}: /v1/completions/render differs ({status})")
                    continue
                status, plain = post(port, "/tokenize",
                                     {"model": family, "prompt": texts[0], "add_special_tokens": False})
                if status != 200 or plain.get("tokens") != vocab.tok.encode(texts[0], add_special_tokens=False):
                    fail(f"{family} case {n}: /tokenize of a text differs ({status})")
                    continue
                passed += 1
        finally:
            server.terminate()
            server.wait(timeout=30)
    for line in lines:
        print(line)
    print(f"render reference: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
