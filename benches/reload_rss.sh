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
#   CHANGE=1 bash benches/reload_rss.sh
#       # a copy of the folder whose tokenizer.json gains a newline before
#       # each reload: the same tokenizer from other bytes, loaded again
#
# Prints one row per reload (MiB), the reload's wall time, and what the
# folder's line says (kept or loaded, in ms; none from a build without it).
set -euo pipefail
cd "$(dirname "$0")/.."

folder=$(realpath "${FOLDER:-target/hf-vocab/gemma3}")
reloads=${RELOADS:-3}
change=${CHANGE:-0}
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
if [[ $change == 1 ]]; then
  cp -r "$folder" "$work/folder"
  folder=$work/folder
fi
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
echo "| reload | RSS before | peak during | RSS after | RSS ${settle} s later | wall | folder |"
echo "|---:|---:|---:|---:|---:|---:|---|"
for r in $(seq 1 "$reloads"); do
  [[ $change == 1 ]] && echo >>"$folder/tokenizer.json"
  before=$(status VmRSS)
  echo 5 >"/proc/$pid/clear_refs"
  start=$(date +%s%N)
  kill -HUP "$pid"
  logged '"configuration reload' "$r"
  wall=$(( ($(date +%s%N) - start) / 1000000 ))
  after=$(status VmRSS)
  sleep "$settle"
  line=$(grep '"model folder' "$work/log" | tail -n 1 || true)
  case $line in
    *unchanged*) outcome="kept, $(grep -o '"ms":"\?[0-9]*' <<<"$line" | tr -dc 0-9) ms" ;;
    *loaded*) outcome="loaded, $(grep -o '"ms":"\?[0-9]*' <<<"$line" | tr -dc 0-9) ms" ;;
    *) outcome=- ;;
  esac
  echo "| $r | $before | $(status VmHWM) | $after | $(status VmRSS) | ${wall} ms | $outcome |"
done
if grep -q 'configuration reload refused\|configuration reload failed' "$work/log"; then
  grep 'configuration reload' "$work/log" >&2
  echo "a reload was refused" >&2
  exit 1
fi
