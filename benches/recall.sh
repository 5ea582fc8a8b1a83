#!/usr/bin/env bash
# The recall-latency figures of docs/benchmarks/history.md ("Recall latency
# (memory store)"): examples/recall_bench.rs, built in release, for SQLite and
# PostgreSQL at 10k and 1M stored memories (~1000 per subject). Each case is
# filled once (its insert throughput is measured then) and measured RUNS
# times, the later runs reusing the filled store (--reuse); the table at the
# end gives the median of each figure over the runs.
#
#   bash benches/recall.sh                  # the matrix, 3 runs each (1M inserts take minutes)
#   bash benches/recall.sh --quick          # CI smoke: 2k memories, 200 queries, 1 run
#                                           # (every run that fills its store also checks 200
#                                           # answers against what it stored: subject, scope,
#                                           # count; a wrong answer fails it)
#   bash benches/recall.sh --worst          # also SQLite 1M with one subject holding everything
#                                           # (WORST_QUERIES, default 200, recalls per run)
#   RUNS=5 QUERIES=5000 bash benches/recall.sh
#   KEEP=1 bash benches/recall.sh           # reuse stores left by an earlier run (no refill)
#   BACKENDS=postgres bash benches/recall.sh  # one backend only
#
# PostgreSQL cases run when CONTEXT_ASSEMBLER_TEST_POSTGRES_URL is set; its
# database's memory tables are dropped, recreated and refilled. A throwaway server:
#   eval "$(bash .ci/postgres.sh)"
# SQLite databases and the outputs go to target/recall-bench/.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0
worst=0
for arg in "$@"; do
  case $arg in
    --quick) quick=1 ;;
    --worst) worst=1 ;;
    *) echo "usage: $0 [--quick] [--worst]" >&2; exit 2 ;;
  esac
done

runs=${RUNS:-3}
queries=${QUERIES:-2000}
warmup=${WARMUP:-200}
sizes=(10000 1000000)
if [[ $quick == 1 ]]; then
  runs=${RUNS:-1}
  queries=${QUERIES:-200}
  warmup=${WARMUP:-20}
  sizes=(2000)
fi
out=target/recall-bench
mkdir -p "$out"
cargo build --release --locked --example recall_bench
bench=target/release/examples/recall_bench
cases=()

# NAME BACKEND MEMORIES EXTRA_ARGS...
run_case() {
  local name=$1 backend=$2 memories=$3
  shift 3
  local reuse=()
  cases+=("$name")
  rm -f "$out/$name".*.txt "$out/$name.summary"
  [[ ${KEEP:-0} == 1 ]] && reuse=(--reuse)
  for r in $(seq 1 "$runs"); do
    echo "--- $name (run $r of $runs)" >&2
    "$bench" --backend "$backend" --memories "$memories" --queries "$queries" --warmup "$warmup" \
      "${reuse[@]}" "$@" | tee "$out/$name.$r.txt"
    grep '^summary ' "$out/$name.$r.txt" | cut -d' ' -f2- >>"$out/$name.summary"
    reuse=(--reuse)
  done
}

backends=${BACKENDS:-sqlite postgres}
if [[ " $backends " == *" sqlite "* ]]; then
  for n in "${sizes[@]}"; do
    run_case "sqlite-$n" sqlite "$n" --path "$out/sqlite-$n.db"
  done
fi
if [[ " $backends " != *" postgres "* ]]; then
  :
elif [[ -n ${CONTEXT_ASSEMBLER_TEST_POSTGRES_URL:-} ]]; then
  for n in "${sizes[@]}"; do
    run_case "postgres-$n" postgres "$n"
  done
else
  echo "CONTEXT_ASSEMBLER_TEST_POSTGRES_URL is not set: PostgreSQL skipped" \
    "(start one with: eval \"\$(bash .ci/postgres.sh)\")" >&2
fi

if [[ $worst == 1 && $quick == 0 ]]; then
  # Each recall scans the one subject's million memories: fewer queries.
  queries=${WORST_QUERIES:-200} warmup=20 \
    run_case "sqlite-1000000-1subject" sqlite 1000000 --subjects 1 --path "$out/sqlite-1000000-1subject.db"
fi

# Medians over the runs; the insert rate is the filling run's.
[[ ${#cases[@]} -gt 0 ]] || exit 0
python3 - "$out" "${cases[@]}" <<'EOF'
import json, statistics, sys
out, cases = sys.argv[1], sys.argv[2:]
med = statistics.median
print("| backend | memories | subjects | runs | p50 ms | p90 ms | p99 ms | recalls/s sequential "
      "| p50 / p99 ms, 8 tasks | recalls/s, 8 tasks | inserts/s | DB size MiB |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for name in cases:
    rs = [json.loads(line) for line in open(f"{out}/{name}.summary") if line.strip()]
    s, c = [r["sequential"] for r in rs], [r["concurrent"] for r in rs]
    m = lambda xs, k: med(x[k] for x in xs)
    ins = [r["insert_per_s"] for r in rs if r["insert_per_s"] is not None]
    r0 = rs[0]
    print(f"| {r0['backend']} | {r0['memories']:,} | {r0['subjects']:,} | {len(rs)} "
          f"| {m(s, 'p50_ms'):.2f} | {m(s, 'p90_ms'):.2f} | {m(s, 'p99_ms'):.2f} | {m(s, 'per_s'):,.0f} "
          f"| {m(c, 'p50_ms'):.2f} / {m(c, 'p99_ms'):.2f} | {m(c, 'per_s'):,.0f} "
          f"| {f'{ins[0]:,.0f}' if ins else 'reused'} | {rs[-1]['db_bytes'] / 2**20:,.0f} |")
EOF
