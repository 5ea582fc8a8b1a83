#!/usr/bin/env bash
# A session's next request against the same request sent again, through the
# server (issue 53): for each sidecar binary given, ROUNDS rounds (default 3)
# of loadgen's rag-sessions workload at concurrency 1, once on a fresh server
# (its first pass over 120 sessions of 20 requests: each request is its
# session's next) and once after --warmup (the same requests again). Prints
# per run the server CPU per request and the sum of the phases' means (the
# time in the handler).
#
#   cargo build --release --locked --bin context-assembler --bin loadgen
#   bash benches/session_next.sh target/release/context-assembler [OTHER_BINARY...]
set -euo pipefail
loadgen=${LOADGEN:-target/release/loadgen}
rounds=${ROUNDS:-3}
[ $# -ge 1 ] || { echo "usage: $0 SIDECAR_BINARY..." >&2; exit 2; }
for r in $(seq "$rounds"); do
  for binary in "$@"; do
    for pass in next again; do
      warmup=()
      [ "$pass" = again ] && warmup=(--warmup)
      out=$("$loadgen" --spawn "$binary" --workload rag-sessions --users 120 --concurrency 1 --connections 1 \
        "${warmup[@]}" --requests 2400 --progress-secs 0 2>/dev/null)
      cpu=$(sed -n 's/.*cores, \([0-9.]*\) us per request.*/\1/p' <<<"$out")
      handler=$(grep "server phases" <<<"$out" | grep -o "[a-z]* [0-9.]* (" | awk '{s += $2} END {print s}')
      echo "round $r $binary $pass: server CPU $cpu us per request, in the handler $handler us"
    done
  done
done
