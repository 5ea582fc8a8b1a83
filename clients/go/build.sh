#!/usr/bin/env bash
# Generates the Go stubs of the contract and builds the client into OUT (default:
# target/clients/go under the repository root): OUT/go-client. Needs Debian's golang-go,
# protobuf-compiler, protoc-gen-go, protoc-gen-go-grpc and the golang-*-dev libraries (see
# README.md); builds in GOPATH mode against /usr/share/gocode, with no module downloads.
# Usage: clients/go/build.sh [OUT]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${1:-$root/target/clients/go}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

# protoc writes each file under its go_package import path, so OUT/gopath is a GOPATH root.
gopath="$out/gopath"
rm -rf "$gopath"
mkdir -p "$gopath/src"
protoc -I "$root/proto" --go_out="$gopath/src" --go-grpc_out="$gopath/src" \
  "$root/proto/context_assembler/v1/assembler.proto"

# Go's own build cache (under $HOME) is kept warm across work trees; without a home, OUT holds it.
if [[ -z "${GOCACHE:-}${XDG_CACHE_HOME:-}${HOME:-}" ]]; then
  export GOCACHE="$out/gocache"
fi
cd "$root/clients/go"
GO111MODULE=off GOFLAGS= GOPATH="$gopath:/usr/share/gocode" go build -o "$out/go-client" .
echo "go client: $out/go-client"
