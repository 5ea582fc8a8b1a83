"""Cross-check of the sidecar's token accounting against OpenAI's tiktoken.

Builds OpenAI's own encodings (tiktoken's published patterns and special
tokens) from the vocabulary files vendored in the tiktoken-rs crate, after
checking each file's sha256 against the hash tiktoken itself expects: the
vocabularies are OpenAI's, byte for byte. Then assembles many random requests
with `context-assembler assemble --jsonl -` and recounts every returned prompt
from scratch under the chat formula:

    3 + sum over messages of (3 + tokens(role) + tokens(content))

Usage: python3 tests/reference/tiktoken_check.py [PATH_TO_BINARY] [CASES]
"""

import base64
import json
import os
import random
import re
import subprocess
import sys

import tiktoken
import tiktoken.load
import tiktoken_ext.openai_public as openai_public

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def vendored_assets():
    meta = json.loads(
        subprocess.check_output(
            ["cargo", "metadata", "--format-version", "1", "--locked"], cwd=ROOT
        )
    )
    for pkg in meta["packages"]:
        if pkg["name"] == "tiktoken-rs":
            return os.path.join(os.path.dirname(pkg["manifest_path"]), "assets")
    raise SystemExit("tiktoken-rs is not in the dependency graph")


def openai_encodings():
    assets = vendored_assets()

    def local_bpe(url, expected_hash=None):
        path = os.path.join(assets, url.rsplit("/", 1)[-1])
        with open(path, "rb") as f:
            data = f.read()
        if expected_hash and not tiktoken.load.check_hash(data, expected_hash):
            raise SystemExit(f"{path} is not OpenAI's file (sha256 mismatch)")
        ranks = {}
        for line in data.splitlines():
            if line:
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
        return ranks

    openai_public.load_tiktoken_bpe = local_bpe
    return {
        "o200k_base": tiktoken.Encoding(**openai_public.o200k_base()),
        "cl100k_base": tiktoken.Encoding(**openai_public.cl100k_base()),
    }


ATOMS = [
    "a", "Z", "hello", " world", "HTTP", "'s", "'LL", "'", '"', ".", ",", "!?", "<", ">", "/", "</",
    "</document>", "<document id=\"x\">", "&", " ", "  ", "\t", "\n", "\r\n", "\n\n", " \n", "é",
    "e\u0301", "日本語", "ß", "Ω", "😀", "<|endoftext|>", "<|fim_prefix|>", "fn main() {", "}", "_",
    "-", "==", "1234567", "3.14", "   \n   ", "...", "—", "\u00a0", "ﬁ", "ＡＢＣ", "Ⅻ", "٣",
]


def text(rng, max_atoms=40):
    return "".join(rng.choice(ATOMS) for _ in range(rng.randrange(max_atoms)))


def item(rng, i, kind):
    it = {"id": f"{kind}-{i}", "content": text(rng), "score": rng.random()}
    if rng.random() < 0.3:
        it["compactForm"] = text(rng, 8)
    if rng.random() < 0.2:
        it["source"] = text(rng, 3)
    if rng.random() < 0.5:
        it["trusted"] = True
    return it


def turns(rng, prefix):
    out = []
    for n in range(rng.randrange(6)):
        r = rng.random()
        if r < 0.4:
            out.append({"id": f"{prefix}u{n}", "role": "ROLE_USER", "content": text(rng)})
        elif r < 0.7:
            out.append({"id": f"{prefix}a{n}", "role": "ROLE_ASSISTANT", "content": text(rng)})
        else:
            call = f"{prefix}c{n}"
            out.append({"id": f"{prefix}a{n}", "role": "ROLE_ASSISTANT", "content": text(rng), "toolCallIds": [call]})
            out.append({"id": f"{prefix}t{n}", "role": "ROLE_TOOL", "toolCallId": call, "content": text(rng)})
    return out


