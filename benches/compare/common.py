"""What the three Python-side paths share: the workload reader, tiktoken counting under the chat
formula (as the sidecar's default model table counts the request's model), the evidence wrapper, and
the per-request result record.

Every path turns one request into a `Result`: the messages it would send, the evidence it kept (id ->
"full" or "compact"), the conversation turns it kept (ids), the total it reports for its own output,
and the time it took. `run.py` compares the records; it never trusts a path's own total (it recounts
each path's messages with tiktoken).
"""

import base64
import dataclasses
import functools
import json
import os
import re
import subprocess

import tiktoken
import tiktoken.load
import tiktoken.registry
import tiktoken_ext.openai_public as openai_public

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENCODING = "o200k_base"  # gpt-4o, the replay workload's model (and the one priompt counts with)


@functools.cache
def _vendored_assets():
    """The vocabulary files vendored in the tiktoken-rs crate (a dev-dependency), or None."""
    try:
        meta = json.loads(subprocess.check_output(
            ["cargo", "metadata", "--format-version", "1", "--locked"], cwd=ROOT, stderr=subprocess.DEVNULL))
    except (OSError, subprocess.CalledProcessError):
        return None
    for pkg in meta["packages"]:
        if pkg["name"] == "tiktoken-rs":
            return os.path.join(os.path.dirname(pkg["manifest_path"]), "assets")
    return None


def _encoding(name: str):
    """OpenAI's encoding `name` (o200k_base or cl100k_base). tiktoken downloads its vocabulary on first
    use; on a machine that can reach only package registries it is built, as
    tests/reference/tiktoken_check.py does, from the copy vendored in tiktoken-rs, after checking the
    sha256 tiktoken expects (OpenAI's bytes). It is registered under its name so that priomptipy's
    `tiktoken.get_encoding` finds it too."""
    assets = _vendored_assets()
    if assets is None:
        return tiktoken.get_encoding(name)

    def local_bpe(url, expected_hash=None):
        path = os.path.join(assets, url.rsplit("/", 1)[-1])
        with open(path, "rb") as f:
            data = f.read()
        if expected_hash and not tiktoken.load.check_hash(data, expected_hash):
            raise SystemExit(f"{path} is not OpenAI's file (sha256 mismatch)")
        return {base64.b64decode(t): int(r) for t, r in (line.split() for line in data.splitlines() if line)}

    original = openai_public.load_tiktoken_bpe
    openai_public.load_tiktoken_bpe = local_bpe
    try:
        enc = tiktoken.Encoding(**getattr(openai_public, name)())
    finally:
        openai_public.load_tiktoken_bpe = original
    tiktoken.registry.ENCODINGS[name] = enc
    return enc


ENC = _encoding(ENCODING)
_ENCODINGS = {ENCODING: ENC}

# OpenAI's chat formula (and the sidecar's, see the proto): 3 per message, plus the role and the
# content as ordinary text, plus 3 that prime the reply.
PER_MESSAGE = 3
REPLY_PRIMING = 3

ROLES = {"ROLE_SYSTEM": "system", "ROLE_USER": "user", "ROLE_ASSISTANT": "assistant", "ROLE_TOOL": "tool"}
EVIDENCE = "BLOCK_KIND_EVIDENCE"
TURN_KINDS = ("BLOCK_KIND_HISTORY", "BLOCK_KIND_RECENT_TURNS")


