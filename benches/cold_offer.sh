#!/usr/bin/env bash
# Issue 20's cold-content workload: every request new (loadgen --cold), at a
# budget, offering about 1x, 2x, 4x and 8x that budget (loadgen --offer: more
# evidence items of the same size). Each offer runs RUNS times through a
# spawned release sidecar; the table gives the median server CPU per request,
# its phases, and the ratio to the 1x row (the target: 8x at most 2x of 1x).
#
#   bash benches/cold_offer.sh                 # 4k budget, 3 runs of 10 s each
#   BUDGET=32000 bash benches/cold_offer.sh
#   RUNS=1 DURATION=3s OFFERS="1 8" bash benches/cold_offer.sh   # a smoke
#   SIDECAR=/tmp/old/context-assembler TAG=old bash benches/cold_offer.sh
#       # another build (no cargo build; the loadgen beside it when there is one)
#
# Outputs: target/cold-offer/<tag><budget>-<offer>-<run>.json (loadgen --json).
set -euo pipefail
cd "$(dirname "$0")/.."

budget=${BUDGET:-4000}
runs=${RUNS:-3}
duration=${DURATION:-10s}
offers=${OFFERS:-1 2 4 8}
concurrency=${CONCURRENCY:-4}
sidecar=${SIDECAR:-target/release/context-assembler}
loadgen=target/release/loadgen
if [[ -n ${SIDECAR:-} ]]; then
  [[ -x $(dirname "$SIDECAR")/loadgen ]] && loadgen=$(dirname "$SIDECAR")/loadgen
else
  cargo build --release --locked --bin context-assembler --bin loadgen >&2
fi
tag=${TAG:+$TAG-}
out=target/cold-offer
mkdir -p "$out"

for offer in $offers; do
  for run in $(seq 1 "$runs"); do
    json="$out/$tag$budget-$offer-$run.json"
    echo "cold, budget $budget, offer ${offer}x, run $run" >&2
    "$loadgen" --spawn "$sidecar" --cold --offer "$offer" \
      --prompt-tokens "$budget" --users 100 --concurrency "$concurrency" --duration "$duration" \
      --progress-secs 0 --json "$json" >/dev/null
  done
done

python3 - "$out/$tag" "$budget" "$runs" $offers <<'EOF'
import json, statistics, sys
out, budget, runs, offers = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
phases = ["decode", "convert", "tokenize", "allocate", "render", "encode"]
print(f"cold content at a {budget}-token budget, median of {runs} run(s)")
print()
print("| offer | requests/s | server CPU µs/request | ratio to 1x | " + " / ".join(phases) + " µs |")
print("|---|---:|---:|---:|---|")
base = None
for offer in offers:
    rows = [json.load(open(f"{out}{budget}-{offer}-{r}.json")) for r in range(1, runs + 1)]
    for r in rows:
        assert r["requests"]["errors"] == 0, f"offer {offer}: {r['requests']['by_code']}"
    cpu = statistics.median(r["server"]["cpu_us_per_request"] for r in rows)
    rps = statistics.median(r["throughput"]["requests_per_second"] for r in rows)
    ph = [statistics.median(r["server"]["phase_us"].get(p, {}).get("per_request") or 0 for r in rows) for p in phases]
    base = base or cpu
    print(f"| {offer}x | {rps:,.0f} | {cpu:,.0f} | {cpu / base:.2f} | " + " / ".join(f"{x:,.0f}" for x in ph) + " |")
EOF
