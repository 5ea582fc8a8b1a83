#!/usr/bin/env bash
# Memory around a SIGHUP reload that keeps a model folder: a release sidecar
# serving one model counted with FOLDER (default Gemma 3's, from
# .ci/hf_vocab.sh) gets RELOADS SIGHUPs with the same configuration. Before
# each, the peak resident set is reset (/proc/PID/clear_refs, 5), so VmHWM
# afterwards is the peak during that reload; RSS is read before, once the
# reload is logged, and SETTLE seconds later.
#
#   bash benches/reload_rss.sh                          # Gemma 3, 3 reloads
#   FOLDER=target/hf-vocab/qwen3 RELOADS=1 bash benches/reload_rss.sh
#   SIDECAR=/tmp/old/target/release/context-assembler bash benches/reload_rss.sh
#       # another build (no cargo build)
#
# Prints one row per reload (MiB) and the reload's wall time.
set -euo pipefail
cd "$(dirname "$0")/.."

folder=$(realpath "${FOLDER:-target/hf-vocab/gemma3}")
reloads=${RELOADS:-3}
settle=${SETTLE:-2}
sidecar=${SIDECAR:-target/release/context-assembler}
[[ -f $folder/tokenizer.json ]] || { echo "no tokenizer.json in $folder (bash .ci/hf_vocab.sh)" >&2; exit 2; }
[[ -n ${SIDECAR:-} ]] || cargo build --release --locked --bin context-assembler >&2

work=$(mktemp -d)
pid=
cleanup() {
  [[ -n $pid ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
cat >"$work/sidecar.toml" <<TOML
[[models]]
name = "open-model"
tokenizer_dir = "$folder"
context_window = 128000
output_reserve = 8192
TOML

"$sidecar" serve --listen 127.0.0.1:0 --metrics-listen off --render-listen off --memory-store off \
  --log-format json --config "$work/sidecar.toml" >"$work/log" 2>&1 &
pid=$!

# Waits until `pattern` has been logged `n` times (the folder loads before
# the port is bound, so "gRPC listening" means loaded).
logged() {
  local pattern=$1 n=$2 i
  for i in $(seq 1 6000); do
    (( $(grep -c "$pattern" "$work/log" || true) >= n )) && return 0
    kill -0 "$pid" 2>/dev/null || { cat "$work/log" >&2; echo "the sidecar exited" >&2; exit 1; }
    sleep 0.05
  done
  echo "timed out waiting for: $pattern" >&2
  exit 1
}
status() { awk -v k="$1:" '$1 == k { printf "%.0f", $2 / 1024 }' "/proc/$pid/status"; }

logged '"gRPC listening"' 1
sleep "$settle"
echo "sidecar: $sidecar"
echo "folder:  $folder ($(du -sh "$folder" | cut -f1))"
echo "started: RSS $(status VmRSS) MiB, peak so far $(status VmHWM) MiB"
echo
echo "| reload | RSS before | peak during | RSS after | RSS ${settle} s later | wall |"
echo "|---:|---:|---:|---:|---:|---:|"
for r in $(seq 1 "$reloads"); do
  before=$(status VmRSS)
  echo 5 >"/proc/$pid/clear_refs"
  start=$(date +%s%N)
  kill -HUP "$pid"
  logged '"configuration reload' "$r"
  wall=$(( ($(date +%s%N) - start) / 1000000 ))
  after=$(status VmRSS)
  sleep "$settle"
  echo "| $r | $before | $(status VmHWM) | $after | $(status VmRSS) | ${wall} ms |"
done
if grep -q 'configuration reload refused\|configuration reload failed' "$work/log"; then
  grep 'configuration reload' "$work/log" >&2
  echo "a reload was refused" >&2
  exit 1
fi
