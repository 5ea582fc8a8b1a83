#!/usr/bin/env python3
"""Latency of the preview's POST /api/assemble on the ~32k-token example, as
the budget slider sends it: a sweep of budgets, warm (one sweep first).

Usage: python3 benches/preview_latency.py BINARY [RUNS]

Prints the median and p90 of the round trip (client side, a fresh HTTP
connection per call as the browser's fetch may use) and of the server's own
assembly time (`view.assembleMicros`), in milliseconds.
"""

import json
import statistics
import subprocess
import sys
import time
import urllib.request


def main():
    binary = sys.argv[1]
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    proc = subprocess.Popen([binary, "preview", "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().strip().removeprefix("preview listening on ") + "/api/assemble"
        budgets = list(range(32_000, 7_999, -1_000))

        def call(budget):
            body = json.dumps({"source": "example:rag-32k", "maxInputTokens": budget}).encode()
            req = urllib.request.Request(url, data=body, headers={"content-type": "application/json"})
            start = time.perf_counter()
            with urllib.request.urlopen(req) as r:
                answer = json.load(r)
            return (time.perf_counter() - start) * 1000, answer["view"]["assembleMicros"] / 1000

        for b in budgets:
            call(b)
        trips, server = [], []
        for _ in range(runs):
            for b in budgets:
                t, s = call(b)
                trips.append(t)
                server.append(s)
        q = lambda xs, p: sorted(xs)[min(len(xs) - 1, int(len(xs) * p))]
        print(f"{len(trips)} calls over {len(budgets)} budgets (32000..8000), warm")
        print(f"round trip ms: median {statistics.median(trips):.2f}  p90 {q(trips, 0.9):.2f}  max {max(trips):.2f}")
        print(f"assembly ms:   median {statistics.median(server):.2f}  p90 {q(server, 0.9):.2f}  max {max(server):.2f}")
    finally:
        proc.kill()
        proc.wait()


if __name__ == "__main__":
    main()
