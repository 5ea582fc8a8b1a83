#!/usr/bin/env bash
# CI: a load smoke of the release sidecar through real gRPC connections. Builds the release binaries, then runs
# loadgen (which starts the sidecar itself on kernel-chosen ports and stops it with SIGTERM) for Assemble,
# AssembleBatch and AssembleStream on a small warm replay workload, once cold (every request unique), once on cold
# tool-heavy sessions, once on cold agent sessions (thinking and tool results, Claude), once cold offering 8x the
# budget and once on cold fresh requests (new documents and turns in each, most of them kept), about 48 s of load in
# all. The fresh run's report must say what share of the offered tokens was kept, and it must be most of it.
# Then a round of each floor example (count_wire, transport_floor measure and fresh).
# Fails if any request was not answered OK and well-formed (loadgen exits non-zero: every batch's groups and
# dispatch order are checked against its results), if the sidecar did not exit cleanly, if a report lacks a positive
# throughput, or if OpenAI's tiktoken recounts any answer sampled from a run (up to 200, at least 100) differently
# from the total the sidecar reported (tests/reference/answers_check.py).
# Usage: bash .ci/loadgen.sh        Reports (text and JSON) go to target/loadgen-ci/.
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TERM_COLOR=never
cargo build --release --locked --bin context-assembler --bin loadgen
python3 -m pip install --quiet --disable-pip-version-check 'tiktoken==0.14.*'

out=target/loadgen-ci
mkdir -p "$out"
server=target/release/context-assembler
workload=(--families 2 --users 10 --turns 3 --prompt-tokens 4000 --concurrency 16 --progress-secs 4)

# run NAME LOADGEN_ARGS...: one loadgen run, its report kept as NAME.txt and NAME.json, and a sample of its answers
# for the reference recount unless RECOUNT=0 (a model the sidecar counts by an estimate, not an OpenAI encoding).
run() {
  local name=$1
  shift
  local answers=(--answers "$out/$name.answers.jsonl")
  if [[ ${RECOUNT:-1} == 0 ]]; then
    answers=()
    rm -f "$out/$name.answers.jsonl"
  fi
  echo "--- loadgen: $name"
  if ! target/release/loadgen --spawn "$server" "${workload[@]}" --json "$out/$name.json" \
      "${answers[@]}" "$@" | tee "$out/$name.txt"; then
    echo "loadgen-ci: $name: a request failed or the run could not be made (see above)" >&2
    exit 1
  fi
  if ! awk '/^throughput:/ { found = 1; if ($2 + 0 <= 0) bad = 1 } END { exit !(found && !bad) }' "$out/$name.txt"; then
    echo "loadgen-ci: $name: the report has no positive throughput" >&2
    exit 1
  fi
  if ! grep -Eq '^requests: .*, errors 0$' "$out/$name.txt"; then
    echo "loadgen-ci: $name: the report lists errors" >&2
    exit 1
  fi
}

run assemble --rpc assemble --warmup --duration 8s
run batch --rpc batch --batch-size 16 --warmup --duration 8s
run stream --rpc stream --warmup --duration 8s
run cold --rpc assemble --cold --duration 4s
# The cold-content workload offering 8x the budget: most evidence is measured only as far as the room it is
# offered, and the reference recount checks the totals stay exact.
run cold-offer8 --rpc assemble --cold --offer 8 --duration 4s
run sessions --rpc assemble --workload tool-sessions --cold --duration 4s
# Issue 53's overflowing sessions with evidence, each request its session's next on the first pass (assembled where
# it was received while its new text fits the inline allowance), the same requests again after it.
# Its own shape (12 sessions of 20 requests), not the small replay's.
shared=("${workload[@]}")
workload=(--concurrency 16 --progress-secs 4)
run rag-sessions --rpc assemble --workload rag-sessions --duration 3s
workload=("${shared[@]}")
# New text in every request, most of it kept (issue 39): the report measures the share kept (10 requests of 4k).
run fresh --rpc assemble --workload fresh --cold --duration 3s
if ! awk '/^kept of offered:/ { found = 1; if ($4 + 0 < 70) low = 1 } END { exit !(found && !low) }' "$out/fresh.txt"; then
  echo "loadgen-ci: fresh: the report does not say that most (70% or more) of the offered tokens was kept" >&2
  exit 1
fi
# Claude is counted by an estimate (cl100k_base + 20%): nothing for tiktoken to recount exactly.
RECOUNT=0 run agent-sessions --rpc assemble --workload agent-sessions --cold --duration 3s

# Up to 200 answers of each run (every 7th request, at least 100) recounted by the reference tokenizer.
python3 tests/reference/answers_check.py 100 "$out"/*.answers.jsonl

# The floor examples (BENCHMARKS.md's wire rows), a round each: counts over the wire equal counts in process, the
# bare tonic server answers, and every fresh request is answered OK (each example asserts its answers).
# Each under a time limit: timeout signals its whole process group, so the servers an example started go with it.
cargo build --release --locked --example count_wire --example transport_floor --example provider_replay
echo "--- count_wire and transport_floor smoke"
timeout -k 10 300 target/release/examples/count_wire "$server" --texts 2 --rounds 1 | tee "$out/count_wire.txt"
timeout -k 10 300 target/release/examples/transport_floor fresh "$server" --calls 100 --rounds 1 |
  tee "$out/transport_floor_fresh.txt"
timeout -k 10 300 target/release/examples/transport_floor measure "$server" --calls 100 --rounds 1 |
  tee "$out/transport_floor.txt"

# Counting by the provider replayed against its stand-in (issue 52), a short round: the example asserts that no
# prompt was over its budget by the provider's count.
echo "--- provider_replay smoke"
ROUNDS=1 LATENCY_MS=0 timeout -k 10 300 target/release/examples/provider_replay 1 4 | tee "$out/provider_replay.txt"

echo "loadgen-ci: all runs OK"
grep -H '^throughput:' "$out"/*.txt
