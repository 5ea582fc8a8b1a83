#!/usr/bin/env python3
"""The side-by-side comparison: the same exported requests through (a) LangChain + tiktoken
in-process, (b) priomptipy, (c) the sidecar through the Python gRPC client; optionally (d), the
library in-process, read from a criterion estimate. Prints throughput, median and p99 latency and the
ratios to (a); then where the paths disagree on what was kept, and why; writes everything as JSON.

Every path does one untimed warm pass over the workload first, then `--repeat` rounds of one timed
pass per path, interleaved (the fastest pass of each path is reported). The sidecar's first pass (from empty caches, right after run.py started it) is
reported as its cold pass. Two floor rows show what the Python client costs by itself: a trivial RPC
(CountTokens of "hi"), and the protobuf encoding of the requests and decoding of the responses
without any RPC. Each path's token total is checked by recounting its own output with tiktoken under
the chat formula, as the sidecar counts the request's model (gpt-4o: o200k_base; Claude: cl100k_base
plus 20%, thinking included).

Usage:
  python3 benches/compare/run.py WORKLOAD.jsonl [--sidecar BIN | --addr HOST:PORT] [--limit N]
      [--concurrency 8] [--batch 32] [--repeat 1] [--paths a,b,c] [--criterion DIR] [--json OUT]
"""

import argparse
import collections
import json
import os
import statistics
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402

PAIRS = (("a", "b"), ("a", "c"), ("b", "c"))


