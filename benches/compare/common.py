"""What the three Python-side paths share: the workload reader, tiktoken counting under the chat
formula, the evidence wrapper, and the per-request result record.

Every path turns one request into a `Result`: the messages it would send, the evidence it kept (id ->
"full" or "compact"), the conversation turns it kept (ids), the total it reports for its own output,
and the time it took. `run.py` compares the records; it never trusts a path's own total (it recounts
each path's messages with tiktoken).
"""

import base64
import dataclasses
import json
import os
import re
import subprocess

import tiktoken
import tiktoken.load
import tiktoken.registry
import tiktoken_ext.openai_public as openai_public

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENCODING = "o200k_base"  # gpt-4o, the replay workload's model


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


def _encoding():
    """OpenAI's o200k_base. tiktoken downloads its vocabulary on first use; on a machine that can
    reach only package registries it is built, as tests/reference/tiktoken_check.py does, from the
    copy vendored in tiktoken-rs, after checking the sha256 tiktoken expects (OpenAI's bytes). It is
    registered under its name so that priomptipy's `tiktoken.get_encoding` finds it too."""
    assets = _vendored_assets()
    if assets is None:
        return tiktoken.get_encoding(ENCODING)

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
        enc = tiktoken.Encoding(**openai_public.o200k_base())
    finally:
        openai_public.load_tiktoken_bpe = original
    tiktoken.registry.ENCODINGS[ENCODING] = enc
    return enc


ENC = _encoding()

# OpenAI's chat formula (and the sidecar's, see the proto): 3 per message, plus the role and the
# content as ordinary text, plus 3 that prime the reply.
PER_MESSAGE = 3
REPLY_PRIMING = 3

ROLES = {"ROLE_SYSTEM": "system", "ROLE_USER": "user", "ROLE_ASSISTANT": "assistant", "ROLE_TOOL": "tool"}
EVIDENCE = "BLOCK_KIND_EVIDENCE"
TURN_KINDS = ("BLOCK_KIND_HISTORY", "BLOCK_KIND_RECENT_TURNS")


def count(text: str) -> int:
    """Tokens of `text` as ordinary text. tiktoken keeps no cache: every call encodes again."""
    return len(ENC.encode_ordinary(text))


ROLE_TOKENS = {role: count(role) for role in ROLES.values()}


def message_tokens(role: str, content: str) -> int:
    return PER_MESSAGE + ROLE_TOKENS[role] + count(content)


def chat_tokens(messages) -> int:
    """The whole prompt under the chat formula; `messages` are (role, content) pairs."""
    return REPLY_PRIMING + sum(message_tokens(role, content) for role, content in messages)


@dataclasses.dataclass
class Result:
    """One path's answer to one request."""

    request_id: str
    budget: int
    messages: list  # [(role, content)]
    evidence: dict  # id -> "full" | "compact"
    turns: list  # kept turn ids, chronological
    reported_tokens: int
    seconds: float = 0.0
    summarized: list = dataclasses.field(default_factory=list)  # sidecar: turns covered by its summary
    error: str = ""

    def record(self, recount: bool = True) -> dict:
        """A JSON-able record (messages left out: they are large and are prompt content)."""
        out = {
            "request_id": self.request_id,
            "budget": self.budget,
            "evidence": self.evidence,
            "turns": self.turns,
            "summarized": self.summarized,
            "reported_tokens": self.reported_tokens,
            "seconds": self.seconds,
            "message_roles": [role for role, _ in self.messages],
        }
        if recount:
            out["recounted_tokens"] = chat_tokens(self.messages)
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
