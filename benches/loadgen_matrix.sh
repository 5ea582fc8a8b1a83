#!/usr/bin/env bash
# The load figures of docs/benchmarks/history.md section 1 (the latest run
# is in BENCHMARKS.md): loadgen against a spawned release
# sidecar, closed loop, for 1k, 4k, 8k and 32k-token prompts, warm (every
# distinct request sent once first) and cold (every request unique), then
# AssembleBatch and AssembleStream at 4k; each run REPEATS times, and the table
# gives the median of each figure over the repeats (and the range of the
# throughput). Reports go to target/loadgen-matrix/.
#
#   bash benches/loadgen_matrix.sh                 # 3 repeats of 15 s each (about 15 minutes)
#   REPEATS=1 SECONDS_PER_RUN=5 bash benches/loadgen_matrix.sh
#   SIDECARS="before=/tmp/before/context-assembler after=target/release/context-assembler" \
#     bash benches/loadgen_matrix.sh               # two builds side by side: each repeat runs
#                                                  # one, then the other, in the same minutes
#
# The client runs on the same 2 cores as the sidecar, so throughput is what
# both together reach; the server's own CPU per request is reported beside it.
set -euo pipefail
cd "$(dirname "$0")/.."

repeats=${REPEATS:-3}
secs=${SECONDS_PER_RUN:-15}
out=target/loadgen-matrix
rm -rf "$out" && mkdir -p "$out"
cargo build --release --locked --bin context-assembler --bin loadgen
# TAG=BINARY pairs; the tag is printed beside each row when there are several.
read -r -a sidecars <<<"${SIDECARS:-this=target/release/context-assembler}"

# NAME LOADGEN_ARGS...
run() {
  local name=$1
  shift
  for r in $(seq 1 "$repeats"); do
    for pair in "${sidecars[@]}"; do
      local tag=${pair%%=*} bin=${pair#*=}
      echo "--- $name $tag (run $r of $repeats)" >&2
      target/release/loadgen --spawn "$bin" --duration "${secs}s" \
        --progress-secs 0 --json "$out/$name@$tag.$r.json" "$@" >"$out/$name@$tag.$r.txt"
    done
  done
}

for tokens in 1000 4000 8000 32000; do
  # Fewer users at 32k keep the warm-up (every distinct request once) short.
  users=100
  [[ $tokens == 32000 ]] && users=25
  run "assemble-${tokens}-warm" --prompt-tokens "$tokens" --users "$users" --warmup --concurrency 16
  run "assemble-${tokens}-cold" --prompt-tokens "$tokens" --users "$users" --cold --concurrency 4
done
run "batch-4000-warm" --rpc batch --batch-size 16 --prompt-tokens 4000 --warmup --concurrency 4
run "stream-4000-warm" --rpc stream --prompt-tokens 4000 --warmup --concurrency 16

python3 - "$out" "$repeats" "${sidecars[@]%%=*}" <<'EOF'
import glob, json, statistics, sys
out, repeats, tags = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
runs_of = {n.split("/")[-1].rsplit(".", 2)[0].split("@")[0] for n in glob.glob(f"{out}/*.json")}
names = [f"{n}@{t}" for n in sorted(runs_of, key=lambda n: (n.split("-")[0] != "assemble", int(n.split("-")[1]), n))
         for t in tags]
med = statistics.median
print(f"| run | requests/s (median, range of {repeats}) | p50 ms | p90 ms | p99 ms | p99.9 ms | server CPU us/request "
      "| decode / convert / tokenize / allocate / render / encode us per request | server RSS max MiB |")
print("|---|---|---|---|---|---|---|---|---|")
for n in names:
    runs = [json.load(open(p)) for p in sorted(glob.glob(f"{out}/{n}.*.json"))]
    if any(r["requests"]["errors"] for r in runs):
        sys.exit(f"{n}: a run had errors")
    rps = [r["throughput"]["requests_per_second"] for r in runs]
    lat = lambda q: med(r["latency_ms"]["per_request" if r["latency_ms"]["per_request"] else "per_call"][q] for r in runs)
    srv = [r["server"] for r in runs]
    cpu = med(s["cpu_us_per_request"] for s in srv)
    phases = " / ".join(f"{med(s['phase_us'][p]['per_request'] for s in srv):.1f}"
                        for p in ("decode", "convert", "tokenize", "allocate", "render", "encode"))
    rss = med(s["rss_bytes"]["max"] for s in srv) / 2**20
    label = n if len(tags) > 1 else n.split("@")[0]
    print(f"| {label} | {med(rps):,.0f} ({min(rps):,.0f}-{max(rps):,.0f}) | {lat('p50'):.3f} | {lat('p90'):.3f} | "
          f"{lat('p99'):.3f} | {lat('p99.9'):.3f} | {cpu:.0f} | {phases} | {rss:.0f} |")
EOF