def request(rng, n):
    blocks = [
        {"name": "state", "kind": "BLOCK_KIND_STATE", "items": [item(rng, 0, "s")]},
        {"name": "evidence", "kind": "BLOCK_KIND_EVIDENCE", "items": [item(rng, i, "e") for i in range(rng.randrange(8))]},
        {"name": "memory", "kind": "BLOCK_KIND_MEMORY", "items": [item(rng, i, "m") for i in range(rng.randrange(4))]},
        {"name": "summary", "kind": "BLOCK_KIND_SUMMARY", "items": [
            {"id": "sum", "content": "".join(rng.choice(["One. ", "Two! ", "Three?\n", text(rng, 5)]) for _ in range(8))}
        ]},
        {"name": "history", "kind": "BLOCK_KIND_HISTORY", "items": turns(rng, "h")},
        {"name": "recent", "kind": "BLOCK_KIND_RECENT_TURNS", "items": turns(rng, "r")},
    ]
    return {
        "requestId": f"ref-{n}",
        "model": rng.choice(["gpt-4o", "gpt-4.1-mini", "o3", "gpt-4", "gpt-3.5-turbo"]),
        "maxInputTokens": rng.randrange(150, 1500),
        "staticSegments": [{"id": f"seg{i}", "content": text(rng)} for i in range(rng.randrange(3))],
        "blocks": blocks,
        "query": "q " + text(rng),
    }


ROLES = {"ROLE_SYSTEM": "system", "ROLE_USER": "user", "ROLE_ASSISTANT": "assistant", "ROLE_TOOL": "tool"}


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "target", "debug", "context-assembler")
    cases = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    encodings = openai_encodings()
    rng = random.Random(20261122)
    passed = failed = skipped = 0
    requests = [request(rng, n) for n in range(cases)]
    proc = subprocess.run(
        [binary, "assemble", "--jsonl", "-"],
        input="".join(json.dumps(r) + "\n" for r in requests).encode(),
        capture_output=True,
        check=True,
    )
    lines = proc.stdout.decode().splitlines()
    if len(lines) != cases:
        raise SystemExit(f"expected {cases} answers, got {len(lines)}")
    for n, line in enumerate(lines):
        resp = json.loads(line)
        if "error" in resp:
            problem = overflow_problem(resp["error"], requests[n], encodings)
            if problem is None:
                skipped += 1
            else:
                print(f"case {n}: {problem}")
                failed += 1
            continue
        enc = encodings[resp["usage"]["tokenizer"]]
        recount = 3 + sum(
            3 + len(enc.encode_ordinary(ROLES[m["role"]])) + len(enc.encode_ordinary(m.get("content", "")))
            for m in resp["messages"]
        )
        total = resp["usage"]["totalTokens"]
        if recount == total and total <= resp["usage"]["budget"]:
            passed += 1
        else:
            print(f"case {n}: usage {total}, tiktoken recount {recount}, budget {resp['usage']['budget']}")
            failed += 1
    print(f"reference: {passed} passed, {failed} failed, {skipped} over budget (checked)")
    # Budgets are drawn well above what a request cannot cut: an overflow is
    # the exception (about 1 in 100), so many more say the counts are off.
    if skipped * 20 > cases:
        print(f"{skipped} of {cases} cases were refused as over budget: more than 1 in 20")
        failed += 1
    sys.exit(1 if failed or passed == 0 else 0)


# The encoding of each model the cases draw (OpenAI's published table).
ENCODING_OF = {
    "gpt-4o": "o200k_base",
    "gpt-4.1-mini": "o200k_base",
    "o3": "o200k_base",
    "gpt-4": "cl100k_base",
    "gpt-3.5-turbo": "cl100k_base",
}

OVERFLOW = re.compile(r"non-cuttable content \((\d+) tokens\) exceeds the budget \((\d+)\) of model (\S+):")


def overflow_problem(error, req, encodings):
    """None when a BUDGET_OVERFLOW answer is one: its figures say the
    non-cuttable content exceeds the budget, the budget is within the
    request's, and tiktoken counts at least the static prefix and the query
    (which can never be cut) in what it calls non-cuttable."""
    if error.get("code") != "BUDGET_OVERFLOW":
        return f"unexpected error {error}"
    m = OVERFLOW.match(error.get("message", ""))
    if not m:
        return f"BUDGET_OVERFLOW without its figures: {error}"
    needed, budget, model = int(m.group(1)), int(m.group(2)), m.group(3)
    if not req["model"].startswith(model):
        return f"overflow names model {model}, the request {req['model']}"
    if needed <= budget or budget > req["maxInputTokens"]:
        return f"overflow of {needed} tokens in a budget of {budget} (max_input_tokens {req['maxInputTokens']})"
    enc = encodings[ENCODING_OF[req["model"]]]
    floor = len(enc.encode_ordinary(req["query"])) + sum(
        len(enc.encode_ordinary(s["content"])) for s in req["staticSegments"]
    )
    if needed < floor:
        return f"non-cuttable content of {needed} tokens, but the static prefix and query alone count {floor}"
    return None


if __name__ == "__main__":
    main()
