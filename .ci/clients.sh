#!/usr/bin/env bash
# CI: the client packages in clients/ (Go, Java, Python), each holding code generated from
# proto/ and a helper. Each package's own check (clients/LANG/check.sh OUT ADDR ADDR_NO_MEMORY
# UNIX_ADDR) regenerates its code into a scratch copy and fails when it differs from the
# checked-in code, builds the package, and runs its tests against real servers: ADDR with a
# memory store (SQLite), ADDR_NO_MEMORY without one, and UNIX_ADDR (unix:/path) on a Unix socket,
# which each helper must reach with its defaults (issue 51: the socket's path sent as :authority
# is refused). Fails if any package fails.
# Usage: bash .ci/clients.sh SERVER_BINARY   (e.g. target/debug/context-assembler)
# Installs what the packages need (Debian packages, the buf CLI); everything generated or built
# goes to target/clients/, never into the source tree.
set -euo pipefail

server="${1:?usage: bash .ci/clients.sh SERVER_BINARY}"
[[ "$server" == /* ]] || server="$PWD/$server"
cd "$(dirname "$0")/.."
[[ -x "$server" ]] || { echo "clients: not an executable: $server" >&2; exit 1; }
out="$PWD/target/clients"
ready_timeout_secs=60

started=$SECONDS
step() { echo "--- [$((SECONDS - started))s] $*"; }

# Debian's toolchains, generators and libraries, so nothing is fetched by Maven or the Go
# module proxy.
apt_packages=(
  protobuf-compiler
  golang-go protoc-gen-go protoc-gen-go-grpc golang-google-grpc-dev golang-google-genproto-dev
  golang-github-golang-protobuf-1-5-dev golang-google-protobuf-dev
  default-jdk-headless protobuf-compiler-grpc-java-plugin libgrpc-java libprotobuf-java
  libnetty-java libperfmark-java libgoogle-gson-java libgoogle-common-protos-java libguava-java
  libgeronimo-annotation-1.3-spec-java junit4
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
# The buf CLI (the Go and Java packages generate through proto/buf.gen.yaml).
bash .ci/buf.sh >/dev/null
export PATH="$PWD/target/buf/node_modules/.bin:$PATH"

mkdir -p "$out"
# The Unix socket's folder: under the system's temporary folder, as a socket's path may be
# at most 107 bytes and the checkout's may be long.
socket_dir="$(mktemp -d)"
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# listening ADDR: whether a connection to ADDR (host:port or unix:PATH) is accepted.
listening() {
  if [[ "$1" == unix:* ]]; then
    python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])' "${1#unix:}" 2>/dev/null
  else
    (: <"/dev/tcp/${1%:*}/${1##*:}") 2>/dev/null
  fi
}
pids=()
stop_servers() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$socket_dir"
}
trap stop_servers EXIT
# start NAME LISTEN ARGS...: a server listening on LISTEN (unix:PATH, or "port" for a free port
# on 127.0.0.1), its address in $addr once it accepts connections.
start() {
  local name="$1" pid tries
  addr="$2"
  shift 2
  [[ "$addr" == port ]] && addr="127.0.0.1:$(free_port)"
  "$server" --listen "$addr" --metrics-listen off "$@" >"$out/$name.log" 2>&1 &
  pid=$!
  pids+=("$pid")
  for ((tries = ready_timeout_secs * 10; tries > 0; tries--)); do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "clients: the $name server exited before listening; its log:"
      cat "$out/$name.log"
      exit 1
    fi
    listening "$addr" && return 0
    sleep 0.1
  done
  echo "clients: the $name server did not listen in ${ready_timeout_secs}s" >&2
  exit 1
}
# Retain, recall and ListMemories need the memory store: a fresh SQLite file per run (each
# package also retains under subjects of its own, so a database left over would do too).
rm -f "$out/memory.db" "$out/memory.db-wal" "$out/memory.db-shm"
start server port --memory-sqlite-path "$out/memory.db"
with_memory="$addr"
start server-no-memory port --memory-store off
without_memory="$addr"
start server-unix "unix:$socket_dir/ca.sock" --memory-store off
on_unix="$addr"
step "servers on $with_memory (memory), $without_memory (no memory) and $on_unix; logs in $out"

failed=()
for lang in python go java; do
  step "$lang package"
  if ! bash "clients/$lang/check.sh" "$out/$lang" "$with_memory" "$without_memory" "$on_unix"; then
    failed+=("$lang")
  fi
done

step "done"
if ((${#failed[@]})); then
  echo "clients: FAILED: ${failed[*]}; server logs:"
  cat "$out/server.log" "$out/server-no-memory.log" "$out/server-unix.log"
  exit 1
fi
echo "clients: the go, java and python packages passed"
