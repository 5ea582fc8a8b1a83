#!/usr/bin/env bash
# CI: the contract's gate. `buf lint` (STANDARD rules, the exceptions written
# in proto/buf.yaml), `buf format` (no diff), and `buf breaking` against the
# contract of the baseline: the newest release tag (v*) that HEAD contains,
# or, until there is one, the first commit that carries a version (the one
# that added CHANGELOG.md). Then the gate is tried: a removed field, a
# renumbered tag and a changed type are planted, each in a scratch copy of
# the module, and `buf breaking` must refuse each with buf's own message.
# Usage: bash .ci/buf.sh   (installs the buf CLI from its npm package into
# target/buf; needs the repository's full history for the baseline)
set -euo pipefail
cd "$(dirname "$0")/.."
buf_version=1.75.0
tools=target/buf
buf="$tools/node_modules/.bin/buf"

if [[ ! -x "$buf" ]] || [[ "$("$buf" --version)" != "$buf_version" ]]; then
  mkdir -p "$tools"
  npm install --silent --no-audit --no-fund --prefix "$tools" "@bufbuild/buf@$buf_version" >/dev/null
fi
echo "buf $("$buf" --version)"

"$buf" lint proto
"$buf" format --diff --exit-code proto
echo "buf: lint and format clean"

baseline="$(git describe --tags --abbrev=0 --match 'v[0-9]*' HEAD 2>/dev/null || true)"
if [[ -z "$baseline" ]]; then
  baseline="$(git log --reverse --diff-filter=A --format=%H -- CHANGELOG.md | head -n 1)"
fi
if [[ -z "$baseline" ]]; then
  echo "buf: no baseline: no v* tag, and no commit adds CHANGELOG.md (a shallow clone?)" >&2
  exit 1
fi
against=".git#ref=$baseline,subdir=proto"
echo "buf: breaking against $baseline ($(git log -1 --format=%s "$baseline" | cut -c1-60))"
"$buf" breaking proto --against "$against"
echo "buf: no breaking change since the baseline"

# The gate refuses what it must: each planted change alone, in a scratch copy.
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
proto_file=context_assembler/v1/assembler.proto
plant() {
  local name="$1" from="$2" to="$3" expected="$4"
  rm -rf "$scratch/proto"
  cp -r proto "$scratch/proto"
  python3 - "$scratch/proto/$proto_file" "$from" "$to" <<'PY'
import sys
path, old, new = sys.argv[1:]
text = open(path, encoding="utf-8").read()
if text.count(old) != 1:
    sys.exit(f"plant: {old!r} occurs {text.count(old)} times, not once")
open(path, "w", encoding="utf-8").write(text.replace(old, new))
PY
  local out
  if out="$("$buf" breaking "$scratch/proto" --against "$against" 2>&1)"; then
    echo "buf: the gate let a breaking change through: $name" >&2
    exit 1
  fi
  if ! grep -qF "$expected" <<<"$out"; then
    echo "buf: $name was refused, but not with the expected message ($expected):" >&2
    echo "$out" >&2
    exit 1
  fi
  echo "buf: refused ($name): ${out%%$'\n'*}"
}
plant "a removed field" \
  "  // What the block holds.
  BlockKind kind = 2;" "" \
  'Previously present field "2" with name "kind" on message "Block" was deleted.'
plant "a renumbered tag" \
  "  // priority; ties keep request order.
  uint32 priority = 3;" "  // priority; ties keep request order.
  uint32 priority = 30;" \
  'Previously present field "3" with name "priority" on message "Block" was deleted.'
plant "a changed type" \
  "  uint32 min_tokens = 5;" "  uint64 min_tokens = 5;" \
  'Field "5" with name "min_tokens" on message "Block" changed type from "uint32" to "uint64".'
echo "buf: the gate passed"
