"""Render latency, side by side in one run: the sidecar's render node against Python transformers.

For each family folder and each size (about 1k, 8k and 32k tokens), the same conversations go through
  - python: tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True), what vLLM's
    render runs per request, in this process;
  - sidecar: POST /v1/chat/completions/render to a release sidecar over one keep-alive HTTP/1.1
    connection (client time: request sent to answer parsed).
Rounds alternate the two; the figure is the median per request over all rounds, and the ratio is
python / sidecar. Every answer's ids are checked against transformers' first.

Usage: python3 benches/render_compare.py BINARY VOCAB_DIR [ROUNDS]
  (build the binary with `cargo build --release`; VOCAB_DIR as .ci/hf_vocab.sh fetches it)
"""

import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
import hf_check  # noqa: E402

SIZES = (1_000, 8_000, 32_000)
FAMILIES = ("qwen3", "llama3_1")
PARAGRAPH = ("The sidecar measures every part of the prompt with the model's own tokenizer, reserves what may "
             "never be cut, and fills the rest of the budget by priority. ")


def conversation(tok, tokens):
    """A system prompt and alternating turns, about `tokens` tokens when rendered (the turns needed
    estimated from one turn's share, then a last one added or removed at a time)."""
    system = {"role": "system", "content": "You are a careful assistant. " * 20}

    def turns(n):
        return [system] + [{"role": "user" if i % 2 == 0 else "assistant",
                            "content": f"Turn {i}. " + PARAGRAPH * 6} for i in range(n)]

    def size(n):
        ids = tok.apply_chat_template(turns(n), add_generation_prompt=True, tokenize=True)
        # transformers 5 answers a BatchEncoding, 4 a list.
        return len(ids["input_ids"] if hasattr(ids, "keys") else ids)

    per_turn = (size(9) - size(1)) / 8
    n = max(1, int((tokens - size(1)) / per_turn) + 1)
    n += n % 2 == 0  # end with a user turn
    return turns(n)


def main():
    if len(sys.argv) not in (3, 4):
        raise SystemExit(__doc__)
    binary, vocab_dir = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) == 4 else 30
    vocabs = {f: hf_check.Vocab(f, os.path.join(vocab_dir, f)) for f in FAMILIES}
    with tempfile.TemporaryDirectory() as tmp:
        config = os.path.join(tmp, "sidecar.toml")
        hf_check.write_config(vocab_dir, config)
        port = hf_check.free_port()
        server = subprocess.Popen([binary, "--config", config, "--listen", f"127.0.0.1:{hf_check.free_port()}",
                                   "--metrics-listen", "off", "--render-listen", f"127.0.0.1:{port}"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            conn = None
            for _ in range(600):
                try:
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                    conn.request("GET", "/health")
                    conn.getresponse().read()
                    break
                except OSError:
                    time.sleep(0.2)
            print("| family | tokens | python apply_chat_template ms | sidecar render ms (HTTP) | ratio |")
            print("|---|---|---|---|---|")
            for family in FAMILIES:
                tok = vocabs[family].tok
                for size in SIZES:
                    messages = conversation(tok, size)
                    body = json.dumps({"model": family, "messages": messages})
                    expected = vocabs[family].chat_ids(messages)

                    def python():
                        return tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)

                    def sidecar():
                        conn.request("POST", "/v1/chat/completions/render", body,
                                     {"content-type": "application/json"})
                        return json.loads(conn.getresponse().read())

                    got = sidecar()["token_ids"]
                    if got != expected:
                        raise SystemExit(f"{family} {size}: the sidecar's ids differ from transformers'")
                    py, sc = [], []
                    for _ in range(rounds):
                        t = time.perf_counter()
                        python()
                        py.append(time.perf_counter() - t)
                        t = time.perf_counter()
                        sidecar()
                        sc.append(time.perf_counter() - t)
                    p, s = statistics.median(py) * 1e3, statistics.median(sc) * 1e3
                    print(f"| {family} | {len(expected):,} | {p:.2f} | {s:.3f} | {p / s:.1f}x |", flush=True)
        finally:
            server.terminate()
            server.wait(timeout=30)


if __name__ == "__main__":
    main()
