#!/bin/bash
# User-space instructions per ListModels call under callgrind: a server (the bare tonic floor of
# examples/transport_floor.rs, or the sidecar with the default model table or a one-model table)
# warmed with 275 calls, then 2,200 calls counted (callgrind_control -i on/off around them).
# Repeatable whatever else the machine does (instructions, not time).
#
# usage: benches/callgrind_list_models.sh BINDIR floor|one|default [PORT]
#   BINDIR holds context-assembler and transport_floor
#   (cargo build --release --bin context-assembler --example transport_floor;
#    target/release and target/release/examples)
set -euo pipefail
BIN=$1; KIND=$2; PORT=${3:-50999}
ADDR=127.0.0.1:$PORT
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
cat > "$OUT/one.toml" <<'TOML'
[[models]]
name = "gpt-4o"
encoding = "o200k_base"
context_window = 128000
output_reserve = 16384
TOML
CG=(valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$OUT/cg.out")
SERVE=(serve --listen "$ADDR" --metrics-listen 127.0.0.1:0 --memory-store off)
case $KIND in
  floor) "${CG[@]}" "$BIN/transport_floor" floor "$ADDR" >"$OUT/log" 2>&1 & ;;
  default) "${CG[@]}" "$BIN/context-assembler" "${SERVE[@]}" >"$OUT/log" 2>&1 & ;;
  one) "${CG[@]}" "$BIN/context-assembler" "${SERVE[@]}" --config "$OUT/one.toml" >"$OUT/log" 2>&1 & ;;
  *) echo "floor, one or default" >&2; exit 2 ;;
esac
VPID=$!
for _ in $(seq 1 600); do
  (echo > "/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break
  sleep 0.5
done
sleep 2
"$BIN/transport_floor" drive "$ADDR" list-models 250 >/dev/null
callgrind_control -i on "$VPID" >/dev/null
"$BIN/transport_floor" drive "$ADDR" list-models 2000 >/dev/null
callgrind_control -i off "$VPID" >/dev/null
callgrind_control -d "$VPID" >/dev/null
sleep 1
kill -TERM "$VPID"
wait "$VPID" || true
IR=$(cat "$OUT"/cg.out* | grep -h '^summary:\|^totals:' | awk '{s+=$2} END {print s}')
echo "$KIND instructions=$IR per_call=$((IR / 2200))"
