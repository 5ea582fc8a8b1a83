#!/usr/bin/env bash
# Regenerates the package's stubs from proto/ with the pinned grpcio-tools
# (generate-requirements.txt), installed in a virtual environment of their own.
# Usage: clients/python/generate.sh [DIR [VENV]]
#   DIR   where to write context_assembler/v1/assembler_pb2*.py{,i}; default: this package,
#         overwriting the checked-in stubs (check.sh generates into a scratch DIR and compares).
#   VENV  the generator's environment, created when missing; default:
#         target/clients/python/generate-venv under the repository root.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
dir="${1:-$here}"
venv="${2:-$root/target/clients/python/generate-venv}"

[[ -x "$venv/bin/python" ]] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$here/generate-requirements.txt"
mkdir -p "$dir"
# From the repository root with a relative include path, so the paths recorded in the
# stubs do not depend on where the checkout is.
cd "$root"
"$venv/bin/python" -m grpc_tools.protoc -I proto \
  --python_out="$dir" --pyi_out="$dir" --grpc_python_out="$dir" \
  proto/context_assembler/v1/assembler.proto