def process_cpu_seconds(pid):
    """User + system CPU seconds of process `pid` so far (Linux /proc; clock-tick resolution,
    10 ms here), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(fn, *args, server=None):
    """(results, seconds, 1-minute load average at the end, server CPU seconds or None): the CPU
    the sidecar process `server` (a pid) used during the pass, when given."""
    cpu = process_cpu_seconds(server) if server else None
    started = time.perf_counter()
    results = fn(*args)
    seconds = time.perf_counter() - started
    if cpu is not None:
        after = process_cpu_seconds(server)
        cpu = after - cpu if after is not None else None
    return results, seconds, os.getloadavg()[0], cpu


def figures(name: str, results: list, seconds: float, load: float, cpu=None) -> dict:
    lat = sorted(r.seconds for r in results)
    return {
        "server_cpu_us_per_request": cpu / len(results) * 1e6 if cpu is not None else None,
        "path": name,
        "load_average_1m": load,
        "requests": len(results),
        "seconds": seconds,
        "requests_per_second": len(results) / seconds,
        "median_ms": statistics.median(lat) * 1e3,
        "p99_ms": lat[min(len(lat) - 1, round(0.99 * (len(lat) - 1)))] * 1e3,
    }


def criterion_figures(directory: str) -> dict:
    """(d) from a criterion benchmark directory (e.g. target/criterion/compare/library_warm/
    replay_4k): the mean time of one pass over the workload divided by its request count."""
    with open(os.path.join(directory, "new", "estimates.json")) as f:
        mean_ns = json.load(f)["mean"]["point_estimate"]
    with open(os.path.join(directory, "new", "benchmark.json")) as f:
        bench = json.load(f)
    n = bench["throughput"]["Elements"]
    per = mean_ns / n / 1e9
    return {"path": f"(d) {bench['function_id']}/{bench['value_str']}", "criterion": bench["full_id"],
            "requests": n, "seconds": mean_ns / 1e9,
            "requests_per_second": 1 / per, "median_ms": per * 1e3, "p99_ms": None, "mean_only": True}


def run_paths(args, requests) -> tuple:
    """Every path's warm pass first, then `--repeat` rounds of one timed pass per path, interleaved
    so that a change of load on a shared machine hits every path alike; the fastest pass of each is
    reported (all are kept in the row as `all_requests_per_second`)."""
    jobs = []  # (results key or None, row name, function, arguments)
    rows, results, cold, server = [], {}, None, None
    if "a" in args.paths:
        import inprocess_langchain as a
        jobs.append(("a", a.NAME, a.run_pass, (requests,)))
    if "b" in args.paths:
        import priompt_path as b
        jobs.append(("b", b.NAME, b.run_pass, (requests,)))
    sidecar = None
    try:
        if "c" in args.paths:
            import sidecar_grpc as c
            sidecar = c.Sidecar(args.sidecar) if not args.addr else None
            addr = args.addr or sidecar.addr
            c.wait_serving(addr)
            wire = c.parse(requests)
            server = sidecar.proc.pid if sidecar else None
            if sidecar:  # just started: its caches are empty
                cold = figures(f"{c.NAME} sync, cold pass", *timed(c.run_sync, addr, wire, server=server))
            n = args.concurrency
            jobs += [("c", f"{c.NAME} sync", c.run_sync, (addr, wire)),
                     ("c-threads", f"{c.NAME} {n} threads", c.run_threads, (addr, wire, n)),
                     ("c-aio", f"{c.NAME} aio x{n}", c.run_aio, (addr, wire, n))]
            if args.batch:
                jobs.append(("c-batch", f"{c.NAME} AssembleBatch of {args.batch}", c.run_batch,
                             (addr, wire, args.batch)))
            jobs += [(None, "(c) floor: CountTokens('hi'), sync", c.run_floor_rpc, (addr, len(wire))),
                     (None, "(c) floor: protobuf encode + decode, no RPC", c.run_floor_codec,
                      (wire, c.fetch(addr, wire)))]
        for _, _, fn, fn_args in jobs:
            fn(*fn_args)
        passes = [[] for _ in jobs]
        for _ in range(args.repeat):
            for i, (key, _, fn, fn_args) in enumerate(jobs):
                passes[i].append(timed(fn, *fn_args, server=server if key and key.startswith("c") else None))
    finally:
        if sidecar:
            sidecar.close()
    for (key, name, _, _), done in zip(jobs, passes):
        best = min(done, key=lambda p: p[1])
        row = figures(name, *best)
        row["all_requests_per_second"] = [len(r) / s for r, s, _, _ in done]
        row["all_server_cpu_us_per_request"] = [cpu / len(r) * 1e6 for r, _, _, cpu in done if cpu is not None]
        res = best[0]
        rows.append(row)
        if key:
            results[key] = res
    if cold:
        rows.append(cold)
    for key in ("c-threads", "c-aio", "c-batch"):
        if key in results:
            same = all(x.evidence == y.evidence and x.turns == y.turns and x.reported_tokens == y.reported_tokens
                       for x, y in zip(results["c"], results.pop(key)))
            if not same:
                raise SystemExit("the sidecar answered differently under concurrency or in a batch")
    for d in args.criterion:
        rows.append(criterion_figures(d))
    base = next((r for r in rows if r["path"].startswith("(a)")), None)
    for r in rows:
        r["ratio_vs_a"] = r["requests_per_second"] / base["requests_per_second"] if base else None
    return rows, results


def honesty(key: str, res: list) -> dict:
    """Whether a path's reported totals are what tiktoken counts for its own output."""
    recounts = [r.recount() for r in res]
    return {
        "path": key,
        "reported_equals_recount": sum(r.reported_tokens == n for r, n in zip(res, recounts)),
        "recount_minus_reported": dict(collections.Counter(n - r.reported_tokens for r, n in zip(res, recounts))),
        "over_budget": sum(n > r.budget for r, n in zip(res, recounts)),
        "mean_fill": statistics.mean(n / r.budget for r, n in zip(res, recounts)),
        "used_compact_form": sum("compact" in r.evidence.values() for r in res),
        "summarized_turns": sum(bool(r.summarized) for r in res),
        "requests": len(res),
    }


def _leading_assistant_dropped(shorter, longer) -> bool:
    """`longer` keeps exactly one more turn than `shorter`, an assistant turn, at the start."""
    return bool(longer.turns) and longer.turns[1:] == shorter.turns and longer.turns[0].endswith("-a")


def _suffix(shorter: list, longer: list) -> bool:
    return len(longer) > len(shorter) and longer[len(longer) - len(shorter):] == shorter


