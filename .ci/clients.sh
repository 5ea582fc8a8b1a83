#!/usr/bin/env bash
# CI: the example clients in clients/ (Go, Java, Python), each generated from the proto contract
# and built here, run against a real server; fails if any of them fails a check.
# Usage: bash .ci/clients.sh SERVER_BINARY   (e.g. target/debug/context-assembler)
# Installs what it needs (Debian packages, pip packages); everything generated or built goes to
# target/clients/, never into the source tree.
set -euo pipefail

server="${1:?usage: bash .ci/clients.sh SERVER_BINARY}"
[[ "$server" == /* ]] || server="$PWD/$server"
cd "$(dirname "$0")/.."
[[ -x "$server" ]] || { echo "clients: not an executable: $server" >&2; exit 1; }
out=target/clients
ready_timeout_secs=60

started=$SECONDS
step() { echo "--- [$((SECONDS - started))s] $*"; }

# Debian's toolchains and libraries, so nothing is fetched by Maven or the Go module proxy.
apt_packages=(
  protobuf-compiler
  golang-go protoc-gen-go protoc-gen-go-grpc golang-google-grpc-dev golang-google-genproto-dev
  golang-github-golang-protobuf-1-5-dev golang-google-protobuf-dev
  default-jdk-headless protobuf-compiler-grpc-java-plugin libgrpc-java libprotobuf-java
  libnetty-java libperfmark-java libgoogle-gson-java libgoogle-common-protos-java libguava-java
  libgeronimo-annotation-1.3-spec-java
)
apt_missing() {
  local status
  status="$(dpkg-query -W -f='${db:Status-Status}\n' "${apt_packages[@]}" 2>/dev/null)" || return 0
  grep -qvx installed <<<"$status"
}
step "install"
if apt_missing; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${apt_packages[@]}" >/dev/null
fi
python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore -r clients/python/requirements.txt

step "build"
mkdir -p "$out"
bash clients/go/build.sh "$out/go"
bash clients/java/build.sh "$out/java"
bash clients/python/build.sh "$out/python"

port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
addr="127.0.0.1:$port"
step "server on $addr (log: $out/server.log)"
# The clients' Retain, recall and ListMemories need the memory store: a fresh SQLite file per run
# (each client also retains under a subject of its own, so a database left over would do too).
rm -f "$out/memory.db" "$out/memory.db-wal" "$out/memory.db-shm"
"$server" --listen "$addr" --metrics-listen off --memory-sqlite-path "$out/memory.db" >"$out/server.log" 2>&1 &
server_pid=$!
stop_server() {
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
}
trap stop_server EXIT
# Fail fast if the server dies before it listens; the Python client then waits for SERVING.
for ((tries = ready_timeout_secs * 10; tries > 0; tries--)); do
  if ! kill -0 "$server_pid" 2>/dev/null; then
    echo "clients: the server exited before listening; its log:"
    cat "$out/server.log"
    exit 1
  fi
  (: <"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
  sleep 0.1
done

failed=()
run_client() {
  local name="$1"
  shift
  step "$name client"
  if ! "$@"; then
    failed+=("$name")
  fi
}
# The Python client goes first: it waits for grpc.health.v1 SERVING before calling.
run_client python env PYTHONPATH="$out/python" \
  python3 clients/python/client.py --wait-ready "$ready_timeout_secs" "$addr"
run_client go "$out/go/go-client" "$addr"
run_client java "$out/java/java-client" "$addr"

step "done"
if ((${#failed[@]})); then
  echo "clients: FAILED: ${failed[*]}; server log:"
  cat "$out/server.log"
  exit 1
fi
echo "clients: go, java and python clients passed"
