#!/usr/bin/env bash
# Generates the Python stubs of the contract into OUT (default: target/clients/python
# under the repository root). Needs `pip install -r clients/python/requirements.txt`.
# Usage: clients/python/build.sh [OUT]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${1:-$root/target/clients/python}"
mkdir -p "$out"
python3 -m grpc_tools.protoc -I "$root/proto" \
  --python_out="$out" --grpc_python_out="$out" \
  "$root/proto/context_assembler/v1/assembler.proto"
echo "python stubs: $out"
