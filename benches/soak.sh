#!/usr/bin/env bash
# Soak: one release sidecar under a steady mixed load for a long time, sampled
# every few seconds. Two loadgen processes share it: a warm replay (the caches
# hit) and a cold one (every request unique, so the token caches keep filling
# and evicting). Then checks what a leak would break:
#   - resident memory levels off: the last third of the run grows less than
#     SOAK_RSS_SLACK_MIB (default 24) over its first sample, and never exceeds
#     the idle sidecar's by more than the configured cache weight plus
#     SOAK_OVERHEAD_MIB (default 96: connection buffers, worker threads,
#     allocator arenas);
#   - open descriptors and runtime tasks at the end are no more than at the
#     first sample (plus a small slack for connections in flight);
#   - every request was answered OK (loadgen exits non-zero otherwise).
#
#   bash benches/soak.sh                      # 10 minutes: 1500/s warm + 150/s cold, 4k-token prompts
#   SOAK_SECONDS=60 bash benches/soak.sh      # a short one
#
# Samples (CSV) and reports go to target/soak/. Not run in CI (too long).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${SOAK_SECONDS:-600}
warm_rate=${SOAK_WARM_RATE:-1500}
cold_rate=${SOAK_COLD_RATE:-150}
tokens=${SOAK_PROMPT_TOKENS:-4000}
cache_mib=${SOAK_CACHE_MIB:-64}
slack_mib=${SOAK_RSS_SLACK_MIB:-24}
overhead_mib=${SOAK_OVERHEAD_MIB:-96}
out=target/soak
mkdir -p "$out"

cargo build --release --locked --bin context-assembler --bin loadgen
server=target/release/context-assembler

"$server" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --cache-mib "$cache_mib" 2>"$out/server.log" &
pid=$!
trap 'kill "$pid" 2>/dev/null || true' EXIT
addr="" metrics=""
for _ in $(seq 1 100); do
  addr=$(sed -n 's/.*gRPC listening addr=\([0-9.:]*\).*/\1/p' "$out/server.log" | head -1)
  metrics=$(sed -n 's/.*metrics listening addr=\([0-9.:]*\).*/\1/p' "$out/server.log" | head -1)
  [[ -n $addr && -n $metrics ]] && break
  sleep 0.1
done
[[ -n $addr ]] || { echo "soak: the sidecar did not report its address" >&2; exit 1; }
idle=$(python3 -c '
import sys, urllib.request
page = urllib.request.urlopen(sys.argv[1]).read().decode()
print(next(l.split()[1] for l in page.splitlines() if l.startswith("process_resident_memory_bytes ")))
' "http://$metrics/metrics")
echo "soak: sidecar pid $pid on $addr (metrics $metrics), ${seconds}s, warm ${warm_rate}/s + cold ${cold_rate}/s; idle RSS $idle bytes"

common=(--addr "http://$addr" --metrics-url "http://$metrics/metrics" --prompt-tokens "$tokens"
        --duration "${seconds}s" --progress-secs 10)
target/release/loadgen "${common[@]}" --warmup --rate "$warm_rate" --concurrency 32 \
  --samples "$out/warm.csv" --json "$out/warm.json" >"$out/warm.txt" 2>"$out/warm.progress" &
warm=$!
target/release/loadgen "${common[@]}" --cold --rate "$cold_rate" --concurrency 16 --seed 11 \
  --samples "$out/cold.csv" --json "$out/cold.json" >"$out/cold.txt" 2>"$out/cold.progress" &
cold=$!
status=0
wait "$warm" || status=1
wait "$cold" || status=1
kill -TERM "$pid"
wait "$pid" || true
trap - EXIT
cat "$out/warm.txt" "$out/cold.txt"
[[ $status == 0 ]] || { echo "soak: a loadgen run failed (see $out/*.txt)" >&2; exit 1; }

python3 - "$out/warm.csv" "$cache_mib" "$slack_mib" "$overhead_mib" "$idle" <<'EOF'
import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["server_rss_bytes"]]
cache_mib, slack_mib, overhead_mib = float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
idle = float(sys.argv[5]) / 2**20
mib = lambda r: float(r["server_rss_bytes"]) / 2**20
t = lambda r: float(r["elapsed_s"])
end = t(rows[-1])
last_third = [r for r in rows if t(r) >= end * 2 / 3]
print("soak: RSS MiB over time (elapsed s: MiB, open fds, alive tasks)")
step = max(1, len(rows) // 12)
for r in rows[::step] + ([rows[-1]] if (len(rows) - 1) % step else []):
    print(f"  {t(r):7.0f}: {mib(r):7.1f}  fds {r['server_open_fds']:>4}  tasks {r['server_alive_tasks']:>4}")
peak = max(mib(r) for r in rows)
growth = mib(last_third[-1]) - mib(last_third[0])
fds0, fds1 = int(rows[0]["server_open_fds"]), int(rows[-1]["server_open_fds"])
tasks0, tasks1 = int(rows[0]["server_alive_tasks"]), int(rows[-1]["server_alive_tasks"])
print(f"soak: RSS idle {idle:.1f} MiB, peak {peak:.1f} MiB, last third {mib(last_third[0]):.1f} -> "
      f"{mib(last_third[-1]):.1f} MiB ({growth:+.1f}); fds {fds0} -> {fds1}; tasks {tasks0} -> {tasks1}")
bad = []
if growth > slack_mib:
    bad.append(f"RSS grew {growth:.1f} MiB in the last third (slack {slack_mib})")
if peak > idle + cache_mib + overhead_mib:
    bad.append(f"RSS peak {peak:.1f} MiB exceeds idle {idle:.1f} + cache {cache_mib} + overhead {overhead_mib}")
if fds1 > fds0 + 4:
    bad.append(f"open fds grew {fds0} -> {fds1}")
if tasks1 > tasks0 + 8:
    bad.append(f"runtime tasks grew {tasks0} -> {tasks1}")
if bad:
    sys.exit("soak: FAIL: " + "; ".join(bad))
print("soak: OK")
EOF
