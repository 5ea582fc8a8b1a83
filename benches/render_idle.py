"""What an idle server costs a render request: the same 8k-token chat render POSTed 40 times per mode,
back to back, and after 12 ms of the client sleeping, spinning, or running transformers' own render;
the client's median latency and the server's CPU per request (all its threads, from
/proc/PID/task/*/schedstat).

Usage: python3 benches/render_idle.py BINARY VOCAB_DIR [FAMILY]
"""

import glob
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_check  # noqa: E402
import render_compare  # noqa: E402

CALLS = 40


def main():
    if len(sys.argv) not in (3, 4):
        raise SystemExit(__doc__)
    binary, vocab_dir = sys.argv[1], sys.argv[2]
    family = sys.argv[3] if len(sys.argv) == 4 else "qwen3"
    vocab = hf_check.Vocab(family, os.path.join(vocab_dir, family))
    messages = render_compare.conversation(vocab.tok, 8_000)
    body = json.dumps({"model": family, "messages": messages})
    with tempfile.TemporaryDirectory() as tmp:
        with render_compare.sidecar(binary, vocab_dir, tmp) as (_, conn, pid):
            def cpu_ns():
                return sum(int(open(f).read().split()[0]) for f in glob.glob(f"/proc/{pid}/task/*/schedstat"))

            def render():
                t = time.perf_counter()
                conn.request("POST", "/v1/chat/completions/render", body, {"content-type": "application/json"})
                conn.getresponse().read()
                return time.perf_counter() - t

            def spin():
                end = time.perf_counter() + 0.012
                while time.perf_counter() < end:
                    pass

            modes = [
                ("back to back", lambda: None),
                ("after 12 ms asleep", lambda: time.sleep(0.012)),
                ("after 12 ms spinning", spin),
                ("after transformers' render", lambda: vocab.tok.apply_chat_template(
                    messages, add_generation_prompt=True, tokenize=True)),
            ]
            print(f"| {family} 8k, mode | client p50 ms | server CPU ms per request |")
            print("|---|---:|---:|")
            for name, before in modes:
                times, start = [], cpu_ns()
                for _ in range(CALLS):
                    before()
                    times.append(render())
                print(f"| {name} | {statistics.median(times) * 1e3:.3f} | {(cpu_ns() - start) / CALLS / 1e6:.3f} |")


if __name__ == "__main__":
    main()
