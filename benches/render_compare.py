"""Render latency, side by side in one run: the sidecar's render node against Python transformers.

For each family folder and each size (about 1k, 8k and 32k tokens), the same conversations go through
  - python: tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True), what vLLM's
    render runs per request, in this process;
  - sidecar: POST /v1/chat/completions/render to a release sidecar over one keep-alive HTTP/1.1
    connection (client time: request sent to the answer's last byte received), and apart from it
    what this Python client then spends decoding the answer's JSON (json.loads of thousands of
    numbers, 0.7 ms at 8k here: the client's cost, which a Go router pays at a fraction of it).
Rounds alternate the two; the figure is the median per request over all rounds, and the ratio is
python / sidecar (and python / (sidecar + decode)). Every answer's ids are checked against
transformers'.

Then, when `wrk` is on the PATH, throughput at 8k tokens with the whole machine: the sidecar under wrk
(4 keep-alive connections, one thread) against transformers in two processes (one per core), each
rendering the same conversation in a loop; requests per second over THROUGHPUT_SECS (default 5).

Usage: python3 benches/render_compare.py BINARY VOCAB_DIR [ROUNDS]
  (build the binary with `cargo build --release`; VOCAB_DIR as .ci/hf_vocab.sh fetches it)
"""

import contextlib
import http.client
import json
import multiprocessing
import os
import re
import shutil
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


@contextlib.contextmanager
def sidecar(binary, vocab_dir, tmp):
    """A release sidecar whose render node serves every family folder of `vocab_dir` on a free port, until
    the block ends: (its port, a keep-alive connection to it, its pid)."""
    config = os.path.join(tmp, "sidecar.toml")
    hf_check.write_config(vocab_dir, config)
    port = hf_check.free_port()
    server = subprocess.Popen([binary, "--config", config, "--listen", f"127.0.0.1:{hf_check.free_port()}",
                               "--metrics-listen", "off", "--render-listen", f"127.0.0.1:{port}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                conn.request("GET", "/health")
                conn.getresponse().read()
                break
            except OSError:
                time.sleep(0.2)
        else:
            raise SystemExit("the sidecar did not answer /health")
        yield port, conn, server.pid
    finally:
        server.terminate()
        server.wait(timeout=30)


def main():
    if len(sys.argv) not in (3, 4):
        raise SystemExit(__doc__)
    binary, vocab_dir = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) == 4 else 30
    vocabs = {f: hf_check.Vocab(f, os.path.join(vocab_dir, f)) for f in FAMILIES}
    with tempfile.TemporaryDirectory() as tmp:
        with sidecar(binary, vocab_dir, tmp) as (port, conn, _):
            print("| family | tokens | python apply_chat_template ms | sidecar render ms (HTTP) | ratio "
                  "| client's json.loads ms | ratio with it |")
            print("|---|---|---|---|---|---|---|")
            for family in FAMILIES:
                tok = vocabs[family].tok
                for size in SIZES:
                    messages = conversation(tok, size)
                    body = json.dumps({"model": family, "messages": messages})
                    expected = vocabs[family].chat_ids(messages)

                    def python():
                        return tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)

                    def over_http():
                        conn.request("POST", "/v1/chat/completions/render", body,
                                     {"content-type": "application/json"})
                        return conn.getresponse().read()

                    py, sc, dec = [], [], []
                    for _ in range(rounds):
                        t = time.perf_counter()
                        python()
                        py.append(time.perf_counter() - t)
                        t = time.perf_counter()
                        answer = over_http()
                        sc.append(time.perf_counter() - t)
                        t = time.perf_counter()
                        got = json.loads(answer)["token_ids"]
                        dec.append(time.perf_counter() - t)
                        if got != expected:
                            raise SystemExit(f"{family} {size}: the sidecar's ids differ from transformers'")
                    p, s, d = (statistics.median(x) * 1e3 for x in (py, sc, dec))
                    print(f"| {family} | {len(expected):,} | {p:.2f} | {s:.3f} | {p / s:.1f}x | {d:.3f} "
                          f"| {p / (s + d):.1f}x |", flush=True)
            if shutil.which("wrk"):
                throughput(vocabs, port, tmp)


def python_loop(args):
    """Renders `messages` with `tok` for `secs` seconds; how many times."""
    tok, messages, secs = args
    n, end = 0, time.perf_counter() + secs
    while time.perf_counter() < end:
        tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        n += 1
    return n


def throughput(vocabs, port, tmp):
    secs = float(os.environ.get("THROUGHPUT_SECS", "5"))
    print()
    print("| family | tokens | python requests/s (2 processes) | sidecar requests/s (wrk, 4 connections) | ratio |")
    print("|---|---|---|---|---|")
    for family in FAMILIES:
        tok = vocabs[family].tok
        messages = conversation(tok, 8_000)
        tokens = len(vocabs[family].chat_ids(messages))
        with multiprocessing.get_context("fork").Pool(2) as pool:
            py = sum(pool.map(python_loop, [(tok, messages, secs)] * 2)) / secs
        body = os.path.join(tmp, f"{family}.json")
        with open(body, "w", encoding="utf-8") as f:
            json.dump({"model": family, "messages": messages}, f)
        script = os.path.join(tmp, f"{family}.lua")
        with open(script, "w", encoding="utf-8") as f:
            f.write('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
                    f'wrk.body = io.open({json.dumps(body)}):read("*a")\n')
        out = subprocess.run(["wrk", "-t1", "-c4", f"-d{secs:g}s", "-s", script,
                              f"http://127.0.0.1:{port}/v1/chat/completions/render"],
                             capture_output=True, text=True, check=True).stdout
        if "Non-2xx" in out:
            raise SystemExit(f"{family}: the sidecar refused requests under load:\n{out}")
        sc = float(re.search(r"Requests/sec:\s*([0-9.]+)", out).group(1))
        print(f"| {family} | {tokens:,} | {py:.1f} | {sc:.1f} | {sc / py:.1f}x |", flush=True)


if __name__ == "__main__":
    main()