def reasons(a, b, c) -> list:
    """Why the paths' kept sets differ on one request (any of them may be None). The turn ids of the
    replay workload end in -q (user) and -a (assistant); an agent session's in -call (assistant),
    -result (tool) and -user, its first turn is `task` (user)."""
    out = []
    if c and c.summarized:
        out.append("sidecar: turns that did not fit were compacted into one summary unit (compact before drop): "
                   f"{c.summarized}")
    if c and (c.cleared or c.thinking_dropped):
        out.append("sidecar: old tool results cleared and closed cycles' thinking dropped (lightening) before any "
                   f"turn is dropped: {len(c.cleared)} results, {len(c.thinking_dropped)} turns' thinking")
    if a and c and _suffix(a.turns, c.turns) and not _leading_assistant_dropped(a, c):
        out.append("langchain: trim_messages(start_on='human') keeps turns only from a user turn on (none when no "
                   "user turn is among the newest turns that fit), so older turns the sidecar keeps are left out: "
                   f"{len(c.turns) - len(a.turns)} turns")
    if a and c and _suffix(c.turns, a.turns):
        out.append("sidecar: its conversation window cuts at anchors that stay put from request to request (the "
                   f"prefix stays cached), leaving out older turns langchain fits: {len(a.turns) - len(c.turns)} turns")
    keepers = [n for n, r in (("the sidecar", c), ("priompt", b))
               if r and a and _leading_assistant_dropped(a, r) and r.recount() <= r.budget]
    if keepers:
        out.append("langchain: trim_messages(start_on='human') drops the oldest turn that fits because it is an "
                   f"assistant turn; {' and '.join(keepers)} {'keeps' if len(keepers) == 1 else 'keep'} it")
    if b:
        # Priompt accepts a prompt whose true total is up to `gap` over the limit; that changes what
        # it keeps exactly when its true total ends over the budget.
        gap = b.recount() - b.reported_tokens
        if gap + b.reported_tokens > b.budget:
            out.append(f"priompt: counts chat framing as 4(n-1)+3, {gap} tokens under the chat formula, so it "
                       "keeps content that does not fit and ends over the budget")
        for other, name in ((c, "sidecar"), (a, "langchain path")):
            if other and set(b.evidence) < set(other.evidence):
                out.append("priompt: its priority cutoff is global, so evidence the "
                           f"{name} still fits is cut: {sorted(set(other.evidence) - set(b.evidence))}")
                break
        if c and _suffix(b.turns, c.turns):
            out.append("priompt: its priority cutoff is global, so older turns the sidecar still fits are cut: "
                       f"{c.turns[:len(c.turns) - len(b.turns)]}")
    named = [(n, r) for n, r in (("langchain", a), ("priompt", b), ("sidecar", c)) if r]
    for i, (n1, r1) in enumerate(named):
        for n2, r2 in named[i + 1:]:
            diff = sorted(k for k in set(r1.evidence) & set(r2.evidence) if r1.evidence[k] != r2.evidence[k])
            if diff:
                out.append(f"{n1} vs {n2}: evidence kept in different forms (full or compact_form): {diff}")
    return out or ["unexplained"]


def _reason_key(why: str) -> str:
    """The reason without its per-request detail (after the last colon), for counting."""
    head, sep, _ = why.rpartition(": ")
    return head if sep and ":" in head else why


def disagreements(results: dict) -> dict:
    pairs = {}
    for x, y in PAIRS:
        if x not in results or y not in results:
            continue
        rx, ry = results[x], results[y]
        pairs[f"{x}-{y}"] = {
            "evidence_ids_differ": sum(set(p.evidence) != set(q.evidence) for p, q in zip(rx, ry)),
            "evidence_forms_differ": sum(set(p.evidence) == set(q.evidence) and p.evidence != q.evidence
                                         for p, q in zip(rx, ry)),
            "turns_differ": sum(p.turns != q.turns for p, q in zip(rx, ry)),
            "reported_tokens_differ": sum(p.reported_tokens != q.reported_tokens for p, q in zip(rx, ry)),
            "recounted_tokens_differ": sum(p.recount() != q.recount()
                                           for p, q in zip(rx, ry)),
        }
    n = len(next(iter(results.values())))
    differing, by_reason, first_of = 0, collections.Counter(), {}
    for i in range(n):
        rs = {k: results[k][i] for k in results}
        kept = {(json.dumps(r.evidence, sort_keys=True), tuple(r.turns)) for r in rs.values()}
        if len(kept) == 1:
            continue
        differing += 1
        for why in reasons(rs.get("a"), rs.get("b"), rs.get("c")):
            key = _reason_key(why)
            by_reason[key] += 1
            first_of.setdefault(key, i)
    examples = []
    for i in list(dict.fromkeys(first_of.values()))[:4]:
        rs = {k: results[k][i] for k in results}
        row = {"request_id": next(iter(rs.values())).request_id,
               "reasons": reasons(rs.get("a"), rs.get("b"), rs.get("c"))}
        for k, r in rs.items():
            row[k] = {"evidence": r.evidence, "turns": r.turns, "summarized": r.summarized,
                      "reported_tokens": r.reported_tokens, "recounted_tokens": r.recount(),
                      "budget": r.budget}
        examples.append(row)
    return {"pairs": pairs, "requests_with_any_difference": differing, "reasons": dict(by_reason.most_common()),
            "examples": examples}