class Counting:
    """How the sidecar's default model table (config/default.toml) counts a model: an OpenAI encoding,
    exact or an estimate of `ceil(count * (100 + margin) / 100)` per part (the role, the content, each
    thinking text), under the chat formula; and whether the provider reads the thinking passed back
    (Anthropic does: each non-redacted thinking text counts with its turn; OpenAI does not)."""

    def __init__(self, encoding: str, margin_percent: int = 0, reads_thinking: bool = False):
        if encoding not in _ENCODINGS:
            _ENCODINGS[encoding] = _encoding(encoding)
        self.encoding = _ENCODINGS[encoding]
        self.margin_percent = margin_percent
        self.reads_thinking = reads_thinking
        self.role_tokens = {role: self.count(role) for role in ROLES.values()}

    def count(self, text: str) -> int:
        """Tokens of `text` as ordinary text. tiktoken keeps no cache: every call encodes again."""
        n = len(self.encoding.encode_ordinary(text))
        return -(-n * (100 + self.margin_percent) // 100) if self.margin_percent else n

    def message(self, role: str, content: str, thinking=()) -> int:
        """One message: 3 + role + content, and its thinking texts where the provider reads them."""
        own = PER_MESSAGE + self.role_tokens[role] + self.count(content)
        if self.reads_thinking:
            own += sum(self.count(t) for t in thinking)
        return own

    def chat(self, messages) -> int:
        """The whole prompt; `messages` are (role, content) or (role, content, thinking texts)."""
        return REPLY_PRIMING + sum(self.message(*m) for m in messages)


# gpt-4o (the replay, chat and tool-heavy workloads): o200k_base, exact.
GPT_4O = Counting(ENCODING)


@functools.cache
def _claude() -> Counting:
    """The table's `claude` entry (the agent workload's claude-sonnet-4-5): cl100k_base with a 20%
    margin, built on first use. The margin adapts only from ReportUsage feedback, which the bench
    never sends."""
    return Counting("cl100k_base", margin_percent=20, reads_thinking=True)


def counting(model: str) -> Counting:
    """The counting of `model`, as the sidecar's default model table resolves it."""
    if model == "gpt-4o" or model.startswith("gpt-4o-"):
        return GPT_4O
    if model == "claude" or model.startswith("claude-"):
        return _claude()
    raise SystemExit(f"model {model!r}: the comparison counts gpt-4o and claude models only")


@dataclasses.dataclass
class Result:
    """One path's answer to one request."""

    request_id: str
    budget: int
    messages: list  # [(role, content)] or [(role, content, thinking texts the provider reads)]
    evidence: dict  # id -> "full" | "compact"
    turns: list  # kept turn ids, chronological
    reported_tokens: int
    seconds: float = 0.0
    summarized: list = dataclasses.field(default_factory=list)  # sidecar: turns covered by its summary
    error: str = ""
    model: str = "gpt-4o"  # the request's: how its messages are recounted
    cleared: list = dataclasses.field(default_factory=list)  # sidecar: tool results kept with content cleared
    thinking_dropped: list = dataclasses.field(default_factory=list)  # sidecar: turns kept without thinking

    def recount(self) -> int:
        """This path's output counted from scratch as the sidecar counts the request's model."""
        return counting(self.model).chat(self.messages)

    def record(self, recount: bool = True) -> dict:
        """A JSON-able record (messages left out: they are large and are prompt content)."""
        out = {
            "request_id": self.request_id,
            "budget": self.budget,
            "evidence": self.evidence,
            "turns": self.turns,
            "summarized": self.summarized,
            "cleared": self.cleared,
            "thinking_dropped": self.thinking_dropped,
            "reported_tokens": self.reported_tokens,
            "seconds": self.seconds,
            "message_roles": [m[0] for m in self.messages],
        }
        if recount:
            out["recounted_tokens"] = self.recount()
        if self.error:
            out["error"] = self.error
        return out


def load(path: str, limit: int = 0) -> list:
    """The JSON lines of `export_workload`, each as the raw line (for json_format.Parse) and as a
    dict in the proto3 JSON mapping (lowerCamelCase names, enums as names, unset fields absent)."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            out.append((line, json.loads(line)))
            if limit and len(out) == limit:
                break
    return out


def blocks_of(req: dict, kinds) -> list:
    return [b for b in req.get("blocks", []) if b.get("kind") in kinds]


def ranked_evidence(req: dict) -> list:
    """Evidence items by descending score, ties in request order (as the sidecar ranks them)."""
    items = [it for b in blocks_of(req, (EVIDENCE,)) for it in b.get("items", [])]
    order = sorted(range(len(items)), key=lambda i: (-items[i].get("score", 0.0), i))
    return [items[i] for i in order]


def turns_of(req: dict) -> list:
    """Conversation turns, chronological (HISTORY blocks, then RECENT_TURNS)."""
    out = []
    for kind in TURN_KINDS:
        for b in blocks_of(req, (kind,)):
            out.extend(b.get("items", []))
    return out


# The sidecar's wrapper: a `<` that would open or close one of its tags inside content is escaped,
# so retrieved text can neither close its wrapper nor forge another.
_TAG = re.compile(r"<(?=[ \t\n\x0c\r]*/?[ \t\n\x0c\r]*(?:document|memory|state|summary))", re.IGNORECASE)


def _attr(value: str) -> str:
    return (value.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")
            .replace(">", "&gt;").replace("\n", "&#10;").replace("\r", "&#13;"))


def document_unit(item: dict, compact: bool = False) -> str:
    """`<document id=".." source=".." trust="untrusted" [form="compact"]>\\n...\\n</document>\\n`,
    the unit the sidecar renders for an evidence item, so token totals are comparable."""
    text = item.get("compactForm", "") if compact else item.get("content", "")
    head = f'<document id="{_attr(item.get("id", ""))}"'
    if item.get("source"):
        head += f' source="{_attr(item["source"])}"'
    if not item.get("trusted", False):
        head += ' trust="untrusted"'
    if compact:
        head += ' form="compact"'
    return f"{head}>\n{_TAG.sub('&lt;', text)}\n</document>\n"
