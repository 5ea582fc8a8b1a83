#!/usr/bin/env bash
# CI: the contract's gate. `buf lint` (STANDARD rules, the exceptions written
# in proto/buf.yaml), `buf format` (no diff), and `buf breaking` against the
# contract of the baseline: the newest release tag (v*) that HEAD contains,
# or, until there is one, the first commit that carries a version (the one
# that added CHANGELOG.md). Then the gate is tried: a removed field, a
# renumbered tag and a changed type are planted, each in a scratch copy of
# the module, and `buf breaking` must refuse each with buf's own message. A clone without
# the history compares with the kept image of the baseline's contract instead.
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

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
scratch_image="$scratch/baseline.binpb"

# Each release also keeps its contract as a buf image (.ci/contract-VERSION.binpb, built
# from its commit without source info), for a clone without the history: a shallow one.
images=(.ci/contract-*.binpb)
newest_image="$(printf '%s\n' "${images[@]}" | sort -V | tail -n 1)"
baseline="$(git describe --tags --abbrev=0 --match 'v[0-9]*' HEAD 2>/dev/null || true)"
if [[ -z "$baseline" ]]; then
  baseline="$(git log --reverse --diff-filter=A --format=%H -- CHANGELOG.md 2>/dev/null | head -n 1)"
fi
if [[ -n "$baseline" ]] && git cat-file -e "$baseline^{commit}" 2>/dev/null \
  && ! git rev-parse --is-shallow-repository | grep -qx true; then
  against=".git#ref=$baseline,subdir=proto"
  echo "buf: breaking against $baseline ($(git log -1 --format=%s "$baseline" | cut -c1-60))"
  # The kept image is that contract (a release that forgot its image fails here).
  "$buf" build "$against" --exclude-source-info -o "$scratch_image"
  if [[ "$baseline" == v* ]] && [[ ! -f ".ci/contract-${baseline#v}.binpb" ]]; then
    echo "buf: release $baseline has no .ci/contract-${baseline#v}.binpb (buf build of its proto/ with --exclude-source-info)" >&2
    exit 1
  fi
  if ! cmp -s "$scratch_image" "$newest_image"; then
    echo "buf: $newest_image is not the baseline's contract; rebuild it from $baseline" >&2
    exit 1
  fi
else
  against="$newest_image"
  echo "buf: no history here (a shallow clone?): breaking against the kept image $against"
fi
"$buf" breaking proto --against "$against"
echo "buf: no breaking change since the baseline"

# The gate refuses what it must: each planted change alone, in a scratch copy.
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