def print_report(rows, honest, disagree, n):
    print(f"\n{'path':<48} {'req/s':>10} {'median ms':>10} {'p99 ms':>9} {'vs (a)':>9} {'load':>5} {'srv us':>7}")
    for r in rows:
        p99 = f"{r['p99_ms']:.3f}" if r["p99_ms"] is not None else "-"
        ratio = f"{r['ratio_vs_a']:.1f}x" if r["ratio_vs_a"] else "-"
        median = f"{r['median_ms']:.3f}" + ("*" if r.get("mean_only") else "")
        load = f"{r['load_average_1m']:.1f}" if "load_average_1m" in r else "-"
        cpu = r.get("server_cpu_us_per_request")
        cpu = f"{cpu:.0f}" if cpu is not None else "-"
        print(f"{r['path']:<48} {r['requests_per_second']:>10.1f} {median:>10} {p99:>9} {ratio:>9} {load:>5} {cpu:>7}")
    if any(r.get("mean_only") for r in rows):
        print("  * criterion: mean time per request of a whole pass (no per-request distribution)")
    print(f"  load: the 1-minute load average when the reported pass ended ({os.cpu_count()} CPUs)")
    print("  srv us: the sidecar's CPU (user + system, /proc, 10 ms ticks) per request during the reported pass")
    print(f"\ntoken totals, recounted with tiktoken ({n} requests):")
    for h in honest:
        print(f"  ({h['path']}) reported == recount: {h['reported_equals_recount']}, recount - reported: "
              f"{h['recount_minus_reported']}, over budget: {h['over_budget']}, mean fill {h['mean_fill']:.3f}, "
              f"compact_form used in {h['used_compact_form']}, turns summarized in {h['summarized_turns']}")
    print("\ndisagreements (requests):")
    for pair, d in disagree["pairs"].items():
        print(f"  {pair}: evidence ids {d['evidence_ids_differ']}, evidence forms {d['evidence_forms_differ']}, "
              f"turns {d['turns_differ']}, reported tokens {d['reported_tokens_differ']}, "
              f"recounted tokens {d['recounted_tokens_differ']}")
    print(f"  requests where the kept sets are not identical across the paths: "
          f"{disagree['requests_with_any_difference']}")
    for why, count in disagree["reasons"].items():
        print(f"    {count:>5}  {why}")
    for ex in disagree["examples"]:
        print(f"\n  example {ex['request_id']}:")
        for k in "abc":
            if k in ex:
                e = ex[k]
                ev = ", ".join(f"{i}{'(compact)' if f == 'compact' else ''}" for i, f in e["evidence"].items())
                print(f"    ({k}) turns {e['turns']}{' summarized ' + str(e['summarized']) if e['summarized'] else ''};"
                      f" evidence [{ev}]; tokens reported {e['reported_tokens']} / recounted {e['recounted_tokens']}"
                      f" / budget {e['budget']}")
        for why in ex["reasons"]:
            print(f"    why: {why}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workload", help="JSON lines from `cargo run --release --example export_workload`")
    ap.add_argument("--sidecar", default=os.path.join(common.ROOT, "target", "release", "context-assembler"),
                    help="the sidecar binary to start on 127.0.0.1:0 (default: target/release/context-assembler)")
    ap.add_argument("--addr", help="use a sidecar already listening here instead of starting one")
    ap.add_argument("--limit", type=int, default=0, help="only the first N requests")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--batch", type=int, default=32, help="requests per AssembleBatch call (0: skip that row)")
    ap.add_argument("--paths", default="a,b,c")
    ap.add_argument("--repeat", type=int, default=1,
                    help="rounds of one timed pass per path, interleaved; the fastest pass is reported")
    ap.add_argument("--criterion", action="append", default=[],
                    help="a criterion benchmark directory of `cargo bench --bench compare` to show as (d)")
    ap.add_argument("--json", help="write the figures, the checks and the per-request records here")
    args = ap.parse_args()
    args.paths = set(args.paths.split(","))

    requests = common.load(args.workload, args.limit)
    print(f"{len(requests)} requests from {args.workload}; one warm pass, then the fastest of {args.repeat} "
          "timed pass(es) per path")
    rows, results = run_paths(args, requests)
    honest = [honesty(k, results[k]) for k in "abc" if k in results]
    disagree = disagreements(results) if results else {"pairs": {}, "reasons": {}, "examples": []}
    print_report(rows, honest, disagree, len(requests))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({
                "workload": os.path.abspath(args.workload),
                "requests": len(requests),
                "throughput": rows,
                "token_checks": honest,
                "disagreements": disagree,
                "per_request": {k: [r.record() for r in v] for k, v in results.items()},
            }, f, indent=1)
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
