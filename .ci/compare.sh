#!/usr/bin/env bash
# CI smoke run of the side-by-side comparison (benches/compare/README.md): installs the Python
# requirements, generates the Python stubs, exports a tiny replay workload, runs (a) LangChain +
# tiktoken, (b) priomptipy and (c) the sidecar through the Python gRPC client on it with
# benches/compare/run.py, and checks that all three produced a result for every request and that
# the sidecar's and the LangChain path's token totals are what tiktoken counts for their output; then the same
# for (a) and (c) on a few requests of the fresh workload (new documents and turns in each, a documents cap).
# Figures from a run this small mean nothing; the README has the real ones.
# Debug builds are enough here (and are what .ci/run has already built).
# Usage: .ci/compare.sh [PATH_TO_SIDECAR_BINARY]   (default: builds target/debug/context-assembler)
set -euo pipefail
cd "$(dirname "$0")/.."

out=target/compare-ci
mkdir -p "$out"
python3 -m pip install --quiet --disable-pip-version-check -r benches/compare/requirements.txt

if [[ $# -ge 1 ]]; then
  sidecar="$1"
else
  cargo build --locked --bin context-assembler
  sidecar=target/debug/context-assembler
fi
cargo build --locked --example export_workload
target/debug/examples/export_workload --families 2 --users 2 --turns 4 --prompt-tokens 4000 \
  --out "$out/workload.jsonl"

timeout 120 python3 benches/compare/run.py "$out/workload.jsonl" --sidecar "$sidecar" \
  --concurrency 4 --batch 4 --json "$out/result.json"

python3 - "$out/result.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
n = r["requests"]
for path in "abc":
    got = len(r["per_request"].get(path, []))
    assert got == n, f"path ({path}): {got} results for {n} requests"
checks = {c["path"]: c for c in r["token_checks"]}
for path in "ac":
    assert checks[path]["reported_equals_recount"] == n, f"path ({path}) reports totals tiktoken does not count"
    assert checks[path]["over_budget"] == 0, f"path ({path}) went over the budget"
rows = [t["path"] for t in r["throughput"]]
assert any(p.startswith("(a)") for p in rows) and any(p.startswith("(b)") for p in rows) \
    and any(p.startswith("(c)") for p in rows), rows
print(f"compare: (a), (b) and (c) all answered the {n} requests")
EOF

target/debug/examples/export_workload --fresh --users 6 --prompt-tokens 4000 --out "$out/fresh.jsonl"
timeout 120 python3 benches/compare/run.py "$out/fresh.jsonl" --sidecar "$sidecar" --paths a,c \
  --concurrency 2 --batch 0 --json "$out/fresh.result.json"
python3 - "$out/fresh.result.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
n = r["requests"]
checks = {c["path"]: c for c in r["token_checks"]}
for path in "ac":
    assert len(r["per_request"][path]) == n, f"path ({path}) did not answer every fresh request"
    assert checks[path]["reported_equals_recount"] == n, f"path ({path}) reports totals tiktoken does not count"
    assert checks[path]["over_budget"] == 0, f"path ({path}) went over the budget"
print(f"compare: (a) and (c) answered the {n} fresh requests with totals tiktoken counts")
EOF
