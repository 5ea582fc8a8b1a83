#!/usr/bin/env bash
# CI: the Python package. (a) Regenerates the stubs with the pinned grpcio-tools into a scratch
# copy and fails with the diff when they differ from the checked-in ones; (b) builds the package
# as a wheel from a copy of its sources and installs it, with pytest, into a fresh virtual
# environment; (c) runs the tests from outside the source tree, so the installed wheel is what
# they import, against ADDR (a sidecar with a memory store), ADDR_NO_MEMORY (one without) and
# UNIX_ADDR (one on a Unix socket, "unix:/path").
# Everything made goes under OUT; nothing is written into the source tree.
# Usage: clients/python/check.sh OUT ADDR ADDR_NO_MEMORY UNIX_ADDR
set -euo pipefail
usage="usage: check.sh OUT ADDR ADDR_NO_MEMORY UNIX_ADDR"
out="${1:?$usage}"
addr="${2:?$usage}"
addr_no_memory="${3:?$usage}"
unix_addr="${4:?$usage}"
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1

# (a) The generator's environment is kept between runs (its pin is re-applied each time).
rm -rf "$out/generated"
bash "$here/generate.sh" "$out/generated" "$out/generate-venv"
stubs=(assembler_pb2.py assembler_pb2.pyi assembler_pb2_grpc.py)
stale=0
for stub in "${stubs[@]}"; do
  if ! diff -u "$here/context_assembler/v1/$stub" "$out/generated/context_assembler/v1/$stub"; then
    stale=1
  fi
done
# A stub the generator makes that is not checked in (or the reverse) is stale too.
made="$(cd "$out/generated/context_assembler/v1" && ls)"
if [[ "$made" != "$(printf '%s\n' "${stubs[@]}" | sort)" ]]; then
  echo "python: the generator made $(echo $made), not the checked-in ${stubs[*]}" >&2
  stale=1
fi
if ((stale)); then
  echo "python: the checked-in stubs differ from what generate-requirements.txt's grpcio-tools makes of proto/;" \
    "run clients/python/generate.sh and commit the result" >&2
  exit 1
fi
echo "python: the checked-in stubs are what the pinned generator makes"

# (b) setuptools builds in place (build/, *.egg-info), so it builds a copy.
rm -rf "$out/src" "$out/dist" "$out/venv"
mkdir -p "$out/src"
cp -r "$here/pyproject.toml" "$here/README.md" "$here/context_assembler" "$out/src/"
python3 -m venv "$out/venv"
"$out/venv/bin/python" -m pip wheel --quiet --no-deps --wheel-dir "$out/dist" "$out/src"
wheel=("$out"/dist/context_assembler_client-*.whl)
"$out/venv/bin/python" -m pip install --quiet "${wheel[0]}" pytest
echo "python: installed $(basename "${wheel[0]}")"

# (c) From OUT, so neither the source tree nor the copy is on the import path.
cd "$out"
installed="$("$out/venv/bin/python" -c 'import context_assembler; print(context_assembler.__file__)')"
[[ "$installed" == "$out/venv/"* ]] || { echo "python: imported $installed, not the installed wheel" >&2; exit 1; }
CONTEXT_ASSEMBLER_ADDR="$addr" CONTEXT_ASSEMBLER_ADDR_NO_MEMORY="$addr_no_memory" \
  CONTEXT_ASSEMBLER_UNIX_ADDR="$unix_addr" CONTEXT_ASSEMBLER_REQUIRE_SERVERS=1 \
  "$out/venv/bin/pytest" -q -p no:cacheprovider --import-mode=importlib --rootdir "$out" \
  "$here/tests"
